package cli_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/internal/cli"
)

// newFlagSet is a flag set with --db, its usage written to errOut.
func newFlagSet(errOut io.Writer) (*flag.FlagSet, *string) {
	fs := cli.NewFlagSet(&cli.Stdio{Err: errOut}, "prog backup", "FILE [--db DB]", "Copies.")
	return fs, fs.String("db", "default.db", "the file")
}

func TestParseArgs_FlagsAndOperandsInAnyOrder(t *testing.T) {
	for _, args := range [][]string{
		{"copy", "--db", "x.db"},
		{"--db", "x.db", "copy"},
		{"--db=x.db", "copy"},
	} {
		fs, db := newFlagSet(io.Discard)
		operands, code, err := cli.ParseArgs(fs, args, nil)
		if err != nil || code != cli.ExitOK || *db != "x.db" || !slices.Equal(operands, []string{"copy"}) {
			t.Errorf("%q: operands %q, db %q, code %d, %v", args, operands, *db, code, err)
		}
	}
}

func TestParseArgs_AfterDoubleDashAllAreOperands(t *testing.T) {
	fs, db := newFlagSet(io.Discard)
	operands, _, err := cli.ParseArgs(fs, []string{"a", "--", "--db", "b"}, nil)
	if err != nil || *db != "default.db" || !slices.Equal(operands, []string{"a", "--db", "b"}) {
		t.Errorf("operands %q, db %q, %v", operands, *db, err)
	}
}

func TestParseArgs_HelpExits0_BadFlagExits2(t *testing.T) {
	var errOut bytes.Buffer
	fs, _ := newFlagSet(&errOut)
	if _, code, err := cli.ParseArgs(fs, []string{"-h"}, nil); !errors.Is(err, flag.ErrHelp) || code != cli.ExitOK {
		t.Errorf("-h: code %d, %v", code, err)
	}
	if !strings.Contains(errOut.String(), "usage: prog backup FILE [--db DB]\n\nCopies.\n\nFlags:\n  -db") {
		t.Errorf("-h printed:\n%s", errOut.String())
	}
	fs, _ = newFlagSet(io.Discard)
	if _, code, err := cli.ParseArgs(fs, []string{"--nope"}, nil); err == nil || code != cli.ExitUsage {
		t.Errorf("--nope: code %d, %v", code, err)
	}
}

func TestParseArgs_DefaultsFirst_CommandLineWins_RefusalExits2(t *testing.T) {
	env := func(fs *flag.FlagSet) error { return fs.Set("db", "env.db") }
	fs, db := newFlagSet(io.Discard)
	if _, _, err := cli.ParseArgs(fs, nil, env); err != nil || *db != "env.db" {
		t.Errorf("db %q, %v; want env.db", *db, err)
	}
	fs, db = newFlagSet(io.Discard)
	if _, _, err := cli.ParseArgs(fs, []string{"--db", "flag.db"}, env); err != nil || *db != "flag.db" {
		t.Errorf("db %q, %v; want flag.db", *db, err)
	}
	var errOut bytes.Buffer
	fs, _ = newFlagSet(&errOut)
	bad := func(*flag.FlagSet) error { return errors.New("PROG_DB is set but empty") }
	if _, code, err := cli.ParseArgs(fs, nil, bad); err == nil || code != cli.ExitUsage {
		t.Errorf("a refused default: code %d, %v", code, err)
	}
	if !strings.HasPrefix(errOut.String(), "prog backup: PROG_DB is set but empty\n\nusage: prog backup") {
		t.Errorf("a refused default printed:\n%s", errOut.String())
	}
}

func TestFail_Exits3_SayingWhy(t *testing.T) {
	var errOut bytes.Buffer
	if code := cli.Fail(&cli.Stdio{Err: &errOut}, "prog backup", errors.New("disk full")); code != cli.ExitFailure || errOut.String() != "prog backup: disk full\n" {
		t.Errorf("code %d, printed %q", code, errOut.String())
	}
}

func TestProgram_Run(t *testing.T) {
	var got []string
	p := cli.Program{
		Name: "prog", Main: "serve", Help: "this list",
		Commands: []cli.Command{
			{Name: "echo", Args: "WORDS", Summary: "says WORDS", Run: func(_ context.Context, sio *cli.Stdio, args []string) int {
				got = args
				return cli.ExitNo
			}},
			{Name: "version", Summary: "the version", Run: func(context.Context, *cli.Stdio, []string) int { return 7 }},
		},
		Notes: "NOTES",
		Flags: func(w io.Writer) { io.WriteString(w, "FLAGS\n") },
	}
	run := func(args ...string) (string, string, int, bool) {
		var out, errOut bytes.Buffer
		code, ok := p.Run(&cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errOut}, args)
		return out.String(), errOut.String(), code, ok
	}
	for _, args := range [][]string{nil, {"--listen", "x"}, {"-db=x"}} {
		if _, _, _, ok := run(args...); ok {
			t.Errorf("%q runs a subcommand: they are the main job's flags", args)
		}
	}
	if _, _, code, ok := run("echo", "a", "b"); !ok || code != cli.ExitNo || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("echo: code %d, ok %t, args %q", code, ok, got)
	}
	if _, _, code, _ := run("--version"); code != 7 {
		t.Errorf("--version: code %d, not version's", code)
	}
	list := "Usage:\n\n  prog [flags]\n      serve\n  prog echo WORDS\n      says WORDS\n  prog version\n      the version\n  prog help\n      this list\n\nNOTES\n"
	for _, h := range []string{"help", "-h", "--help"} {
		if out, _, code, ok := run(h); !ok || code != cli.ExitOK || out != list+"FLAGS\n" {
			t.Errorf("%s: code %d, printed\n%s", h, code, out)
		}
	}
	if _, errOut, code, _ := run("nope"); code != cli.ExitUsage || errOut != "prog: unknown subcommand \"nope\"\n\n"+list {
		t.Errorf("nope: code %d, printed\n%s", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	sio := &cli.Stdio{Out: &out, Err: &errOut}
	if code := cli.Version("prog")(context.Background(), sio, nil); code != cli.ExitOK || !strings.HasPrefix(out.String(), "prog ") || !strings.Contains(out.String(), "\ngo:        go") {
		t.Errorf("code %d, printed\n%s", code, out.String())
	}
	if code := cli.Version("prog")(context.Background(), sio, []string{"x"}); code != cli.ExitUsage ||
		errOut.String() != "prog version: takes no arguments, got [\"x\"]\nusage: prog version\n" {
		t.Errorf("an argument: code %d, printed %q", code, errOut.String())
	}
}
