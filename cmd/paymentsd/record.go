package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/bearer"
	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/interceptor/wire"
	"github.com/paymentsd/paymentsd/internal/cli"
	"github.com/paymentsd/paymentsd/internal/envflags"
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
func runRecord(ctx context.Context, sio *cli.Stdio, args []string) int {
	q, code := parseRecordArgs(sio, "paymentsd record", recordAbout, args)
	if q == nil {
		return code
	}
	k, err := q.recordKey(sio)
	if err != nil {
		return cli.Fail(sio, "paymentsd record", err)
	}
	lookup, db := recordview.LookupBolt, q.db
	if pgURL, _ := config.ParseDB(q.db); pgURL != "" {
		lookup, db = recordview.LookupPostgres, pgURL
	}
	rec, err := lookup(ctx, db, k)
	if errors.Is(err, boltstore.ErrDamaged) {
		fmt.Fprintf(sio.Err, "paymentsd record: %v\n", err)
		return cli.ExitNo // as check answers a damaged file
	}
	if err != nil {
		return cli.Fail(sio, "paymentsd record", err)
	}
	if rec == nil {
		return noRecord(sio, k, q.json)
	}
	v := recordview.New(k, rec, time.Now())
	if q.json {
		writeJSON(sio, v)
	} else {
		v.WriteText(sio.Out, time.Now())
	}
	return cli.ExitOK
}

// noRecord says there is no record of k, with --json as a JSON object on
// standard output, so that a script piping into jq reads an answer, not
// nothing; exit 1 either way.
func noRecord(sio *cli.Stdio, k storage.RecordKey, asJSON bool) int {
	msg := fmt.Sprintf("no record of key %q for principal %q: never used, or expired and swept (records live --ttl from their first use)", k.Key, k.Scope)
	if !strings.HasPrefix(k.Scope, "dev:") {
		msg += `; in dev mode a principal is "dev:" and its token's SHA-256: use --token-stdin`
	}
	if !asJSON {
		fmt.Fprintf(sio.Err, "paymentsd record: %s\n", msg)
		return cli.ExitNo
	}
	writeJSON(sio, struct {
		Principal string `json:"principal"`
		Key       string `json:"key"`
		Found     bool   `json:"found"`
		Message   string `json:"message"`
	}{k.Scope, k.Key, false, msg})
	return cli.ExitNo
}

// writeJSON prints v indented, as record --json prints a record.
func writeJSON(sio *cli.Stdio, v any) {
	enc := json.NewEncoder(sio.Out)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// recordQuery is what paymentsd record (or release) was asked.
type recordQuery struct {
	db, principal, apiKeys, key string
	tokenStdin, json            bool
}

// recordKey is the key asked for, its principal read from the token on
// standard input with --token-stdin.
func (q *recordQuery) recordKey(sio *cli.Stdio) (storage.RecordKey, error) {
	k := storage.RecordKey{Scope: q.principal, Key: q.key}
	if !q.tokenStdin {
		return k, nil
	}
	token, err := bearer.ReadToken(sio.In)
	if err == nil {
		k.Scope, err = auth.PrincipalOfToken(token, q.apiKeys)
	}
	return k, err
}

// parseRecordArgs parses the arguments of paymentsd record, or of release
// (name), which asks for a key the same way. It returns nil and the exit
// code when they ask for nothing: -h, or a usage error.
func parseRecordArgs(sio *cli.Stdio, name, about string, args []string) (*recordQuery, int) {
	fs := cli.NewFlagSet(sio, name, "(--principal P | --token-stdin [--api-keys FILE]) --key K [--db DB] [--json]", about)
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
		return nil, cli.UsageError(fs, "unexpected arguments %q", operands)
	case q.key == "":
		return nil, cli.UsageError(fs, "--key is required")
	case q.db == "":
		return nil, cli.UsageError(fs, config.NoDB)
	case (q.principal == "") == !q.tokenStdin:
		return nil, cli.UsageError(fs, "give one of --principal and --token-stdin")
	case envflags.Given(fs, "api-keys") && !q.tokenStdin: // PAYMENTSD_API_KEYS, set for the server, is no mistake
		return nil, cli.UsageError(fs, "--api-keys goes with --token-stdin")
	case q.principal != "" && !auth.ValidPrincipal(q.principal) && !auth.ValidDevPrincipal(q.principal) && !auth.ValidCertPrincipal(q.principal):
		return nil, cli.UsageError(fs, `--principal %q names no principal: one is 1 to 64 of A-Z a-z 0-9 . _ - as in --api-keys, or, in dev mode, "dev:" and its token's SHA-256 in hex, or a client certificate's URI SAN (spiffe://...) or "dns:" and its DNS SAN (or use --token-stdin)`, q.principal)
	}
	if err := wire.ValidateKey(q.key); err != nil {
		return nil, cli.UsageError(fs, "--key %q is no idempotency key: %v", q.key, err)
	}
	if _, err := config.ParseDB(q.db); err != nil {
		return nil, cli.UsageError(fs, "%v", err)
	}
	return q, 0
}
