// Package keycmd is paymentsd record and release, support's two
// subcommands on one idempotency key. Record shows what was stored for
// it; release lets its next request run fresh. Both ask for the key the
// same way.
package keycmd

import (
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/internal/envflags"
	"github.com/paymentsd/paymentsd/internal/bearer"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// recordQuery is what paymentsd record (or release) was asked.
type recordQuery struct {
	db, principal, apiKeys, key string
	tokenStdin, json            bool
	pods                        onPods
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

// parseRecordArgs parses the arguments of paymentsd record or release,
// named name. It returns nil and the exit code when they ask for nothing:
// -h, or a usage error.
func parseRecordArgs(sio *cli.Stdio, name, about string, args []string) (*recordQuery, int) {
	fs := cli.NewFlagSet(sio, name, "(--principal P | --token-stdin [--api-keys FILE]) --key K [--db DB] [--json]", about)
	q := new(recordQuery)
	fs.StringVar(&q.db, "db", config.Default().DB, "the bbolt data file, or a postgres:// URL, as given to the server")
	fs.StringVar(&q.principal, "principal", "", `the principal the key belongs to: as listed in --api-keys, "dev:<hex>" in dev mode, or a client certificate's (spiffe://... or dns:<name>)`)
	fs.BoolVar(&q.tokenStdin, "token-stdin", false, "read the client's bearer token from standard input and look up its principal's key")
	fs.StringVar(&q.apiKeys, "api-keys", "", "with --token-stdin: the server's --api-keys file, to find the token's principal; without it, dev mode's")
	fs.StringVar(&q.key, "key", "", "the idempotency key")
	fs.BoolVar(&q.json, "json", false, "print JSON, for scripts")
	q.pods.define(fs)
	operands, code, err := cli.ParseArgs(fs, args, config.SharedDefaults)
	switch {
	case err != nil:
		return nil, code
	case len(operands) > 0:
		return nil, cli.UsageError(fs, "unexpected arguments %q", operands)
	case q.pods.check() != nil:
		return nil, cli.UsageError(fs, "%v", q.pods.check())
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
