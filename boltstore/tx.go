package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

// ErrTxDone is returned by Update for a write to a Tx that has ended.
var ErrTxDone = errors.New("boltstore: write to a unit of work that has ended")

type txKey struct{}

// Tx is the unit of work of one claim. It holds the writes its handler
// stages through Update. They are committed with the claim's result in one
// transaction of the group commit. Tx is a storage.Tx.
type Tx struct {
	db    *DB
	rk    storage.RecordKey
	key   []byte // rk as the file's key
	claim *storage.Record
	// durable is true when the claim was committed before the handler ran.
	// Otherwise the claim is pending in memory. Then base is the stored
	// record it replaces, as read at claimedAt. That is nil when none.
	durable   bool
	base      *storage.Record
	baseRaw   []byte // base's encoding
	claimedAt time.Time

	mu     sync.Mutex
	writes []func(*bolt.Tx) error
	failed error // the first failure of a read or write made through t
	ended  bool
}

var _ storage.Tx = (*Tx)(nil)

// Context returns parent carrying t: Update with it joins t.
func (t *Tx) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

func (t *Tx) stage(fn func(*bolt.Tx) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return ErrTxDone
	}
	t.writes = append(t.writes, fn)
	return nil
}

func (t *Tx) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed == nil {
		t.failed = err
	}
}

// end marks t ended and returns its writes and failure. It returns ok
// false if t had ended.
func (t *Tx) end() (writes []func(*bolt.Tx) error, failed error, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return nil, nil, false
	}
	t.ended = true
	return t.writes, t.failed, true
}

// Commit stores done in one write of the group commit. If done keeps
// writes, the staged writes join that write. Commit stores nothing unless the claim
// still stands and no read or write made through t failed. The claim is
// released from memory once the commit has ended, either way. Committed,
// its record answers for it. If the commit failed, a claim that was not
// durable leaves the key free to run afresh. A durable one stays in flight
// under the lease rule.
func (t *Tx) Commit(ctx context.Context, done *storage.Record) error {
	writes, failed, ok := t.end()
	if !ok {
		return ErrTxDone
	}
	defer t.db.ledger.Unhold(t.rk, t.claim)
	if failed != nil {
		return fmt.Errorf("boltstore: the handler's storage failed, so its result was not stored: %w", failed)
	}
	if !done.KeepsWrites() {
		writes = nil
	}
	v, err := encodeRecord(t.key, done) // here, not in the committer, which every write waits for
	if err != nil {
		return err
	}
	defer t.db.ledger.Forget(t.rk) // the record it replaces, if any, had expired
	err = t.db.update(ctx, func(tx *bolt.Tx) error {
		prior, err := t.stillClaimed(tx)
		if err != nil {
			return err
		}
		for _, fn := range writes {
			if err := fn(tx); err != nil {
				return err
			}
		}
		// The record it replaces may be a claim in flight. That is a durable
		// claim's own, or an orphan that a transactional claim took over. A
		// fresh transactional create replaces none, and leaves the index
		// alone.
		if prior != nil && prior.State == storage.StateInFlight {
			if err := setInFlight(tx, t.key, false); err != nil {
				return err
			}
		}
		if t.durable {
			return putRecordRaw(tx, t.key, v)
		}
		return putClaimRaw(tx, t.key, prior, done.Expiry, v)
	})
	if err == nil && t.durable { // only a durable claim is renewed
		t.db.ledger.DropRenewals(t.rk) // its record has its result
	}
	return err
}

// stillClaimed returns ErrSuperseded unless the claim still stands in tx.
// A durable claim must be the stored record (CheckClaim). A pending one
// must find the record it was decided on, byte for byte. Or it must find
// nothing, where that record had expired and was swept since. It returns
// the record its commit replaces.
func (t *Tx) stillClaimed(tx *bolt.Tx) (prior *storage.Record, err error) {
	if t.durable {
		return storedClaim(tx, t.key, t.claim)
	}
	switch cur := tx.Bucket(bucketRecords).Get(t.key); {
	case bytes.Equal(cur, t.baseRaw):
		return t.base, nil
	case cur == nil && t.base != nil && !t.claimedAt.Before(t.base.Expiry):
		return nil, nil // swept, with its index entry
	default:
		return nil, storage.ErrSuperseded
	}
}

// Rollback discards the staged writes and releases the claim from memory.
// A claim that was not durable is gone. A durable one stays in flight under
// the lease rule. After Commit, Rollback does nothing.
func (t *Tx) Rollback() {
	if _, _, ok := t.end(); ok {
		t.db.ledger.Unhold(t.rk, t.claim)
	}
}
