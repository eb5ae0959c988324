package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/interceptor"
)

// endTimeout bounds a rollback, which runs whatever the caller's context.
const endTimeout = 5 * time.Second

type txKey struct{}

// Tx is the unit of work of one claim: the handler's statements, run
// through Run, and the completion of the claim's record, in one PostgreSQL
// transaction. It is an interceptor.Tx.
//
// For a claim that is not durable, the transaction is the one that
// inserted the claim, still open: the handler's statements follow a
// savepoint, so that an error's writes can be dropped while its result is
// stored. For a durable claim, the claim was committed on its own, and the
// transaction begins with the handler's first statement.
type Tx struct {
	db        *DB
	key       interceptor.RecordKey
	claim     *interceptor.Record
	durable   bool
	claimedAt time.Time

	mu     sync.Mutex // one statement at a time: a pgx.Tx is not safe for concurrent use
	ptx    pgx.Tx     // nil for a durable claim until its first statement
	failed error      // the first failure of a statement run through t
	ended  bool
}

var _ interceptor.Tx = (*Tx)(nil)

// Context returns parent carrying t: Run and Read with it join t.
func (t *Tx) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

func (t *Tx) run(ctx context.Context, fn func(Querier) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.ended:
		return ErrTxDone
	case t.failed != nil:
		return fmt.Errorf("pgstore: an earlier statement of this unit of work failed: %w", t.failed)
	}
	if t.ptx == nil {
		ptx, err := t.db.pool.Begin(ctx)
		if err != nil {
			t.failed = err
			return err
		}
		t.ptx = ptx
	}
	if err := fn(t.ptx); err != nil {
		t.failed = err
		return err
	}
	return nil
}

// Commit stores done and, with keepWrites, the handler's statements, in
// one transaction, if the claim still stands and no statement run through
// t failed. Waiters in other processes hear of it when it may have kept
// them waiting: for a durable claim, or one held longer than LockTimeout.
func (t *Tx) Commit(ctx context.Context, done *interceptor.Record, keepWrites bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return ErrTxDone
	}
	defer t.endLocked()
	if t.failed != nil {
		t.rollbackLocked()
		return fmt.Errorf("pgstore: the handler's storage failed, so its result was not stored: %w", t.failed)
	}
	notify := t.durable || time.Since(t.claimedAt) >= t.db.opts.LockTimeout
	if !keepWrites && t.ptx != nil {
		if t.durable {
			t.rollbackLocked() // the claim is committed apart: complete it in a transaction of its own
		} else if _, err := t.ptx.Exec(ctx, `ROLLBACK TO SAVEPOINT handler`); err != nil {
			t.rollbackLocked()
			return err
		}
	}
	if t.ptx == nil {
		return pgx.BeginFunc(ctx, t.db.pool, func(tx pgx.Tx) error {
			return complete(ctx, tx, t.key, done, notify)
		})
	}
	if err := complete(ctx, t.ptx, t.key, done, notify); err != nil {
		t.rollbackLocked()
		return err
	}
	if err := t.ptx.Commit(ctx); err != nil {
		t.rollbackLocked()
		return err
	}
	return nil
}

// Rollback discards the handler's statements. A claim that was not durable
// goes with them and the key is free; a durable one stays in flight under
// the lease rule. After Commit it does nothing.
func (t *Tx) Rollback() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	defer t.endLocked()
	t.rollbackLocked()
	if !t.durable && time.Since(t.claimedAt) >= t.db.opts.LockTimeout {
		// Duplicates may have stopped waiting for the lock: tell them the
		// key is free. Best effort; they poll too.
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		defer cancel()
		t.db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, noticeChannel, noticePayload(t.key))
	}
}

// endLocked forgets the claim as pending: its transaction has ended.
func (t *Tx) endLocked() {
	t.ended = true
	if !t.durable {
		t.db.removePending(t.key, t.claim)
	}
}

func (t *Tx) rollbackLocked() {
	if t.ptx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	t.ptx.Rollback(ctx) // an error closes the connection, which rolls back too
	t.ptx = nil
}
