package boltadmin

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

// Backup copies the data file at path to dest and says where it read it.
// It reads the file as Open does. The copy is written beside dest under a
// temporary name, with mode 0600. It is synced and checked, and only then
// linked as dest. So dest is never a partial copy. An existing dest is
// never overwritten. Cancelling ctx stops the copy and removes what was
// written.
func Backup(ctx context.Context, path, dest string) (n int64, via string, err error) {
	if _, err := os.Lstat(dest); err == nil {
		return 0, "", fmt.Errorf("%s exists: it is not overwritten; remove it or choose another name", dest)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, "", err
	}
	src, err := Open(path)
	if err != nil {
		return 0, "", err
	}
	via = sourceVia(src)
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

// ctxWriter stops writing once ctx is done. A copy read from the file
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
