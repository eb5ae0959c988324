// Package boltstore keeps paymentsd's data in one bbolt file: the
// idempotency records of the interceptor and the payment intents of the
// server, each in buckets of their own. It is the only package that imports
// bbolt.
package boltstore

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/paymentsd/paymentsd/interceptor"
)

// ErrLocked is returned by Open when another process holds the file.
var ErrLocked = errors.New("data file is in use by another process")

// Options tune Open. The zero value is ready to use.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the
	// file before it fails with ErrLocked. Zero means one second.
	LockTimeout time.Duration
	// SweepBatch is how many expired records one sweep transaction deletes
	// at most, bounding how long it holds the write lock. Zero means 1000.
	SweepBatch int
}

// Bucket names. Each kind of data has its own; indexes hold keys only.
var (
	bucketRecords       = []byte("idempotency_records")
	bucketRecordExpiry  = []byte("idempotency_expiry")
	bucketIntents       = []byte("intents")
	bucketIntentsByUser = []byte("intents_by_owner")
)

// DB is an open data file. It is safe for concurrent use.
type DB struct {
	bolt       *bolt.DB
	sweepBatch int
	claimant   interceptor.Claimant

	queue         chan *write // unbuffered; see update
	quit          chan struct{}
	committerDone chan struct{}
	closeOnce     sync.Once
	commits       atomic.Uint64
}

// Open opens or creates the data file at path, mode 0600, creating its
// directory (0700) when missing. It fails within opts.LockTimeout with
// ErrLocked, naming the file, when another process holds it.
func Open(path string, opts *Options) (*DB, error) {
	if opts == nil {
		opts = &Options{}
	}
	lockTimeout := cmp.Or(opts.LockTimeout, time.Second)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, MmapFlags: mmapFlags})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w (waited %v for its lock)", path, ErrLocked, lockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRecords, bucketRecordExpiry, bucketIntents, bucketIntentsByUser} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("open %s: create buckets: %w", path, err)
	}
	db := &DB{
		bolt:       b,
		sweepBatch: cmp.Or(opts.SweepBatch, 1000),
		// The file lock is held until Close: claims of any other ID were
		// made by a process that has let go of the file.
		claimant: interceptor.Claimant{ID: newProcessID(), Exclusive: true},

		queue:         make(chan *write),
		quit:          make(chan struct{}),
		committerDone: make(chan struct{}),
	}
	go db.commitLoop()
	return db, nil
}

// newProcessID names this opening of the file in the claims it makes.
func newProcessID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails; see crypto/rand.Read
	return fmt.Sprintf("pid %d %x", os.Getpid(), b)
}

// Close releases the file. Writes in progress finish first; later ones
// fail with ErrClosed.
func (db *DB) Close() error {
	err := ErrClosed
	db.closeOnce.Do(func() {
		close(db.quit)
		<-db.committerDone
		err = db.bolt.Close()
	})
	return err
}

// Path is the data file's path.
func (db *DB) Path() string { return db.bolt.Path() }

// joinParts joins parts, each but the last prefixed with its length, so
// that no part can run into the next. As a bucket key, a prefix of whole
// parts selects a range; as a value, it puts an owner before an encoding.
func joinParts(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	k := make([]byte, 0, n)
	for i, p := range parts {
		if i < len(parts)-1 {
			k = binary.AppendUvarint(k, uint64(len(p)))
		}
		k = append(k, p...)
	}
	return k
}

// clone copies bytes read from bbolt, which are only valid during their
// transaction.
func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Check verifies the file's structure (page links, freelist, key order) and
// returns the first problem found, for tests and operators after a crash.
func (db *DB) Check() error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}
