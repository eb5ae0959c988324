package main

import (
	"context"
	"fmt"

	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
)

const backupAbout = `Writes a consistent copy of the bbolt data file to FILE (mode 0600), from
one read transaction: the server goes on serving meanwhile. With the server
running the copy comes through its admin socket (DB.admin.sock), otherwise
from the file itself. The copy is written beside FILE under a temporary
name, checked, and only then linked as FILE, so FILE is never a partial
copy; an existing FILE is never overwritten. For PostgreSQL, use pg_dump.`

// runBackup is paymentsd backup FILE.
func runBackup(ctx context.Context, sio *cli.Stdio, args []string) int {
	fs := cli.NewFlagSet(sio, "paymentsd backup", "FILE [--db DB]", backupAbout)
	db := fs.String("db", defaultDB(), "the bbolt data file to copy")
	operands, code, err := parseArgs(fs, args)
	switch pgURL, dbErr := config.ParseDB(*db); {
	case err != nil:
		return code
	case len(operands) != 1:
		return cli.UsageError(fs, "give one FILE to write the copy to")
	case *db == "":
		return cli.UsageError(fs, config.NoDB)
	case dbErr != nil:
		return cli.UsageError(fs, "%v", dbErr)
	case pgURL != "":
		return cli.UsageError(fs, "backup copies a bbolt file; back PostgreSQL up with pg_dump")
	}
	dest := operands[0]
	n, via, err := boltadmin.Backup(ctx, *db, dest)
	if err != nil {
		return cli.Fail(sio, "paymentsd backup", err)
	}
	fmt.Fprintf(sio.Out, "%s: %d bytes, a consistent copy of %s (%s), checked sound\n", dest, n, *db, via)
	return cli.ExitOK
}
