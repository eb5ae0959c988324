package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
)

const checkAbout = `Checks the bbolt data file's structure (page links, freelist, key order),
as paymentsd does before it serves from a file, and the checksum of every
record and intent: exit 0 when it is sound, 1 with the findings when it
is damaged or when the server holding it cannot commit to it (a failing
disk), 3 when it could not be checked.
With the server running, the server checks it (through DB.admin.sock),
in one of its write transactions: writes wait for the check, reads do not.
PostgreSQL checks its own data.`

// runCheck is paymentsd check.
func runCheck(ctx context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, "paymentsd check", "[--db DB]", checkAbout)
	db := fs.String("db", defaultDB(), "the bbolt data file to check")
	if code, ok := parseFileArgs(fs, args, db, "check is for bbolt files; PostgreSQL checks its own"); !ok {
		return code
	}
	via, err := boltadmin.Check(ctx, *db)
	var stuck *boltadmin.CannotCommitError
	switch {
	case err == nil:
		fmt.Fprintf(sio.Out, "%s: sound (%s)\n", *db, via)
		return cli.ExitOK
	case errors.As(err, &stuck):
		fmt.Fprintf(sio.Out, "%s: sound (%s), but the server holding it cannot commit to it:\n%v\n", *db, via, stuck)
		return cli.ExitNo
	case errors.Is(err, boltstore.ErrDamaged):
		fmt.Fprintf(sio.Out, "%s: damaged\n%v\nRestore it from a backup, or move it aside to start empty.\n", *db, err)
		return cli.ExitNo
	default:
		return cli.Fail(sio, "paymentsd check", err)
	}
}

// parseFileArgs parses the command line of a subcommand that works on the
// bbolt file db and takes no operands. It returns false, with the exit
// code, when the command must not run. It tells a PostgreSQL --db forPG.
func parseFileArgs(fs *flag.FlagSet, args []string, db *string, forPG string) (int, bool) {
	operands, code, err := parseArgs(fs, args)
	switch pgURL, dbErr := config.ParseDB(*db); {
	case err != nil:
		return code, false
	case len(operands) > 0:
		return cli.UsageError(fs, "unexpected arguments %q", operands), false
	case *db == "":
		return cli.UsageError(fs, config.NoDB), false
	case dbErr != nil:
		return cli.UsageError(fs, "%v", dbErr), false
	case pgURL != "":
		return cli.UsageError(fs, "%s", forPG), false
	}
	return 0, true
}
