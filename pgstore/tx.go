package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsd/paymentsd/internal/ledger"
	"github.com/paymentsd/paymentsd/storage"
)

// endTimeout bounds a rollback, which runs whatever the caller's context.
const endTimeout = 5 * time.Second

// beginReadCommitted begins every transaction of pgstore's, whatever the
// database's default. A claim's read must see what the claim that held the
// key's lock before committed. Under REPEATABLE READ its snapshot would
// predate the lock. A release's read must too, for the same reason. Every
// transaction a handler's statements run in begins so as well. They then
// run alike whether or not the call has a key or its claim is durable. See
// docs/design/read-committed.md.
const beginReadCommitted = `BEGIN ISOLATION LEVEL READ COMMITTED`

// readCommitted begins a pgx transaction with beginReadCommitted.
var readCommitted = pgx.TxOptions{BeginQuery: beginReadCommitted}

type txKey struct{}

// Tx is the unit of work of one claim, in one PostgreSQL transaction. It
// holds the handler's statements, run through Run, and the record of the
// claim's result. It is an storage.Tx.
//
// For a claim that is not durable, the transaction is the one that took the
// key's lock and read its record. It is still open on its connection. The
// record is written only when it commits, as a completed record. The lock
// is the transaction's. So the COMMIT that makes the record visible also
// frees the key, with no statement of its own. An error's writes are rolled
// back and its record written in a new transaction. The key is first locked
// for the session too, since a lock of the session outlives a rollback. So
// the key stays locked throughout.
//
// For a durable claim, the claim was committed on its own. A transaction
// begins with the handler's first statement.
//
// The claim's transaction is READ COMMITTED whatever the database's default
// (see lockAndRead). So is a durable claim's handler's transaction. The
// handler's statements thus run at one level, whichever way its method was
// declared.
//
// The transaction is driven with BEGIN and COMMIT statements on a pooled
// connection. They then share round trips with the claim and the
// completion. A fresh create takes three, as many as the same write without
// the interceptor.
type Tx struct {
	db        *DB
	key       storage.RecordKey
	lock      int64 // the key's advisory lock, held by conn's transaction
	claim     *storage.Record
	prior     *storage.Record // the record the claim replaces, if any
	lease     time.Duration
	durable   bool
	claimedAt time.Time
	// committing is taken as Commit begins, before it sends anything. The
	// completed record the ledger keeps is trusted from then.
	committing ledger.Generation

	mu     sync.Mutex    // one statement at a time: a connection is not safe for concurrent use
	conn   *pgxpool.Conn // in a transaction, holding the key's lock; nil for a durable claim until its first statement
	failed error         // the first failure of a statement run through t
	ended  bool
	// sessionLock says conn may hold the key's lock for its session. Only a
	// rollback of t's writes asks for that (see Commit). Then
	// rollbackLocked must release it.
	sessionLock bool
}

var _ storage.Tx = (*Tx)(nil)

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
	if t.conn == nil {
		conn, err := t.db.pool.Acquire(ctx)
		if err == nil {
			if _, err = conn.Exec(ctx, beginReadCommitted); err != nil {
				conn.Release()
			}
		}
		if err != nil {
			t.failed = t.db.noteFailure(err)
			return err
		}
		t.conn = conn
	}
	if err := fn(t.conn); err != nil {
		t.failed = t.db.noteFailure(err)
		return err
	}
	return nil
}

// Commit stores done and, if it keeps writes, the handler's statements,
// in one transaction. It does so if the claim still stands and no statement run
// through t failed. Waiters in other processes hear of it when it may have
// kept them waiting. That is for a durable claim, or one held longer than
// LockTimeout.
func (t *Tx) Commit(ctx context.Context, done *storage.Record) error {
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
	t.committing = t.db.ledger.Generation(t.key)
	notify := t.durable || time.Since(t.claimedAt) >= t.db.opts.LockTimeout
	if t.durable {
		return t.commitDurableLocked(ctx, done, notify)
	}
	// One round trip. Should the record's insert fail (the claim was
	// superseded), the transaction aborts. The COMMIT after it then does
	// not run. So the handler's writes never commit without their record.
	b := &pgx.Batch{}
	keepWrites := done.KeepsWrites()
	if !keepWrites {
		// The key stays locked from the rollback to the record's commit.
		// The session takes its lock too, at once, since it holds it
		// already.
		// So does the scope's fence lock, held shared since the look.
		t.sessionLock = true
		b.Queue(`SELECT pg_advisory_lock($1), pg_advisory_lock_shared($2)`, t.lock, FenceLock(t.key.Scope))
		b.Queue(`ROLLBACK`)
		b.Queue(`BEGIN`)
	}
	if t.prior != nil {
		queueDelete(b, t.key, t.prior)
	}
	if err := queueInsert(b, t.key, done, t.lease); err != nil {
		t.rollbackLocked()
		return err
	}
	if notify {
		b.Queue(`SELECT pg_notify($1, $2)`, noticeChannel, noticePayload(t.key))
	}
	b.Queue(`COMMIT`)
	if !keepWrites {
		b.Queue(`SELECT pg_advisory_unlock_all()`)
	}
	if err := t.sendCommit(ctx, b, execAll(b)); err != nil {
		t.db.noteStall(t.conn.Conn().PgConn(), err)
		t.rollbackLocked()
		return replaced(commitOutcome(err))
	}
	if err := t.keptLocallyOnly(); err != nil {
		return err
	}
	t.conn.Release()
	t.conn = nil
	t.db.ledger.Remember(t.key, done, 0, t.committing)
	return nil
}

// commitDurableLocked completes a durable claim. If the handler made
// statements and done keeps them, it completes in their transaction, in one
// round trip. Otherwise it completes in a statement of its own.
func (t *Tx) commitDurableLocked(ctx context.Context, done *storage.Record, notify bool) error {
	stmt, args, err := completion(t.key, done, notify)
	if err != nil {
		t.rollbackLocked()
		return err
	}
	if t.conn == nil || !done.KeepsWrites() {
		t.rollbackLocked()
		err := t.db.execCommit(ctx, stmt, args...)
		if err == nil {
			t.db.ledger.Remember(t.key, done, 0, t.committing)
		}
		return superseded(t.key.Scope, commitOutcome(t.db.noteFailure(err)))
	}
	// A completion that finds the claim superseded raises, and the COMMIT
	// after it does not run.
	b := &pgx.Batch{}
	b.Queue(stmt, args...)
	b.Queue(`COMMIT`)
	if err := t.sendCommit(ctx, b, execAll(b)); err != nil {
		t.db.noteStall(t.conn.Conn().PgConn(), err)
		t.rollbackLocked()
		return superseded(t.key.Scope, commitOutcome(err))
	}
	if err := t.keptLocallyOnly(); err != nil {
		return err
	}
	t.conn.Release()
	t.conn = nil
	t.db.ledger.Remember(t.key, done, 0, t.committing)
	return nil
}

// Rollback discards the handler's statements. A claim that was not durable
// goes with them and the key is free. A durable one stays in flight under
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

// endLocked marks t ended, and the ledger stops holding its claim.
func (t *Tx) endLocked() {
	t.ended = true
	t.db.ledger.Unhold(t.key, t.claim)
}

// rollbackLocked ends t's transaction, if it has one, which releases the
// key's lock. It returns the connection to the pool. The session may have
// taken the lock too. Then it releases every session lock of the
// connection. A claim's connection holds no other. No connection may go
// back to the pool holding one: it would keep its key locked for every
// process. A connection that fails to do so is closed, which ends both as
// well.
func (t *Tx) rollbackLocked() {
	if t.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`ROLLBACK`)
	if t.sessionLock {
		b.Queue(`SELECT pg_advisory_unlock_all()`)
	}
	if err := t.sendBatch(ctx, b, execAll(b)); err != nil {
		t.conn.Conn().Close(ctx)
	}
	t.conn.Release()
	t.conn = nil
}

// end ends a look's transaction. With confirm, the call is answered from
// the record the look read. The transaction then commits, and its COMMIT
// waits until the synchronous standby is known to have that record (see
// confirmRecordSQL). So a record kept only locally is never replayed: one
// on an old primary left running after a failover, or one whose wait for
// the standby was cancelled. The COMMIT takes the place of a ROLLBACK: no
// round trip more. Without a synchronous standby it costs nothing more
// either. It reports false when the record has gone since it was read.
// Without confirm, end rolls back.
func (t *Tx) end(ctx context.Context, confirm bool) (bool, error) {
	if !confirm {
		t.rollbackLocked()
		return true, nil
	}
	return t.commitProven(ctx, confirmRecordSQL, t.key.Scope, t.key.Key)
}

// commitProven runs proof, a query of one boolean, and commits t's
// transaction, in one round trip, and returns the boolean. proof writes
// WAL when the server has a synchronous standby (confirmRecordSQL,
// proveReadSQL), so the COMMIT waits until the standby confirms it. A
// commit that stalls, or whose wait was cancelled, fails: what t read is
// not answered from.
func (t *Tx) commitProven(ctx context.Context, proof string, args ...any) (bool, error) {
	var there bool
	b := &pgx.Batch{}
	b.Queue(proof, args...)
	b.Queue(`COMMIT`)
	err := t.sendCommit(ctx, b, func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&there); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	})
	if err == nil && t.db.standby.waitCancelled(t.conn.Conn().PgConn()) {
		err = errWaitCancelled
	}
	if err != nil {
		if t.db.noteStall(t.conn.Conn().PgConn(), err) {
			t.db.standby.unconfirmed.Add(1)
		}
		t.rollbackLocked()
		return false, fmt.Errorf("pgstore: what was read is not known to be on the synchronous standby, so it is not answered from: %w", err)
	}
	t.conn.Release()
	t.conn = nil
	return there, nil
}

// keptLocallyOnly is ErrOutcomeUnknown when the commit just made on t's
// connection had its wait for the synchronous standby cancelled on the
// server. It is then kept locally, and a failover may lose it: no answer
// is given from it. A retry waits until the standby has it (see end).
func (t *Tx) keptLocallyOnly() error {
	if !t.db.standby.waitCancelled(t.conn.Conn().PgConn()) {
		return nil
	}
	t.rollbackLocked()
	return fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, errWaitCancelled)
}

// execCommit runs stmt, which commits by itself, on a pooled connection,
// as keptLocallyOnly judges a Tx's commit.
func (db *DB) execCommit(ctx context.Context, stmt string, args ...any) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return db.commitOn(ctx, conn, stmt, args...)
}

// commitOn runs stmt, which commits by itself, on conn, as keptLocallyOnly
// judges a Tx's commit: a wait for the standby that was cancelled fails it.
func (db *DB) commitOn(ctx context.Context, conn *pgxpool.Conn, stmt string, args ...any) error {
	defer db.standby.committing(conn.Conn().PgConn())()
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		db.noteStall(conn.Conn().PgConn(), err)
		return err
	}
	if db.standby.waitCancelled(conn.Conn().PgConn()) {
		return fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, errWaitCancelled)
	}
	return nil
}

// sendCommit is sendBatch for a batch that commits: its commit may wait
// for the standby, and is given up if its server turns suspect meanwhile
// (see giveUpCommits).
func (t *Tx) sendCommit(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	defer t.db.standby.committing(t.conn.Conn().PgConn())()
	return t.sendBatch(ctx, b, read)
}
