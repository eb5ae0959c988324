package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/bearer"
	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/boltadmin"
	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/pgstore"
)

const recordAbout = `Prints what paymentsd stored for an idempotency key of a principal: its state
(in_flight, completed, expired), attempt, fingerprint, lease and record
expiry, and the stored result (gRPC code and message; the intent id of a
stored create or cancel). Keys belong to principals: with --api-keys it is
the principal named in that file; in dev mode it is "dev:" and the token's
SHA-256, so pass the token on standard input with --token-stdin (with
--api-keys FILE too, the token's principal in FILE).

A bbolt file is read directly when no server holds it, otherwise through
the running server's admin socket (DB.admin.sock); a postgres:// URL is
queried directly. A create in progress is not seen: its claim is committed
with its result. Exit 0 with the record, 1 when there is none or the file
is damaged, 2 for a principal or key that names none, 3 when the lookup
failed.`

// runRecord is paymentsd record: support's "what happened to key X?".
func runRecord(ctx context.Context, sio *stdio, args []string) int {
	fs := newFlagSet(sio, "record", "(--principal P | --token-stdin [--api-keys FILE]) --key K [--db DB] [--json]", recordAbout)
	db := fs.String("db", defaultDB(), "the bbolt data file, or a postgres:// URL, as given to the server")
	principal := fs.String("principal", "", `the principal the key belongs to: as listed in --api-keys, "dev:<hex>" in dev mode, or a client certificate's (spiffe://... or dns:<name>)`)
	tokenStdin := fs.Bool("token-stdin", false, "read the client's bearer token from standard input and look up its principal's key")
	apiKeys := fs.String("api-keys", "", "with --token-stdin: the server's --api-keys file, to find the token's principal; without it, dev mode's")
	key := fs.String("key", "", "the idempotency key")
	asJSON := fs.Bool("json", false, "print JSON, for scripts")
	operands, code, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return code
	case len(operands) > 0:
		return usageError(fs, "unexpected arguments %q", operands)
	case *key == "":
		return usageError(fs, "--key is required")
	case *db == "":
		return usageError(fs, noDB)
	case (*principal == "") == !*tokenStdin:
		return usageError(fs, "give one of --principal and --token-stdin")
	case given(fs, "api-keys") && !*tokenStdin: // PAYMENTSD_API_KEYS, set for the server, is no mistake
		return usageError(fs, "--api-keys goes with --token-stdin")
	case *principal != "" && !auth.ValidPrincipal(*principal) && !auth.ValidDevPrincipal(*principal) && !auth.ValidCertPrincipal(*principal):
		return usageError(fs, `--principal %q names no principal: one is 1 to 64 of A-Z a-z 0-9 . _ - as in --api-keys, or, in dev mode, "dev:" and its token's SHA-256 in hex, or a client certificate's URI SAN (spiffe://...) or "dns:" and its DNS SAN (or use --token-stdin)`, *principal)
	}
	if err := interceptor.ValidateKey(*key); err != nil {
		return usageError(fs, "--key %q is no idempotency key: %v", *key, err)
	}
	if _, err := parseDB(*db); err != nil {
		return usageError(fs, "%v", err)
	}
	scope := *principal
	if *tokenStdin {
		if scope, err = principalOfToken(sio.in, *apiKeys); err != nil {
			return fail(sio, "record", err)
		}
	}
	k := interceptor.RecordKey{Scope: scope, Key: *key}
	rec, err := lookupRecord(ctx, *db, k)
	if errors.Is(err, boltstore.ErrDamaged) {
		fmt.Fprintf(sio.err, "paymentsd record: %v\n", err)
		return exitNo // as check answers a damaged file
	}
	if err != nil {
		return fail(sio, "record", err)
	}
	if rec == nil {
		msg := fmt.Sprintf("no record of key %q for principal %q: never used, or expired and swept (records live --ttl from their first use)", k.Key, k.Scope)
		if !strings.HasPrefix(k.Scope, "dev:") {
			msg += `; in dev mode a principal is "dev:" and its token's SHA-256: use --token-stdin`
		}
		fmt.Fprintf(sio.err, "paymentsd record: %s\n", msg)
		return exitNo
	}
	v := newRecordView(k, rec, time.Now())
	if *asJSON {
		enc := json.NewEncoder(sio.out)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	} else {
		v.print(sio.out, time.Now())
	}
	return exitOK
}

// principalOfToken reads a bearer token from r and returns its principal:
// the one apiKeys lists for it, or dev mode's when apiKeys is empty.
func principalOfToken(r io.Reader, apiKeys string) (string, error) {
	token, err := readToken(r)
	if err != nil {
		return "", err
	}
	keys := auth.Dev()
	if apiKeys != "" {
		if keys, err = auth.LoadFile(apiKeys); err != nil {
			return "", err
		}
	}
	p, ok := keys.Authenticate(token)
	if !ok {
		return "", fmt.Errorf("the token is not listed in %s", apiKeys)
	}
	return p, nil
}

// readToken reads one token from r: its first line, without the line
// break that echo or a terminal adds, read by the rule the server reads a
// bearer token by, so that the same bytes name the same principal here.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read the token: %w", err)
	}
	token, err := bearer.ParseToken(strings.TrimRight(line, "\r\n"))
	if err != nil {
		return "", fmt.Errorf("the token on standard input: %s", status.Convert(err).Message())
	}
	return token, nil
}

// lookupRecord returns k's record in db, a bbolt file or a postgres:// URL,
// or nil when there is none.
func lookupRecord(ctx context.Context, db string, k interceptor.RecordKey) (*interceptor.Record, error) {
	pgURL, err := parseDB(db)
	if err != nil {
		return nil, err
	}
	if pgURL != "" {
		ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
		defer cancel()
		// A lookup never changes the schema under the servers: a database
		// not at this binary's version is refused, naming both.
		pg, err := pgstore.Open(ctx, pgURL, &pgstore.Options{MaxConns: 2, NoMigrate: true})
		if err != nil {
			return nil, err
		}
		defer pg.Close()
		return pg.Get(ctx, k)
	}
	src, err := boltadmin.Open(db)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return src.Get(ctx, k)
}

// recordView is a record as paymentsd record prints it. The JSON names are
// stable, for scripts; a field that does not apply is null.
type recordView struct {
	Principal         string     `json:"principal"`
	Key               string     `json:"key"`
	State             string     `json:"state"` // in_flight, completed or expired
	Attempt           uint64     `json:"attempt"`
	Fingerprint       string     `json:"fingerprint"` // hex
	FingerprintScheme string     `json:"fingerprint_scheme"`
	Owner             string     `json:"owner"`        // the process that claimed it
	LeaseExpiry       *time.Time `json:"lease_expiry"` // of a claim in flight
	Expiry            time.Time  `json:"expiry"`
	Completed         bool       `json:"completed"`
	Code              *string    `json:"code"` // OK, INVALID_ARGUMENT, ...
	Message           *string    `json:"message"`
	Details           []string   `json:"details"`       // the error's detail types
	ResponseType      *string    `json:"response_type"` // of a stored response
	IntentID          *string    `json:"intent_id"`     // of a stored create or cancel
}

func newRecordView(k interceptor.RecordKey, rec *interceptor.Record, now time.Time) *recordView {
	v := &recordView{
		Principal:         k.Scope,
		Key:               k.Key,
		Attempt:           rec.Attempt,
		Fingerprint:       hex.EncodeToString(rec.Fingerprint[:]),
		FingerprintScheme: rec.Scheme,
		Owner:             rec.Owner,
		Expiry:            rec.Expiry.UTC(),
		Completed:         rec.State == interceptor.StateCompleted,
		Details:           []string{},
	}
	switch {
	case !rec.Expiry.After(now):
		v.State = "expired"
	case v.Completed:
		v.State = "completed"
	default:
		v.State = "in_flight"
	}
	if !v.Completed && !rec.LeaseExpiry.IsZero() {
		t := rec.LeaseExpiry.UTC()
		v.LeaseExpiry = &t
	}
	if res := rec.Result; res != nil {
		c, msg := code.Code_OK.String(), ""
		if res.Status != nil {
			c, msg = code.Code(res.Status.Code).String(), res.Status.Message
			for _, d := range res.Status.Details {
				v.Details = append(v.Details, string(d.MessageName()))
			}
		}
		v.Code, v.Message = &c, &msg
		if res.Response != nil {
			typ := string(res.Response.MessageName())
			v.ResponseType = &typ
			v.IntentID = storedIntentID(res.Response)
		}
	}
	return v
}

// storedIntentID returns the id of the payment intent a stored payments.v1
// response carries, if it carries one.
func storedIntentID(resp *anypb.Any) *string {
	if resp.MessageName().Parent() != "payments.v1" {
		return nil
	}
	m, err := resp.UnmarshalNew()
	if err != nil {
		return nil
	}
	withIntent, ok := m.(interface {
		GetPaymentIntent() *paymentsv1.PaymentIntent
	})
	if !ok || withIntent.GetPaymentIntent() == nil {
		return nil
	}
	id := withIntent.GetPaymentIntent().GetId()
	return &id
}

// print writes v for a person, one field a line.
func (v *recordView) print(w io.Writer, now time.Time) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-19s "+format+"\n", append([]any{name + ":"}, args...)...)
	}
	line("principal", "%s", v.Principal)
	line("key", "%q", v.Key)
	state := strings.ReplaceAll(v.State, "_", " ")
	switch {
	case v.State == "expired" && v.Completed:
		state += " (completed; the key now runs fresh)"
	case v.State == "expired":
		state += " (never completed; the key now runs fresh)"
	case v.State == "in_flight" && v.LeaseExpiry != nil && !v.LeaseExpiry.After(now):
		state += " (its lease ran out: the next retry takes it over)"
	}
	line("state", "%s", state)
	line("attempt", "%d", v.Attempt)
	line("fingerprint", "%s", v.Fingerprint)
	line("fingerprint scheme", "%s", v.FingerprintScheme)
	if v.LeaseExpiry != nil {
		line("lease expires", "%s", when(*v.LeaseExpiry, now))
	}
	line("record expires", "%s", when(v.Expiry, now))
	if v.Code != nil {
		line("code", "%s", *v.Code)
		if *v.Message != "" {
			line("message", "%s", *v.Message)
		}
		if len(v.Details) > 0 {
			line("details", "%s", strings.Join(v.Details, ", "))
		}
	}
	if v.ResponseType != nil {
		line("response", "%s", *v.ResponseType)
	}
	if v.IntentID != nil {
		line("intent", "%s", *v.IntentID)
	}
	if v.Owner != "" {
		line("claimed by", "%s", v.Owner)
	}
}

// when is t in UTC and how far from now.
func when(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d >= 0 {
		return fmt.Sprintf("%s (in %s)", t.Format(time.RFC3339), d)
	}
	return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), -d)
}
