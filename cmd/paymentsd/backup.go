package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/internal/dirsync"
)

const backupAbout = `Writes a consistent copy of the bbolt data file to FILE (mode 0600), from
one read transaction: the server goes on serving meanwhile. With the server
running the copy comes through its admin socket (DB.admin.sock), otherwise
from the file itself. The copy is written beside FILE under a temporary
name, checked, and only then linked as FILE, so FILE is never a partial
copy; an existing FILE is never overwritten. For PostgreSQL, use pg_dump.`

// runBackup is paymentsd backup FILE.
func runBackup(ctx context.Context, sio *stdio, args []string) int {
	fs := newFlagSet(sio, "backup", "FILE [--db DB]", backupAbout)
	db := fs.String("db", defaultDB(), "the bbolt data file to copy")
	operands, code, err := parseArgs(fs, args)
	switch pgURL, dbErr := parseDB(*db); {
	case err != nil:
		return code
	case len(operands) != 1:
		return usageError(fs, "give one FILE to write the copy to")
	case *db == "":
		return usageError(fs, noDB)
	case dbErr != nil:
		return usageError(fs, "%v", dbErr)
	case pgURL != "":
		return usageError(fs, "backup copies a bbolt file; back PostgreSQL up with pg_dump")
	}
	dest := operands[0]
	n, via, err := backup(ctx, *db, dest)
	if err != nil {
		return fail(sio, "backup", err)
	}
	fmt.Fprintf(sio.out, "%s: %d bytes, a consistent copy of %s (%s), checked sound\n", dest, n, *db, via)
	return exitOK
}

// backup copies the data file at db to dest and says where it read it.
func backup(ctx context.Context, db, dest string) (n int64, via string, err error) {
	if _, err := os.Lstat(dest); err == nil {
		return 0, "", fmt.Errorf("%s exists: it is not overwritten; remove it or choose another name", dest)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, "", err
	}
	src, err := openBoltSource(db)
	if err != nil {
		return 0, "", err
	}
	via = sourceName(src)
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-*") // 0600
	if err != nil {
		src.Close()
		return 0, "", fmt.Errorf("write the copy beside %s: %w", dest, err)
	}
	defer os.Remove(tmp.Name())
	n, err = src.Backup(ctx, ctxWriter{ctx, tmp})
	src.Close() // the file's lock, if it was taken, goes at once
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, "", err
	}
	if err := checkCopy(tmp.Name()); err != nil {
		return 0, "", fmt.Errorf("the copy does not check out, so it was not kept: %w", err)
	}
	if err := os.Link(tmp.Name(), dest); err != nil { // fails if dest appeared meanwhile
		return 0, "", err
	}
	return n, via, dirsync.Sync(filepath.Dir(dest))
}

// checkCopy checks the file a backup wrote.
func checkCopy(path string) error {
	ro, err := boltstore.OpenReadOnly(path, time.Second)
	if err != nil {
		return err
	}
	defer ro.Close()
	return ro.Check()
}

// sourceName says where src reads from, for the operator.
func sourceName(src boltSource) string {
	if _, ok := src.(*adminClient); ok {
		return "through the running server"
	}
	return "read directly: no server holds it"
}

// ctxWriter stops writing once ctx is done: a copy read from the file
// itself does not watch ctx.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
