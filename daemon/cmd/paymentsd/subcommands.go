package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/credcmd"
	"github.com/paymentsd/paymentsd/daemon/healthcmd"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/keycmd"
	"github.com/paymentsd/paymentsd/daemon/podmove"
)

// program is paymentsd's operator subcommands, listed by paymentsd help in
// this order; with none, paymentsd serves, as it always has.
var program = cli.Program{
	Name: "paymentsd",
	Main: "serve payments.v1.PaymentIntentService; the flags are below",
	Commands: []cli.Command{
		{Name: "record", Args: "--principal P --key K [--db DB] [--json]", Summary: "what happened to an idempotency key: state, attempt, fingerprint, result", Run: keycmd.Record},
		{Name: "intents", Args: "--principal P [--since 24h] [--duplicates] [--db DB] [--json]", Summary: "a principal's intents, newest first, with their keys; or the same payment made under two keys", Run: keycmd.Intents},
		{Name: "release", Args: "--principal P --key K [--db DB] [--json]", Summary: "release a key whose stored result is a transactional method's error, so that it runs fresh; refuses any other", Run: keycmd.Release},
		{Name: "move", Args: "--principal P --to POD [--pods FILE] [--placement-etcd URLS]", Summary: "move a principal's records and intents to another pod while the servers serve; run again, it finishes or undoes a move that stopped", Run: podmove.Run},
		{Name: "backup", Args: "FILE [--db DB]", Summary: "a consistent copy of the bbolt data file, while the server runs or not", Run: runBackup},
		{Name: "check", Args: "[--db DB]", Summary: "check the bbolt data file's structure: exit 0 when sound, 1 with the findings", Run: runCheck},
		{Name: "compact", Args: "[--db DB]", Summary: "rewrite the stopped server's bbolt data file without its free pages, in place; refuses a file a running paymentsd holds", Run: runCompact},
		{Name: "health", Args: "[--addr A] [--tls-ca F] [--tls-cert F --tls-key F] [--service NAME] [--timeout D]", Summary: "ask a running server's grpc.health.v1: exit 0 when it answers SERVING, 1 otherwise; for container health checks and exec probes", Run: healthcmd.Run},
		{Name: "hash-token", Args: "PRINCIPAL < token", Summary: `print the --api-keys line "PRINCIPAL sha256:<hex>" of the token on standard input`, Run: credcmd.HashToken},
		{Name: "dev-certs", Args: "DIR", Summary: "write a development CA, server and client certificates into DIR to try TLS and mutual TLS (never for production)", Run: credcmd.DevCerts},
		{Name: "version", Summary: "the release, the revision and the Go version it was built from (also --version)", Run: cli.Version("paymentsd")},
	},
	Help: "this list, and the server's flags (also -h)",
	// The environment's paragraph ends the server's flags, printed last.
	Notes: "Run paymentsd SUBCOMMAND -h for its usage. Exit codes: 0 done; 1 the answer is no (no record\n" +
		"for the key, a release refused, a damaged file, a file in use, a server not serving); 2 bad\n" +
		"command line; 3 the command failed, saying why.",
	Flags: printServerFlags,
}

// printServerFlags ends paymentsd help with the server's flags.
func printServerFlags(w io.Writer) {
	fmt.Fprintln(w) // the server's usage names its section
	// ParseFlags prints its flags to os.Stderr, which help sends to
	// standard output with the rest, so that `paymentsd help | less` works.
	// The process exits right after.
	os.Stderr = os.Stdout
	NewMain(io.Discard).ParseFlags([]string{"-h"})
}

// parseArgs parses a subcommand's command line, the flags it shares with
// the server defaulting to their PAYMENTSD_ variables.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, int, error) {
	return cli.ParseArgs(fs, args, config.SharedDefaults)
}

// defaultDB is the server's default --db, so that a subcommand finds the
// file of `make run` without being told.
func defaultDB() string { return config.Default().DB }
