package boltadmin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/storage"
)

// Source is what an operator's tool reads a bbolt data file through. It is
// the file itself, or the server that holds it (a *Client).
type Source interface {
	// Get returns the record stored for k, live or expired, or nil when
	// there is none.
	Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error)
	// Check returns nil for a sound file, and otherwise an ErrDamaged
	// naming what is wrong. A server that cannot commit to a sound file
	// returns a *CannotCommitError.
	Check(ctx context.Context) error
	// Backup writes a consistent copy of the file to w.
	Backup(ctx context.Context, w io.Writer) (int64, error)
	Close() error
}

// fileLockWait is how long Open waits for the data file's lock before it
// asks the server instead. A running server never lets go, so waiting
// longer gains nothing.
const fileLockWait = 100 * time.Millisecond

// Open opens the data file at path read-only. When a process holds the
// file, Open asks that process, the server, through its admin socket. The
// file comes first because its lock, not the socket, tells whether a
// server runs. A server that was killed leaves its socket behind. A file
// nobody holds needs no server. Opening the file takes bbolt's shared lock
// for a moment. A server starting meanwhile waits a second for it, then
// gives up, naming the file. Close the Source soon.
func Open(path string) (Source, error) {
	ro, c, err := OpenEither(path)
	switch {
	case err != nil:
		return nil, err
	case ro != nil:
		return fileSource{ro}, nil
	}
	return c, nil
}

// OpenEither opens the data file at path read-only, as Open does, or,
// when a server holds it, a client of that server's admin socket: one of
// the two, for a reader of more than Source reads.
func OpenEither(path string) (*boltstore.ReadOnly, *Client, error) {
	ro, err := boltstore.OpenReadOnly(path, fileLockWait)
	switch {
	case err == nil:
		return ro, nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("no data file at %s: is --db right?", path)
	case !errors.Is(err, boltstore.ErrLocked):
		return nil, nil, err
	}
	c, err := Dial(path)
	return nil, c, err
}

// fileSource reads a data file no server holds.
type fileSource struct{ ro *boltstore.ReadOnly }

func (f fileSource) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	return f.ro.Get(ctx, k)
}
func (f fileSource) Check(context.Context) error { return f.ro.Check() }
func (f fileSource) Backup(_ context.Context, w io.Writer) (int64, error) {
	return f.ro.WriteTo(w)
}
func (f fileSource) Close() error { return f.ro.Close() }

// sourceVia says where src reads from, for the operator.
func sourceVia(src Source) string {
	if _, ok := src.(*Client); ok {
		return "through the running server"
	}
	return "read directly: no server holds it"
}

// Check checks the data file at path, read as Open reads it, and says
// where it read it. The error err is nil when the file is sound. Otherwise
// it is an ErrDamaged with the findings. It is a *CannotCommitError when
// the server holding the file found it sound but cannot commit to it.
func Check(ctx context.Context, path string) (via string, err error) {
	src, err := Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	return sourceVia(src), src.Check(ctx)
}
