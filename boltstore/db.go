// Package boltstore is the embedded storage.Store: idempotency records
// in a bbolt file, exclusive to one process, written by group commit. It is
// a TxStore: an embedder's own writes (paymentsd's intents, say) go through
// Update, and a handler's writes join the completion of its record in one
// transaction.
package boltstore

import (
	"cmp"
	"context"
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

	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/interceptor/storage/ledger"
	"github.com/paymentsd/paymentsd/internal/dirsync"
	"github.com/paymentsd/paymentsd/internal/sealed"
)

// Errors of Open and New.
var (
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("data file is in use by another process")
	// ErrInUse is returned by New when another DB already uses the bbolt
	// database: two would each take the other's live claims for orphans.
	ErrInUse = errors.New("boltstore: the bbolt database is already used by another DB")
)

// Options tune Open and New. The zero value is ready to use.
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
	bucketRecords      = []byte("idempotency_records")
	bucketRecordExpiry = []byte("idempotency_expiry")
	// bucketInFlight lists the keys whose records are claims in flight:
	// what InFlight pages through without reading completed records.
	bucketInFlight = []byte("idempotency_in_flight")
)

// inUse holds every *bolt.DB a DB uses, to refuse a second DB on one.
var inUse sync.Map

// DB keeps idempotency records in a bbolt database. It is safe for
// concurrent use.
type DB struct {
	bolt       *bolt.DB
	ownsBolt   bool // opened by Open, so closed by Close
	sweepBatch int
	// ledger is what this process knows of its records beyond the file,
	// which claims are decided on.
	ledger *ledger.Ledger

	queue         chan *write // unbuffered; see update
	quit          chan struct{}
	committerDone chan struct{}
	closeOnce     sync.Once
	commits       atomic.Uint64
	health        health
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
	if err := create(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := checkFileSize(path); err != nil {
		return nil, refuse(path, err)
	}
	// The freelist is synced with every commit: bbolt rebuilds an unsynced
	// one at open in goroutines of its own, where a damaged page's panic
	// cannot be recovered. It is kept in a hash map, as etcd does, so that
	// allocating from a large one stays cheap.
	b, err := openBolt(path, &bolt.Options{Timeout: lockTimeout, MmapFlags: mmapFlags, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w (waited %v for its lock)", path, ErrLocked, lockTimeout)
	}
	if err != nil {
		return nil, refuse(path, err)
	}
	db, err := New(b, opts)
	if err != nil {
		b.Close()
		return nil, refuse(path, err)
	}
	db.ownsBolt = true
	return db, nil
}

// create makes a new data file at path, when there is none, whole: bbolt
// writes its first pages to a file of another name beside it, which is
// linked into place once synced. So path is never a file that is empty or
// half written, and an empty data file is not new but damaged (emptied by
// a failed copy, say): it is refused rather than served as a store that
// has forgotten every key. A link, unlike a rename, never replaces a file
// that another process created meanwhile. A symbolic link to no file has
// the file made where it points.
func create(path string) error {
	info, err := os.Lstat(path)
	if err == nil && info.Mode()&os.ModeSymlink != 0 {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			target, err := os.Readlink(path) // the file is made where the link points
			if err != nil {
				return err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil { // as Open does for path
				return err
			}
			return create(target)
		}
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".new-*") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	b, err := bolt.Open(tmp, 0o600, nil) // syncs its first pages
	if err != nil {
		return err
	}
	if err := b.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return dirsync.Sync(dir)
}

// openBolt opens path with bbolt and opts, turning bbolt's panics on some
// damaged files (an invalid freelist page, say) and the meta pages it
// rejects into an ErrDamaged; other errors are the system's. bbolt does not
// unlock and close the file when it panics, so openBolt does: its lock
// would keep every later opening out, this process's own included. (Its
// mapping, if made, stays: bbolt keeps no handle on it that openBolt can
// reach.)
func openBolt(path string, opts *bolt.Options) (b *bolt.DB, err error) {
	var file *os.File
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	defer func() {
		if p := recover(); p != nil {
			if file != nil {
				unlock(file)
				file.Close()
			}
			err = asDamaged(p)
		}
	}()
	b, err = bolt.Open(path, 0o600, opts)
	if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrChecksum) {
		err = &damaged{cause: err, latch: true}
	}
	return b, err
}

// refuse is Open's error for a file that cannot be opened, saying what to
// do when it is damaged.
func refuse(path string, err error) error {
	if errors.Is(err, ErrDamaged) {
		return fmt.Errorf("open %s: %w. It cannot be trusted, so nothing is served from it: restore it from a backup, "+
			"or move it aside to start empty; `go run go.etcd.io/bbolt/cmd/bbolt@v1.5.0 check %s` lists what is wrong", path, err, path)
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// New keeps records in b, an open bbolt database, beside the embedder's own
// buckets; Close then leaves b open. b must be writable and used by no
// other DB. Its file lock makes this process the only one using it, which
// is what lets claims left by an earlier process be taken over at once.
func New(b *bolt.DB, opts *Options) (*DB, error) {
	if opts == nil {
		opts = &Options{}
	}
	if b.IsReadOnly() {
		return nil, errors.New("boltstore: the bbolt database is read-only")
	}
	if _, loaded := inUse.LoadOrStore(b, true); loaded {
		return nil, ErrInUse
	}
	if err := check(b); err != nil {
		inUse.Delete(b)
		return nil, err
	}
	err := b.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRecords, bucketRecordExpiry} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return indexInFlight(tx)
	})
	if err != nil {
		inUse.Delete(b)
		return nil, fmt.Errorf("create buckets: %w", err)
	}
	if err := sealed.Migrate(b.Update, bucketRecords); err != nil {
		inUse.Delete(b)
		return nil, fmt.Errorf("seal the records written before checksums: %w", err)
	}
	if err := b.View(checkKeys); err != nil {
		inUse.Delete(b)
		return nil, err
	}
	db := &DB{
		bolt:       b,
		sweepBatch: cmp.Or(opts.SweepBatch, 1000),
		// The file lock is held until Close: claims of any other ID were
		// made by a process that has let go of the file.
		// A completed record is trusted until it expires: only this
		// process writes the file, and it forgets what it replaces.
		ledger: ledger.New(storage.Claimant{ID: newProcessID(), Exclusive: true}, 0),

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

// Close stops the committer and, if Open opened it, closes the file.
// Writes in progress finish first; later ones fail with ErrClosed.
//
// A file found damaged is not closed cleanly: bbolt may hold its write lock
// for good after a panic, so its Close would never return. The process is
// expected to exit, which releases the file.
func (db *DB) Close() error {
	err := ErrClosed
	db.closeOnce.Do(func() {
		close(db.quit)
		<-db.committerDone
		inUse.Delete(db.bolt)
		err = nil
		if damaged := db.health.damagedErr(); damaged != nil {
			err = fmt.Errorf("not closed: %w", damaged)
		} else if db.ownsBolt {
			err = db.bolt.Close()
		}
	})
	return err
}

// closed reports whether Close has begun.
func (db *DB) closed() bool {
	select {
	case <-db.quit:
		return true
	default:
		return false
	}
}

// view is bbolt's View, with its panics on damaged pages turned into an
// ErrDamaged that Health reports from then on.
func (db *DB) view(fn func(*bolt.Tx) error) (err error) {
	if err := db.health.readsRefused(); err != nil {
		return err
	}
	defer guardFaults()()
	defer func() {
		if p := recover(); p != nil {
			if err = recovered(p); errors.Is(err, ErrDamaged) {
				db.health.damage(err)
			}
		}
	}()
	return db.bolt.View(fn)
}

// Path is the data file's path.
func (db *DB) Path() string { return db.bolt.Path() }

// Bolt is the bbolt database, for the embedder's own reads. Write through
// Update: bbolt's own Update works too, but shares no fsync and joins no
// completion.
func (db *DB) Bolt() *bolt.DB { return db.bolt }

// View runs fn in a read transaction, which never waits for writers. When
// ctx carries a Tx of this DB, an error of fn fails that Tx as an error of
// Update would: a handler whose storage failed has no answer to store. A
// damaged page, on which bbolt panics, is an ErrDamaged.
func (db *DB) View(ctx context.Context, fn func(*bolt.Tx) error) error {
	err := db.view(fn)
	if err != nil {
		if t, ok := ctx.Value(txKey{}).(*Tx); ok && t.db == db {
			t.fail(err)
		}
	}
	return err
}

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

// Check verifies the file's structure (page links, freelist, key order)
// and the checksum of every sealed value (the records, and any other
// bucket this module seals, such as paymentsd's intents), and returns what is wrong, an
// ErrDamaged, for tests and operators. Open and New check the structure
// before serving from a file; a value is checked whenever it is read.
//
// On a DB that serves, the structure is checked as a write of the group
// commit, in its transaction: bbolt's check of a read transaction is only
// sound while no write commits, and would report pages freed meanwhile as
// damage. So writes wait while it runs, and a write's own function must not
// call Check: the committer would wait for itself. The values are then
// read in a read transaction, a snapshot, which writes need not wait for.
// On a DB that takes no more writes, its damage known, all is checked in a
// read transaction, since nothing can commit: the damage known may be a
// commit's failure, not the file's.
func (db *DB) Check() error {
	ran := false
	var found error
	err := db.update(context.Background(), func(tx *bolt.Tx) error {
		ran, found = true, checkTx(tx)
		return nil // what it found is for the caller, not a failure of the batch
	})
	switch {
	case ran && found == nil:
		return db.bolt.View(checkValues)
	case ran:
		return found // whatever became of the batch's commit
	case db.health.damagedErr() != nil:
		return db.bolt.View(checkAll)
	}
	return err
}

// checkAll checks the structure of tx's file and every sealed value in it.
func checkAll(tx *bolt.Tx) error {
	if err := checkTx(tx); err != nil {
		return err
	}
	return checkValues(tx)
}

// checkKeys is what Open and New check of the sealed values. A value under
// a key it was not written under means that key is lost: a retry under it,
// found free, would run its request a second time, so the file is refused,
// as a damaged structure is. A value damaged otherwise fails the calls
// about its own key alone, and the file is served.
func checkKeys(tx *bolt.Tx) error {
	err := checkValues(tx)
	var d *damaged
	switch {
	case !errors.As(err, &d) || d.latch:
		return err // nil, or damage of the structure met as it read
	case errors.Is(d.cause, sealed.ErrKeyMismatch):
		return &damaged{cause: d.cause, latch: true}
	}
	return nil
}

// checkValues checks every sealed value of tx's file. Pages damaged by
// another process while it reads them are damage it finds, not a crash.
func checkValues(tx *bolt.Tx) (err error) {
	defer guardFaults()()
	defer func() {
		if p := recover(); p != nil {
			err = recovered(p)
		}
	}()
	if err := sealed.Verify(tx); err != nil {
		return &damaged{cause: err}
	}
	return nil
}

// check checks a file that nothing writes to: one that is opening, or open
// read-only.
func check(b *bolt.DB) error { return b.View(checkTx) }

func checkTx(tx *bolt.Tx) error {
	var errs []error
	for err := range tx.Check(bolt.WithKVStringer(redacted{})) { // recovers bbolt's panics itself
		if len(errs) < 10 {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &damaged{cause: errors.Join(errs...), latch: true}
	}
	return nil
}

// redacted keeps keys and values, principals and idempotency keys among
// them, out of the check's messages, which reach logs.
type redacted struct{}

func (redacted) KeyToString([]byte) string   { return "<key>" }
func (redacted) ValueToString([]byte) string { return "<value>" }
