package boltstore

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

// ErrClosed is returned by writes to a closed DB.
var ErrClosed = errors.New("boltstore: closed")

// ErrConflict is for a write function that finds the data its caller read
// changed since: a compare-and-set that lost. Inside a Tx, such a function
// returns an error wrapping ErrConflict. The interceptor then runs the
// transactional method's handler again, on the data as it now stands.
var ErrConflict = storage.ErrConflict

// maxBatch bounds how many writes share one commit. So one commit's
// transaction never grows without limit under load.
const maxBatch = 512

// Group commit. Every write is a function queued to one committer
// goroutine. It runs all the writes waiting at that moment in a single
// bbolt transaction, with one fsync for the lot. A write returns only once
// its commit is durable. The next commit starts as soon as the previous one
// ends. So a lone writer waits for nothing but its own fsync. The Batch
// method of bbolt instead waits up to 10ms for company. Under load, each
// fsync is shared by everything that queued during the last one.
type write struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// Update runs fn in a write transaction shared with other writers (group
// commit). It returns once the transaction is durable. An error from fn
// rolls back fn alone and is returned to its caller only. A panic in fn is
// treated the same way, as an error. If another write of its batch fails,
// fn may run more than once. So fn must set its results afresh on every
// run and have no effect outside tx.
//
// When ctx carries a Tx of this DB, fn is not run now. That is the case of
// a handler under the interceptor. Then fn joins the Tx and runs in the
// transaction that completes the Tx's record, and Update returns nil. An
// error of fn then fails the whole Tx, which stores nothing. An error
// wrapping ErrConflict runs a transactional method again. Reads made
// meanwhile through View see the data as committed, without the Tx's
// writes.
//
// A ctx that is done before fn is queued writes nothing.
func (db *DB) Update(ctx context.Context, fn func(*bolt.Tx) error) error {
	if t, ok := ctx.Value(txKey{}).(*Tx); ok && t.db == db {
		return t.stage(fn)
	}
	return db.update(ctx, fn)
}

// update queues fn for the committer and waits for its commit.
func (db *DB) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &write{fn: fn, done: make(chan error, 1)}
	select {
	case db.queue <- w:
		return <-w.done // once taken, it may commit: wait to know
	case <-ctx.Done():
		return ctx.Err()
	case <-db.quit:
		return ErrClosed
	}
}

// commitLoop is the committer goroutine; it ends when quit is closed.
func (db *DB) commitLoop() {
	defer close(db.committerDone)
	defer guardFaults()() // this goroutine runs every write transaction
	batch := make([]*write, 0, maxBatch)
	for {
		select { // quit first: once closing, take no new batch however busy the queue
		case <-db.quit:
			return
		default:
		}
		select {
		case w := <-db.queue:
			batch = append(batch[:0], w)
		case <-db.quit:
			return
		}
	gather: // the queue is unbuffered: these are writers already waiting
		for len(batch) < maxBatch {
			select {
			case w := <-db.queue:
				batch = append(batch, w)
			default:
				break gather
			}
		}
		db.commit(batch)
	}
}

// commit runs batch in one transaction. When a write fails, it alone is
// answered with its error. The writes before it commit again together. The
// writes after it form the next batch.
func (db *DB) commit(batch []*write) {
	// A damaged file takes no more writes. As it rolls a failed commit
	// back, bbolt may panic again and leave its write lock held. Every later
	// write would hang on that lock.
	for len(batch) > 0 {
		// Checked again on each pass: the writes before a failed one,
		// committed apart, may have found the file damaged.
		if err := db.health.damagedErr(); err != nil {
			answer(batch, err)
			return
		}
		failed := -1
		var txid int
		err := db.updateBolt(func(tx *bolt.Tx) error {
			txid = tx.ID()
			for i, w := range batch {
				if err := w.run(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		db.commits.Add(1)
		if err != nil && failed < 0 && db.checkFailedCommit(txid, err) {
			answer(batch, fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, err))
			return
		}
		if d := (*damaged)(nil); errors.As(err, &d) && d.latch {
			db.health.damage(err)
			answer(batch, err)
			return
		}
		if failed < 0 {
			db.health.committed(err) // the commit's own outcome: the disk's health
			if err == nil {
				db.committedWrites.Add(uint64(len(batch)))
			}
			answer(batch, err) // nil, or the commit's own failure for everyone
			return
		}
		// Each write runs at most twice, however many of the batch fail.
		// That holds if a write that succeeded succeeds again on the same
		// data. (Update asks that it be safe to run again in any case.)
		// The failed write hears of it once those before it have committed.
		// A write that lost to them, run again, then reads what they wrote,
		// not the data it lost on.
		db.commit(batch[:failed])
		batch[failed].done <- err
		batch = batch[failed+1:]
	}
}

// answer tells every write of batch how it ended.
func answer(batch []*write, err error) {
	for _, w := range batch {
		w.done <- err
	}
}

// checkFailedCommit looks at the file after the commit of transaction txid
// failed. It reports whether the commit's outcome is unknown. The meta page
// may have been written before the failure, by an fsync that failed after
// it. Then the transaction is visible through the mapping, though it may
// not be on disk. Its writers cannot be told it was not kept. Nothing read
// from the file can be trusted any more, until a restart reads what the
// disk holds.
func (db *DB) checkFailedCommit(txid int, failure error) (unknown bool) {
	var visible int
	if err := db.bolt.View(func(tx *bolt.Tx) error { visible = tx.ID(); return nil }); err != nil {
		return false
	}
	if visible < txid {
		return false
	}
	db.health.poison(&stopped{cause: fmt.Errorf(
		"transaction %d failed (%v) after its meta page was written, so whether it is on disk is unknown; restart to read what the disk holds", txid, failure)})
	return true
}

// stopped is the state of a DB after a commit whose outcome is unknown.
// The DB takes no more reads or writes until a restart reads what the disk
// holds. Its data is not known to be damaged. So stopped is a
// storage.ErrStopped, not an ErrDamaged. A caller retries with the same key
// once the DB is restarted.
type stopped struct{ cause error }

func (e *stopped) Error() string   { return e.cause.Error() }
func (e *stopped) Unwrap() []error { return []error{storage.ErrStopped, e.cause} }

// run runs the write's function and turns a panic into its error. So one
// bad write neither kills the process nor fails its batch. The Batch
// method of bbolt guards the same way. A panic of bbolt itself, on a
// damaged page, is an ErrDamaged.
func (w *write) run(tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = recovered(p)
		}
	}()
	return w.fn(tx)
}

// updateBolt is bbolt's Update, with a panic while it commits turned into
// an ErrDamaged. Such a panic comes from bbolt's assertions on damaged
// pages as it spills them. The transaction is rolled back by bbolt as the
// panic passes.
func (db *DB) updateBolt(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = asDamaged(p)
		}
	}()
	return db.bolt.Update(fn)
}

// Commits is how many write transactions the DB has committed or tried.
// With group commit, they are fewer than the writes it was asked for.
func (db *DB) Commits() uint64 { return db.commits.Load() }

// CommittedWrites is how many writes commits have carried. Divided by
// Commits, it is the group commit's batch: what one fsync serves.
func (db *DB) CommittedWrites() uint64 { return db.committedWrites.Load() }
