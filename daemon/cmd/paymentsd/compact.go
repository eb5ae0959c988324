package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
)

const compactAbout = `Rewrites the bbolt data file with its pages full and without free pages,
in place: what expired and was swept then stops taking room (bbolt never
shrinks a file by itself). The server must be stopped: a file that a
running paymentsd holds is refused (exit 1) and left as it is. The file is
checked first; the copy is written beside it with the file's mode,
synced, checked and renamed over it. Take a backup first if in doubt.`

// runCompact is paymentsd compact.
func runCompact(_ context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, "paymentsd compact", "[--db DB]", compactAbout)
	db := fs.String("db", defaultDB(), "the bbolt data file to compact")
	if code, ok := parseFileArgs(fs, args, db, "compact is for bbolt files; PostgreSQL reclaims its own space (VACUUM)"); !ok {
		return code
	}
	before, after, err := boltstore.Compact(*db, time.Second)
	switch {
	case errors.Is(err, boltstore.ErrLocked):
		fmt.Fprintf(sio.Out, "%s: in use by a running paymentsd; stop it first. Nothing was changed.\n", *db)
		return cli.ExitNo
	case errors.Is(err, boltstore.ErrDamaged):
		fmt.Fprintf(sio.Out, "%s: damaged, so not compacted\n%v\nRestore it from a backup, or move it aside to start empty.\n", *db, err)
		return cli.ExitNo
	case err != nil:
		return cli.Fail(sio, "paymentsd compact", err)
	}
	fmt.Fprintf(sio.Out, "%s: %d bytes, compacted from %d\n", *db, after, before)
	return cli.ExitOK
}
