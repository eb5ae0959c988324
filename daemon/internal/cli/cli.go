// Package cli runs a program's operator subcommands. It chooses one by the
// first argument, and gives help. It takes flags and operands in any
// order. Its exit codes let a script tell outcomes apart.
package cli

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

// Exit codes of the subcommands, the same for each. A script can tell
// "no" from "could not tell".
const (
	ExitOK      = 0
	ExitNo      = 1 // the answer is no: no record for the key, a damaged file
	ExitUsage   = 2 // bad command line; the usage is printed
	ExitFailure = 3 // the command could not do its job: it says why
)

// Stdio is where a subcommand reads and writes; tests swap it.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
	// flagSets, when not nil, collects the flag sets NewFlagSet makes. So
	// help can list the flags of commands that build theirs as they parse.
	flagSets *[]*flag.FlagSet
}

// Command is one operator subcommand.
type Command struct {
	Name, Args, Summary string
	Run                 func(ctx context.Context, sio *Stdio, args []string) int
}

// Program is a binary that does its main job given flags alone. It runs a
// subcommand when its first argument names one.
type Program struct {
	Name     string // the binary's, as the usage shows it
	Main     string // what it does without a subcommand
	Commands []Command
	Help     string // what help does, as its line in the list says
	Notes    string // printed after the list
	// Flags prints the main job's flags to w, last in help.
	Flags func(w io.Writer)
}

// Run runs the subcommand args name, if they name one, and returns its
// exit code. ok is false when args are the main job's flags.
func (p *Program) Run(sio *Stdio, args []string) (code int, ok bool) {
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
	if name == "help" {
		p.printCommands(sio.Out)
		p.printCommandFlags(sio.Out)
		p.Flags(sio.Out)
		return ExitOK, true
	}
	for _, c := range p.Commands {
		if c.Name == name {
			// The first Ctrl-C cancels, so a command cleans up: a backup
			// removes its partial copy. A second one kills.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			context.AfterFunc(ctx, stop)
			return c.Run(ctx, sio, args[1:]), true
		}
	}
	fmt.Fprintf(sio.Err, "%s: unknown subcommand %q\n\n", p.Name, name)
	p.printCommands(sio.Err)
	return ExitUsage, true
}

func (p *Program) printCommands(w io.Writer) {
	fmt.Fprintf(w, "Usage:\n\n  %s [flags]\n      %s\n", p.Name, p.Main)
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(p.Name+" "+c.Name+" "+c.Args), c.Summary)
	}
	fmt.Fprintf(w, "  %s help\n      %s\n", p.Name, p.Help)
	fmt.Fprintln(w, "\n"+p.Notes)
}

// printCommandFlags lists every flag of every command. It runs each with
// -h, which parses nothing else and prints to nowhere. Then it prints the
// flag sets the command made.
func (p *Program) printCommandFlags(w io.Writer) {
	for _, c := range p.Commands {
		var sets []*flag.FlagSet
		c.Run(context.Background(), &Stdio{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard, flagSets: &sets}, []string{"-h"})
		for _, fs := range sets {
			n := 0
			fs.VisitAll(func(*flag.Flag) { n++ })
			if n == 0 {
				fmt.Fprintf(w, "\nFlags of %s: none\n", fs.Name())
				continue
			}
			fmt.Fprintf(w, "\nFlags of %s:\n", fs.Name())
			fs.SetOutput(w)
			fs.PrintDefaults()
		}
	}
}

// NewFlagSet returns a subcommand's flag set, named as the usage shows the
// command ("paymentsd backup"). It writes its usage to sio.Err.
func NewFlagSet(sio *Stdio, name, args, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(sio.Err)
	if sio.flagSets != nil {
		*sio.flagSets = append(*sio.flagSets, fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(sio.Err, "usage: %s %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.PrintDefaults()
	}
	return fs
}

// ParseArgs parses args with fs and returns the operands. Flags and
// operands come in any order: backup FILE --db DB as well as backup --db DB
// FILE. The argument defaults, if not nil, sets flag defaults first, say
// from the environment. The exit code is meaningful when err is not nil.
// It is 0 after -h, else 2, with the usage printed.
func ParseArgs(fs *flag.FlagSet, args []string, defaults func(*flag.FlagSet) error) (operands []string, code int, err error) {
	if defaults != nil {
		if err := defaults(fs); err != nil {
			return nil, UsageError(fs, "%v", err), err
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, ExitOK, err
			}
			return nil, ExitUsage, err // flag printed the error and the usage
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

// UsageError prints msg and fs's usage, and returns exit code 2.
func UsageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return ExitUsage
}

// Fail prints err for a person, after the command's name, and returns
// exit code 3.
func Fail(sio *Stdio, name string, err error) int {
	fmt.Fprintf(sio.Err, "%s: %v\n", name, err)
	return ExitFailure
}
