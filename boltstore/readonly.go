package boltstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// ReadOnly is a data file opened for reading only. It serves an operator's
// tools, such as a lookup, a backup or a check, while no server holds the
// file. It takes bbolt's shared lock. Other readers may open the file too.
// A server may not until the ReadOnly is closed, so close it soon.
type ReadOnly struct {
	bolt *bolt.DB
}

// OpenReadOnly opens the existing data file at path for reading. When a
// process holds the file for writing, it fails with ErrLocked within
// lockTimeout. A zero lockTimeout means one second. It fails with an
// ErrDamaged when bbolt cannot trust the file or its structure does not
// check out. So what it reads is what a server opening the file would
// serve, or nothing. It never creates or changes the file.
func OpenReadOnly(path string, lockTimeout time.Duration) (*ReadOnly, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := checkFileSize(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	lockTimeout = cmp.Or(lockTimeout, time.Second)
	restore := guardFaults() // a fault reading a damaged file's mapping is an ErrDamaged too
	b, _, err := openBolt(path, &bolt.Options{ReadOnly: true, Timeout: lockTimeout, FreelistType: bolt.FreelistMapType})
	restore()
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w (waited %v for its lock)", path, ErrLocked, lockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = check(b) // as Open does before it serves
	if err == nil {
		err = b.View(checkKeys)
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &ReadOnly{bolt: b}, nil
}

// view runs fn in a read transaction. A damaged page's panic or fault is
// turned into an ErrDamaged.
func (r *ReadOnly) view(fn func(*bolt.Tx) error) (err error) {
	defer guardFaults()()
	defer func() {
		if p := recover(); p != nil {
			err = recovered(p)
		}
	}()
	return r.bolt.View(fn)
}

// View runs fn in a read transaction of the file, for readers of other
// buckets kept in it (boltintents). Damage reads as in view.
func (r *ReadOnly) View(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.view(fn)
}

// Get returns the record stored for k, live or expired, or nil when there
// is none.
func (r *ReadOnly) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *storage.Record
	err := r.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRecords) == nil { // a bbolt file boltstore never opened
			return nil
		}
		key := recordKey(k)
		v := tx.Bucket(bucketRecords).Get(key)
		if v == nil {
			return nil
		}
		b, err := sealed.Unseal(tx, bucketRecords, key, v)
		if err != nil {
			return recordError(key, err)
		}
		rec, err = unmarshalRecord(key, b)
		return err
	})
	return rec, err
}

// Check verifies the file as DB.Check does.
func (r *ReadOnly) Check() error { return r.view(checkAll) }

// WriteTo writes a copy of the file to w, tx.Size() bytes, from one read
// transaction. The copy is a bbolt file that opens and checks like the
// original.
func (r *ReadOnly) WriteTo(w io.Writer) (n int64, err error) {
	err = r.view(func(tx *bolt.Tx) error {
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// Close releases the file.
func (r *ReadOnly) Close() error { return r.bolt.Close() }
