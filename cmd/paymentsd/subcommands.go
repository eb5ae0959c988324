package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes of the operator subcommands, the same for each: a script can
// tell "no" from "could not tell".
const (
	exitOK      = 0
	exitNo      = 1 // the answer is no: no record for the key, a damaged file
	exitUsage   = 2 // bad command line; the usage is printed
	exitFailure = 3 // the command could not do its job: it says why
)

// subcommand is one operator command of the paymentsd binary.
type subcommand struct {
	name, args, summary string
	run                 func(ctx context.Context, sio *stdio, args []string) int
}

// subcommands are listed by paymentsd help in this order.
var subcommands = []subcommand{
	{"record", "--principal P --key K [--db DB] [--json]", "what happened to an idempotency key: state, attempt, fingerprint, result", runRecord},
	{"backup", "FILE [--db DB]", "a consistent copy of the bbolt data file, while the server runs or not", runBackup},
	{"check", "[--db DB]", "check the bbolt data file's structure: exit 0 when sound, 1 with the findings", runCheck},
	{"hash-token", "PRINCIPAL < token", `print the --api-keys line "PRINCIPAL sha256:<hex>" of the token on standard input`, runHashToken},
	{"dev-certs", "DIR", "write a development CA, server and client certificates into DIR to try TLS and mutual TLS (never for production)", runDevCerts},
	{"version", "", "the module version and the revision it was built from (also --version)", runVersion},
}

// stdio is where a subcommand reads and writes; tests swap it.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// runSubcommand runs the subcommand args name, if they name one, and
// returns its exit code. ok is false when args are the server's flags:
// paymentsd with no subcommand serves, as it always has.
func runSubcommand(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	if strings.HasPrefix(name, "-") {
		return 0, false
	}
	sio := &stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}
	if name == "help" {
		return runHelp(sio), true
	}
	for _, c := range subcommands {
		if c.name == name {
			// The first Ctrl-C cancels, so that a backup removes its partial
			// copy; a second one kills.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			context.AfterFunc(ctx, stop)
			return c.run(ctx, sio, args[1:]), true
		}
	}
	fmt.Fprintf(sio.err, "paymentsd: unknown subcommand %q\n\n", name)
	printCommands(sio.err)
	return exitUsage, true
}

// runHelp lists the subcommands, then the server's flags.
func runHelp(sio *stdio) int {
	printCommands(sio.out)
	fmt.Fprintln(sio.out, "\nFlags of the server (paymentsd [flags]):")
	// ParseFlags prints its flags to os.Stderr, which help sends to
	// standard output with the rest, so that `paymentsd help | less` works.
	// The process exits right after.
	os.Stderr = os.Stdout
	NewMain(io.Discard).ParseFlags([]string{"-h"})
	return exitOK
}

func printCommands(w io.Writer) {
	fmt.Fprintln(w, "Usage:\n\n  paymentsd [flags]\n      serve payments.v1.PaymentIntentService; the flags are below")
	for _, c := range subcommands {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace("paymentsd "+c.name+" "+c.args), c.summary)
	}
	fmt.Fprintln(w, "  paymentsd help\n      this list, and the server's flags (also -h)")
	fmt.Fprintln(w, "\n"+envHelp)
	fmt.Fprintln(w, "\nRun paymentsd SUBCOMMAND -h for its flags. Exit codes: 0 done; 1 the answer is no (no record\nfor the key, a damaged file); 2 bad command line; 3 the command failed, saying why.")
}

// newFlagSet is a subcommand's flag set, its usage written to sio.err.
func newFlagSet(sio *stdio, name, args, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("paymentsd "+name, flag.ContinueOnError)
	fs.SetOutput(sio.err)
	fs.Usage = func() {
		fmt.Fprintf(sio.err, "usage: paymentsd %s %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses args with fs, flags and operands in any order (backup
// FILE --db DB as well as backup --db DB FILE), and returns the operands.
// The exit code is meaningful when err is not nil: 0 after -h, else 2,
// the usage printed.
func parseArgs(fs *flag.FlagSet, args []string) (operands []string, code int, err error) {
	if err := defaultsFromEnv(fs, serverFlags()); err != nil {
		return nil, usageError(fs, "%v", err), err
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, err
			}
			return nil, exitUsage, err // flag printed the error and the usage
		}
		if fs.NArg() == 0 {
			break
		}
		rest := fs.Args()
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			operands = append(operands, rest...) // after --, all are operands
			break
		}
		operands, args = append(operands, rest[0]), rest[1:]
	}
	return operands, 0, nil
}

// usageError prints msg and fs's usage, and returns exit code 2.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return exitUsage
}

// fail prints err for a person and returns exit code 3.
func fail(sio *stdio, name string, err error) int {
	fmt.Fprintf(sio.err, "paymentsd %s: %v\n", name, err)
	return exitFailure
}

// noDB is the usage error of an empty --db.
const noDB = "--db must name a data file or a postgres:// URL"

// defaultDB is the server's default --db, so that a subcommand finds the
// file of `make run` without being told.
func defaultDB() string { return NewMain(io.Discard).Config.DB }
