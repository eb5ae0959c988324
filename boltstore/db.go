// Package boltstore is the embedded storage.Store. It keeps idempotency
// records in a bbolt file that one process holds alone. Writes go through a
// group commit. The store is a TxStore. An embedder's own writes, such as
// paymentsd's intents, go through Update. A handler's writes join the
// completion of its record in one transaction.
package boltstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/paymentsd/paymentsd/internal/dirsync"
	"github.com/paymentsd/paymentsd/internal/ledger"
	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// Errors of Open and New.
var (
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("data file is in use by another process")
	// ErrInUse is returned by New when another DB already uses the bbolt
	// database. Two DBs would each take the other's live claims for orphans.
	ErrInUse = errors.New("boltstore: the bbolt database is already used by another DB")
)

// Options tune Open and New. The zero value is ready to use.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the
	// file. Then Open fails with ErrLocked. Zero means one second.
	LockTimeout time.Duration
	// SweepBatch is the most expired records one sweep transaction deletes.
	// It bounds how long a sweep holds the write lock. Zero means 1000.
	SweepBatch int
}

// Bucket names. Each kind of data has its own; indexes hold keys only.
var (
	bucketRecords      = []byte("idempotency_records")
	bucketRecordExpiry = []byte("idempotency_expiry")
	// bucketInFlight lists the keys whose records are claims in flight.
	// InFlight pages through it without reading completed records.
	bucketInFlight = []byte("idempotency_in_flight")
	// bucketReleases and bucketReleaseExpiry keep the release history: see
	// history.go.
)

// inUse holds every *bolt.DB a DB uses, to refuse a second DB on one.
var inUse sync.Map

// DB keeps idempotency records in a bbolt database. It is safe for
// concurrent use.
type DB struct {
	bolt       *bolt.DB
	ownsBolt   bool // opened by Open, so closed by Close
	sweepBatch int
	// ledger is what this process knows of its records beyond the file.
	// Claims are decided on it.
	ledger *ledger.Ledger

	queue           chan *write // unbuffered; see update
	quit            chan struct{}
	committerDone   chan struct{}
	closeOnce       sync.Once
	commits         atomic.Uint64
	committedWrites atomic.Uint64
	health          health
}

// Open opens or creates the data file at path, with mode 0600. It creates
// a missing directory with mode 0700. When another process holds the file,
// Open fails within opts.LockTimeout. Its error wraps ErrLocked and names
// the file.
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
	// The freelist is synced with every commit. At open, bbolt rebuilds an
	// unsynced freelist in goroutines of its own. A damaged page's panic
	// cannot be recovered there. The freelist is kept in a hash map, as etcd
	// does. Allocating from a large one then stays cheap.
	b, err := openLatest(path, &bolt.Options{Timeout: lockTimeout, MmapFlags: mmapFlags, FreelistType: bolt.FreelistMapType})
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

// create makes a whole new data file at path when there is none. The
// first pages are written by bbolt to a file of another name beside path.
// That file is linked into place once synced. So path is never a file that
// is empty or half written. An empty data file is thus damaged, not new. A
// failed copy may have emptied it, say. It is refused rather than served
// as a store that has forgotten every key. A link, unlike a rename, never
// replaces a file that another process created meanwhile. A symbolic link
// to no file has the file made where it points.
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
		return unwritableDir(path, err)
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

// unwritableDir is the error of a new file at path that could not be
// created: it names the directory and who must be able to write there,
// not the temporary file the store writes first.
func unwritableDir(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	who := fmt.Sprintf("uid %d", os.Geteuid())
	if u, uerr := user.LookupId(strconv.Itoa(os.Geteuid())); uerr == nil {
		who = fmt.Sprintf("user %s (%s)", u.Username, who)
	}
	return fmt.Errorf("cannot create %s: its directory %s must be writable by %s: %w", filepath.Base(path), filepath.Dir(path), who, err)
}

// openLatest is openBolt of the file at path once its lock is taken.
// While it waited for the lock, paymentsd compact may have renamed a new
// file over path. The lock then taken is the old file's, which no one
// will read again. So openLatest opens path afresh, a few times at most.
func openLatest(path string, opts *bolt.Options) (*bolt.DB, error) {
	for range 3 {
		b, file, err := openBolt(path, opts)
		if err != nil {
			return nil, err
		}
		held, err1 := file.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return b, nil
		}
		b.Close()
	}
	return nil, errReplaced
}

// openBolt opens path with bbolt and opts. Some damaged files make bbolt
// panic, such as one with an invalid freelist page. openBolt turns those
// panics into an ErrDamaged. Meta pages that bbolt rejects are an
// ErrDamaged too. Other errors are the system's. When bbolt panics, it
// does not unlock and close the file, so openBolt does. The lock would
// keep every later opening out, this process's own included. (The mapping,
// if made, stays: bbolt keeps no handle on it that openBolt can reach.)
// openBolt also returns the file bbolt opened, which bbolt does not show.
func openBolt(path string, opts *bolt.Options) (b *bolt.DB, file *os.File, err error) {
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
	return b, file, err
}

// refuse is Open's error for a file that cannot be opened. For a damaged
// file, it says what to do.
func refuse(path string, err error) error {
	if errors.Is(err, ErrDamaged) {
		return fmt.Errorf("open %s: %w. It cannot be trusted, so nothing is served from it: restore it from a backup, "+
			"or move it aside to start empty; `go run go.etcd.io/bbolt/cmd/bbolt@v1.5.0 check %s` lists what is wrong", path, err, path)
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// New keeps records in b, an open bbolt database, beside the embedder's
// own buckets. Close then leaves b open. New requires b to be writable and
// used by no other DB. The file lock of b makes this process the only one
// using it. That lets claims left by an earlier process be taken over at
// once.
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
		for _, name := range [][]byte{bucketRecords, bucketRecordExpiry, bucketReleases, bucketReleaseExpiry} {
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
	if err := sealed.Migrate(b.Update, bucketReleases); err != nil { // born sealed: this only marks it
		inUse.Delete(b)
		return nil, fmt.Errorf("mark the release history sealed: %w", err)
	}
	if err := b.View(checkKeys); err != nil {
		inUse.Delete(b)
		return nil, err
	}
	db := &DB{
		bolt:       b,
		sweepBatch: cmp.Or(opts.SweepBatch, 1000),
		// The file lock is held until Close. So a claim of any other ID
		// comes from a process that has let go of the file.
		// A completed record is trusted until it expires. Only this
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
// A file found damaged is not closed cleanly. After a panic, bbolt may
// hold its write lock for good. Its Close would then never return. The
// process is expected to exit, which releases the file.
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
// ErrDamaged. Health reports that error from then on.
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
// Update. The Update of bbolt works too, but shares no fsync and joins no
// completion.
func (db *DB) Bolt() *bolt.DB { return db.bolt }

// View runs fn in a read transaction, which never waits for writers. When
// ctx carries a Tx of this DB, an error of fn fails that Tx, as Update's
// would. A handler whose storage failed has no answer to store. A damaged
// page, on which bbolt panics, is an ErrDamaged.
func (db *DB) View(ctx context.Context, fn func(*bolt.Tx) error) error {
	err := db.view(fn)
	if err != nil {
		if t, ok := ctx.Value(txKey{}).(*Tx); ok && t.db == db {
			t.fail(err)
		}
	}
	return err
}

// clone copies bytes read from bbolt, which are only valid during their
// transaction.
func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Check verifies the file's structure: page links, freelist and key order.
// It also verifies the checksum of every sealed value. Those are the
// records and any other bucket this module seals, such as paymentsd's
// intents. Check returns what is wrong as an ErrDamaged, for tests and
// operators. Open and New check the structure before serving from a file.
// A value is checked whenever it is read.
//
// On a DB that serves, the structure is checked in a write of the group
// commit, in its transaction. A bbolt check of a read transaction is only
// sound while no write commits. It would report pages freed meanwhile as
// damage. So writes wait while the check runs. A write's own function must
// not call Check: the committer would wait for itself. The values are then
// read in a read transaction, a snapshot that writes need not wait for.
//
// A DB whose damage is known takes no more writes. There, all is checked
// in a read transaction, since nothing can commit. The damage known may be
// a commit's failure, not the file's.
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
// a key it was not written under means that key is lost. A retry under
// that key would find it free and run its request a second time. So the
// file is refused, as a damaged structure is. A value damaged otherwise
// fails only the calls about its own key. The file is still served.
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

// redacted keeps keys and values out of the check's messages, which reach
// logs. Among them are principals and idempotency keys.
type redacted struct{}

func (redacted) KeyToString([]byte) string   { return "<key>" }
func (redacted) ValueToString([]byte) string { return "<value>" }
