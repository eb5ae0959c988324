package boltstore

import (
	"errors"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// ErrClosed is returned by writes to a closed DB.
var ErrClosed = errors.New("boltstore: closed")

// maxBatch bounds how many writes share one commit, so that one commit's
// transaction never grows without limit under load.
const maxBatch = 512

// Group commit. Every write is a function queued to one committer
// goroutine, which runs all the writes waiting at that moment in a single
// bbolt transaction: one fsync for the lot. A write returns only once its
// commit is durable. The next commit starts as soon as the previous one
// ends, so a lone writer waits for nothing but its own fsync (bbolt's
// DB.Batch instead waits up to 10ms for company), while under load each
// fsync is shared by everything that queued during the last one.
type write struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// update runs fn in a write transaction shared with other writers and
// returns once it is durable. fn may run more than once, if another write
// of its batch fails, so it must set its results afresh on every run. An
// error from fn rolls back fn alone, and is returned to its caller only.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	w := &write{fn: fn, done: make(chan error, 1)}
	select {
	case db.queue <- w:
		return <-w.done
	case <-db.quit:
		return ErrClosed
	}
}

// commitLoop is the committer goroutine; it ends when quit is closed.
func (db *DB) commitLoop() {
	defer close(db.committerDone)
	batch := make([]*write, 0, maxBatch)
	for {
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
// dropped and answered, and the rest run again in a new transaction.
func (db *DB) commit(batch []*write) {
	for len(batch) > 0 {
		failed := -1
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			for i, w := range batch {
				if err := w.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		db.commits.Add(1)
		if failed < 0 {
			for _, w := range batch {
				w.done <- err // nil, or the commit's own failure for everyone
			}
			return
		}
		batch[failed].done <- err
		batch = slices.Delete(batch, failed, failed+1)
	}
}

// Commits is how many write transactions the DB has committed or tried:
// with group commit, fewer than the writes it was asked for.
func (db *DB) Commits() uint64 { return db.commits.Load() }
