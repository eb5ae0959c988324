package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/boltadmin"
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
func runCheck(ctx context.Context, sio *stdio, args []string) int {
	fs := newFlagSet(sio, "check", "[--db DB]", checkAbout)
	db := fs.String("db", defaultDB(), "the bbolt data file to check")
	operands, code, err := parseArgs(fs, args)
	switch pgURL, dbErr := parseDB(*db); {
	case err != nil:
		return code
	case len(operands) > 0:
		return usageError(fs, "unexpected arguments %q", operands)
	case *db == "":
		return usageError(fs, noDB)
	case dbErr != nil:
		return usageError(fs, "%v", dbErr)
	case pgURL != "":
		return usageError(fs, "check is for bbolt files; PostgreSQL checks its own")
	}
	via, err := boltadmin.Check(ctx, *db)
	var stuck *boltadmin.CannotCommitError
	switch {
	case err == nil:
		fmt.Fprintf(sio.out, "%s: sound (%s)\n", *db, via)
		return exitOK
	case errors.As(err, &stuck):
		fmt.Fprintf(sio.out, "%s: sound (%s), but the server holding it cannot commit to it:\n%v\n", *db, via, stuck)
		return exitNo
	case errors.Is(err, boltstore.ErrDamaged):
		fmt.Fprintf(sio.out, "%s: damaged\n%v\nRestore it from a backup, or move it aside to start empty.\n", *db, err)
		return exitNo
	default:
		return fail(sio, "check", err)
	}
}
