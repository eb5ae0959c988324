package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/bearer"
	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/interceptor/wire"
	"github.com/paymentsd/paymentsd/recordview"
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
	q, code := parseRecordArgs(sio, args)
	if q == nil {
		return code
	}
	k := storage.RecordKey{Scope: q.principal, Key: q.key}
	if q.tokenStdin {
		var err error
		if k.Scope, err = principalOfToken(sio.in, q.apiKeys); err != nil {
			return fail(sio, "record", err)
		}
	}
	lookup, db := recordview.LookupBolt, q.db
	if pgURL, _ := parseDB(q.db); pgURL != "" {
		lookup, db = recordview.LookupPostgres, pgURL
	}
	rec, err := lookup(ctx, db, k)
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
	v := recordview.New(k, rec, time.Now())
	if q.json {
		enc := json.NewEncoder(sio.out)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	} else {
		v.WriteText(sio.out, time.Now())
	}
	return exitOK
}

// recordQuery is what paymentsd record was asked.
type recordQuery struct {
	db, principal, apiKeys, key string
	tokenStdin, json            bool
}

// parseRecordArgs parses paymentsd record's arguments. It returns nil and
// the exit code when they ask for no lookup: -h, or a usage error.
func parseRecordArgs(sio *stdio, args []string) (*recordQuery, int) {
	fs := newFlagSet(sio, "record", "(--principal P | --token-stdin [--api-keys FILE]) --key K [--db DB] [--json]", recordAbout)
	q := new(recordQuery)
	fs.StringVar(&q.db, "db", defaultDB(), "the bbolt data file, or a postgres:// URL, as given to the server")
	fs.StringVar(&q.principal, "principal", "", `the principal the key belongs to: as listed in --api-keys, "dev:<hex>" in dev mode, or a client certificate's (spiffe://... or dns:<name>)`)
	fs.BoolVar(&q.tokenStdin, "token-stdin", false, "read the client's bearer token from standard input and look up its principal's key")
	fs.StringVar(&q.apiKeys, "api-keys", "", "with --token-stdin: the server's --api-keys file, to find the token's principal; without it, dev mode's")
	fs.StringVar(&q.key, "key", "", "the idempotency key")
	fs.BoolVar(&q.json, "json", false, "print JSON, for scripts")
	operands, code, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return nil, code
	case len(operands) > 0:
		return nil, usageError(fs, "unexpected arguments %q", operands)
	case q.key == "":
		return nil, usageError(fs, "--key is required")
	case q.db == "":
		return nil, usageError(fs, noDB)
	case (q.principal == "") == !q.tokenStdin:
		return nil, usageError(fs, "give one of --principal and --token-stdin")
	case given(fs, "api-keys") && !q.tokenStdin: // PAYMENTSD_API_KEYS, set for the server, is no mistake
		return nil, usageError(fs, "--api-keys goes with --token-stdin")
	case q.principal != "" && !auth.ValidPrincipal(q.principal) && !auth.ValidDevPrincipal(q.principal) && !auth.ValidCertPrincipal(q.principal):
		return nil, usageError(fs, `--principal %q names no principal: one is 1 to 64 of A-Z a-z 0-9 . _ - as in --api-keys, or, in dev mode, "dev:" and its token's SHA-256 in hex, or a client certificate's URI SAN (spiffe://...) or "dns:" and its DNS SAN (or use --token-stdin)`, q.principal)
	}
	if err := wire.ValidateKey(q.key); err != nil {
		return nil, usageError(fs, "--key %q is no idempotency key: %v", q.key, err)
	}
	if _, err := parseDB(q.db); err != nil {
		return nil, usageError(fs, "%v", err)
	}
	return q, 0
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
