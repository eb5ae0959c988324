package keycmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/storage"
)

// recordAbout is what paymentsd record -h says above its flags.
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

// Record is paymentsd record: support's "what happened to key X?".
func Record(ctx context.Context, sio *cli.Stdio, args []string) int {
	q, code := parseRecordArgs(sio, "paymentsd record", recordAbout, args)
	if q == nil {
		return code
	}
	k, err := q.recordKey(sio)
	if err != nil {
		return cli.Fail(sio, "paymentsd record", err)
	}
	db, err := q.pods.dbOf(ctx, q.db, k.Scope)
	switch {
	case err != nil:
		return cli.Fail(sio, "paymentsd record", err)
	case db == "": // placed on no pod: never used
		return noRecord(sio, q, k)
	}
	lookup := recordview.LookupBolt
	if pgURL, _ := config.ParseDB(db); pgURL != "" {
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
		return noRecord(sio, q, k)
	}
	v := recordview.New(k, rec, time.Now())
	if q.json {
		writeJSON(sio, v)
	} else {
		v.WriteText(sio.Out, time.Now())
	}
	return cli.ExitOK
}

// noRecord says there is no record of k, asked for as q asks, and exits
// 1. With --json it says so as a JSON object on standard output. A script
// piping into jq then reads an answer, not nothing.
func noRecord(sio *cli.Stdio, q *recordQuery, k storage.RecordKey) int {
	msg := fmt.Sprintf("no record of key %q for principal %q: never used, or expired and swept (records live --ttl from their first use)", k.Key, k.Scope) +
		principalHint(q)
	if !q.json {
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

// principalHint says how else the key's principal may be named, for a
// key not found. The command does not know how the server authenticates.
// So it names only what follows from how it was given the principal.
func principalHint(q *recordQuery) string {
	switch {
	case q.tokenStdin && q.apiKeys != "":
		return "" // the file named the token's principal
	case q.tokenStdin:
		return `; with no --api-keys, the token was taken as dev mode's, whose principal is "dev:" and its SHA-256: if the server runs with --api-keys, give that file too`
	}
	return `; a principal is the name on its token's line in the server's --api-keys, "dev:" and its token's SHA-256 in dev mode, or a client certificate's (spiffe://... or "dns:" and its DNS SAN): to name it by its token, use --token-stdin, with --api-keys FILE if the server has one`
}

// writeJSON prints v indented, as record --json prints a record.
func writeJSON(sio *cli.Stdio, v any) {
	enc := json.NewEncoder(sio.Out)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
