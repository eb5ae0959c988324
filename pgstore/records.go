package pgstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsd/paymentsd/internal/ledger"
	"github.com/paymentsd/paymentsd/storage"
)

// DB is an storage.TxStore and a Watcher.
var (
	_ storage.TxStore = (*DB)(nil)
	_ storage.Watcher = (*DB)(nil)
)

// sweepBatch bounds the records one statement of Sweep deletes. So no
// sweep holds many row locks or a long transaction.
const sweepBatch = 1000

// Claim decides req and, when it is claimed, commits the claim before
// returning.
func (db *DB) Claim(ctx context.Context, req storage.ClaimRequest) (storage.Outcome, *storage.Record, error) {
	outcome, rec, tx, err := db.ClaimTx(ctx, req, storage.Durable)
	if tx != nil {
		tx.Rollback() // nothing to roll back: a durable claim's Tx begins on its first statement
	}
	return outcome, rec, err
}

// ClaimTx decides req as Claim does and, when it is claimed, returns the Tx
// that completes it. A Transactional claim writes nothing yet. It
// holds the key's lock in the Tx's open transaction. Its record is
// inserted, completed, when the Tx commits. Other processes' claims of the
// key wait for the lock, and see the result once it commits. A crash, or a
// connection lost, releases the lock and leaves nothing.
//
// ClaimTx asks the ledger, then takes the key's lock and reads its record,
// decides once, and writes. The lock is an advisory lock of the claim's
// transaction. A fresh key is claimed in one round trip. A duplicate of a
// claim not yet committed, in any process, asks again with a back-off
// until LockTimeout has passed. It holds no connection in between. So
// waiting duplicates, however many, leave the pool to fresh requests. Each
// look also reads the record as committed. That answers a duplicate at
// once when it can (a replay, a mismatch).
func (db *DB) ClaimTx(ctx context.Context, req storage.ClaimRequest, d storage.Durability) (storage.Outcome, *storage.Record, storage.Tx, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, nil, err
	}
	if outcome, rec, ok := db.ledger.Lookup(db.onDatabaseClock(req), nil); ok {
		return outcome, rec, nil, nil
	}
	giveUp := time.Now().Add(db.opts.LockTimeout)
	for backoff := lockPollFirst; ; backoff = min(2*backoff, lockPollMax) {
		l, err := db.look(ctx, req)
		if err != nil {
			return 0, nil, nil, db.noteFailure(err)
		}
		outcome, rec := db.ledger.Decide(l.req, d, l.stored)
		switch {
		case !outcome.Claimed():
			// An answer from a stored record waits until the synchronous
			// standby is known to have it (see Tx.end).
			there, err := l.tx.end(ctx, l.stored != nil)
			if err != nil {
				return 0, nil, nil, err
			}
			if there {
				db.ledger.Remember(req.Key, rec, 0, l.generation)
				return outcome, rec, nil, nil
			}
			continue // the record went meanwhile: look again
		case l.locked:
			return db.take(ctx, l, outcome, rec, d)
		}
		if l.lockTimedOut || l.at.After(giveUp) {
			// Another claim of the key holds its lock, most likely of the
			// same request. The key is in flight once a look begun after
			// LockTimeout found it still locked. So a claim that committed
			// within LockTimeout is seen, however long the look waited for a
			// pooled connection. That lock may be a stale server's, an old
			// primary's: the answer waits, as a replay does, until the
			// standby confirms the server is current, for inFlightProof
			// at most.
			pctx, cancel := context.WithTimeout(ctx, inFlightProof)
			_, err := l.tx.commitProven(pctx, proveReadSQL)
			cancel()
			if err != nil {
				return 0, nil, nil, err
			}
			return storage.OutcomeInFlight, inFlightGuess(l.req, db.opts.LockTimeout), nil, nil
		}
		l.tx.rollbackLocked()
		select {
		case <-time.After(max(0, min(time.Until(giveUp)+time.Millisecond, backoff))):
		case <-ctx.Done():
			return 0, nil, nil, ctx.Err()
		}
	}
}

// onDatabaseClock is req at the database's clock as last seen, unless
// CallerClock.
func (db *DB) onDatabaseClock(req storage.ClaimRequest) storage.ClaimRequest {
	if !db.opts.CallerClock {
		db.mu.Lock()
		req.Now = time.Now().Add(db.clockOffset)
		db.mu.Unlock()
	}
	return req
}

// inFlightProof bounds the wait for the standby's confirmation of an
// in-flight answer. On an old primary it never comes, and duplicates
// there are many: each waiting until its caller's deadline would hold a
// pooled connection the health probe needs. One that runs out marks the
// server suspect (noteStall), sooner than the probe would. The caller is
// told UNAVAILABLE, as retryable as in flight.
const inFlightProof = time.Second

// The back-off of a claim that finds its key locked. It asks again after
// lockPollFirst, doubling up to lockPollMax, until LockTimeout has passed.
const (
	lockPollFirst = 2 * time.Millisecond
	lockPollMax   = 50 * time.Millisecond
)

// errLocked says a lock that a statement waited for was not granted within
// LockTimeout (the pool's lock_timeout). Such a lock is a table's, say,
// queued behind a schema change. The key's own lock is never waited for
// (see look).
var errLocked = errors.New("pgstore: a lock was not granted within the lock timeout")

// A look is what one try of a key's lock found.
type look struct {
	// tx is the look's transaction, open on its connection. It holds the
	// key's lock when locked: not when another claim holds it, nor when
	// lockTimedOut.
	tx     *Tx
	locked bool
	// stored is the key's record as committed, and req is the request on
	// the database's clock as read with it.
	stored *storage.Record
	req    storage.ClaimRequest
	// at is when the look began, before the lock was asked for. A
	// duplicate waiting elsewhere times its wait from no earlier than this
	// (see Tx.Commit's notice).
	at           time.Time
	generation   ledger.Generation
	lockTimedOut bool // the read waited out LockTimeout (errLocked)
}

// look takes the key's lock if it is free and reads its record, in one
// round trip. It does so inside a transaction on a connection of its own.
// When the lock was not granted in time, it reads the record without it.
func (db *DB) look(ctx context.Context, req storage.ClaimRequest) (look, error) {
	l := look{generation: db.ledger.Generation(req.Key)}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return l, err
	}
	l.at = time.Now()
	t := &Tx{db: db, key: req.Key, lock: KeyLock(req.Key), conn: conn}
	locked, stored, now, err := t.lockAndRead(ctx)
	if err != nil {
		t.rollbackLocked()
		if errors.Is(err, errLocked) {
			return db.lookWithoutLock(ctx, req, l.generation)
		}
		return l, err
	}
	db.sawClock(now)
	if !db.opts.CallerClock {
		req.Now = now
	}
	l.tx, l.locked, l.stored, l.req = t, locked, stored, req
	return l, nil
}

// lookWithoutLock reads the key's record as committed, without its lock,
// with the database's clock, in a transaction left open as look's is.
func (db *DB) lookWithoutLock(ctx context.Context, req storage.ClaimRequest, g ledger.Generation) (look, error) {
	l := look{at: time.Now(), generation: g, lockTimedOut: true}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return l, err
	}
	t := &Tx{db: db, key: req.Key, conn: conn}
	var now time.Time
	var stored *storage.Record
	b := &pgx.Batch{}
	b.Queue(beginReadCommitted)
	b.Queue(selectRecordAt, req.Key.Scope, req.Key.Key)
	err = t.sendBatch(ctx, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		var err error
		stored, err = scanRecord(br.QueryRow(), &now)
		return err
	})
	if err != nil {
		t.rollbackLocked()
		return l, err
	}
	if !db.opts.CallerClock {
		req.Now = now
	}
	l.tx, l.stored, l.req = t, stored, req
	return l, nil
}

// take makes rec, the claim l decided, in l's transaction. A
// Transactional claim keeps the transaction open, and the lock. It is held in the
// ledger, and its record is written when its Tx commits. A Durable one
// writes its claim, commits and unlocks at once.
func (db *DB) take(ctx context.Context, l look, outcome storage.Outcome, rec *storage.Record, d storage.Durability) (storage.Outcome, *storage.Record, storage.Tx, error) {
	t := l.tx
	t.claim, t.prior, t.lease, t.claimedAt, t.durable = rec, l.stored, l.req.Lease, l.at, d != storage.Transactional // any other value fails safe, as Durable
	if !t.durable {
		db.ledger.Hold(t.key, rec)
		return outcome, rec, t, nil
	}
	if err := t.writeDurableClaim(ctx); err != nil {
		t.rollbackLocked()
		return 0, nil, nil, err
	}
	return outcome, rec, t, nil
}

// lockAndRead begins t's transaction and takes its key's lock if no other
// session holds it. It reads the database's clock with the lock. It then
// reads the key's record as committed, whether or not it got the lock. All
// this takes one round trip, so a fresh key costs a claim no more.
//
// The read is a statement of its own, after the lock's. Its snapshot is
// taken once the lock is held. So it sees a record committed by the claim
// that held the lock before. That takes READ COMMITTED, whatever the
// database's default. Under REPEATABLE READ the snapshot would be the lock
// statement's. See docs/design/read-committed.md.
//
// It runs before t is returned to anyone, so t.mu is not needed. On a
// failure other than errLocked it closes t's connection. The caller's
// rollback then returns that connection to the pool.
func (t *Tx) lockAndRead(ctx context.Context) (locked bool, stored *storage.Record, now time.Time, err error) {
	b := &pgx.Batch{}
	b.Queue(beginReadCommitted)
	b.Queue(`SELECT pg_try_advisory_xact_lock($1), pg_try_advisory_xact_lock_shared($2), clock_timestamp()`, t.lock, FenceLock(t.key.Scope))
	b.Queue(selectFence, t.key.Scope)
	b.Queue(selectRecord, t.key.Scope, t.key.Key)
	var unfenced, fenced bool
	err = t.sendBatch(ctx, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&locked, &unfenced, &now); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&fenced); err != nil {
			return err
		}
		var err error
		stored, err = scanRecord(br.QueryRow())
		return err
	})
	if err == nil && locked && (fenced || !unfenced) {
		// Refused only with the key's lock: a look without it only
		// answers from a record, the same on the scope's new database.
		err = &storage.ScopeUnavailableError{Scope: t.key.Scope, Why: "moved to another database", RetryAfter: FenceRetry}
	}
	if err != nil {
		// A lock wait that ran out was the read's (a table lock queued
		// behind a schema change). The key's lock may have been taken:
		// rollbackLocked releases it either way. Any other failure may have
		// left the connection unusable. It is closed, which releases all.
		if !errors.Is(err, errLocked) && !errors.Is(err, storage.ErrScopeUnavailable) {
			t.conn.Conn().Close(ctx)
		}
		return false, nil, time.Time{}, err
	}
	return locked, stored, now, nil
}

// writeDurableClaim stores t's claim in place of the record it replaces,
// if any. It commits and releases the key's lock, all in one round trip. So
// a durable claim survives whatever the handler does next. It returns t's
// connection to the pool. The handler's transaction begins on its first
// statement (see Tx.run). Like lockAndRead, it runs before t is shared.
func (t *Tx) writeDurableClaim(ctx context.Context) error {
	b := &pgx.Batch{}
	if t.prior != nil {
		queueDelete(b, t.key, t.prior)
	}
	if err := queueInsert(b, t.key, t.claim, t.lease); err != nil {
		return err
	}
	b.Queue(`COMMIT`)
	if err := t.sendCommit(ctx, b, execAll(b)); err != nil {
		t.db.noteStall(t.conn.Conn().PgConn(), err)
		return replaced(err)
	}
	t.conn.Release()
	t.conn = nil
	return nil
}

// keyDigest is the hash that names k to the database where the key itself
// must not go. That is in its advisory lock and in the notices of its
// claims.
func keyDigest(k storage.RecordKey) [sha256.Size]byte {
	return sha256.Sum256([]byte(k.Scope + "\x00" + k.Key))
}

// KeyLock is the advisory lock, a bigint, that a claim of k holds in its
// transaction. The claim holds it until it commits or rolls back. It is the
// first 8 bytes of k's digest. Two keys that share one only wait for each
// other. In pg_locks it is the row of locktype 'advisory' whose classid and
// objid are its high and low 32 bits. An operator can ask there which
// session holds a key.
func KeyLock(k storage.RecordKey) int64 {
	h := keyDigest(k)
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// queueDelete queues the deletion of prior, the record a claim replaces:
// an in-flight one taken over, or an expired one. It deletes prior only if
// it is still stored as it was read. If it is gone (swept), nothing is
// deleted and the insert after it goes ahead. If it changed (an old attempt
// completed meanwhile), the insert after it fails on the primary key. See
// replaced.
func queueDelete(b *pgx.Batch, k storage.RecordKey, prior *storage.Record) {
	b.Queue(`DELETE FROM idempotency_records
		WHERE scope = $1 AND key = $2 AND state = $3 AND attempt = $4 AND claim_token = $5`,
		k.Scope, k.Key, int16(prior.State), int64(prior.Attempt), prior.Token[:])
}

// queueInsert queues the insert of r, a claim or a completed record. It is
// a plain insert. One that finds the key taken fails and aborts the
// transaction. So a COMMIT in the same batch does not run.
func queueInsert(b *pgx.Batch, k storage.RecordKey, r *storage.Record, lease time.Duration) error {
	var (
		res         []byte
		leaseExpiry *time.Time
	)
	if r.Result != nil {
		var err error
		if res, err = r.Result.MarshalBinary(); err != nil {
			return err
		}
	} else {
		leaseExpiry = &r.LeaseExpiry
	}
	b.Queue(`INSERT INTO idempotency_records
			(scope, key, fingerprint, fingerprint_scheme, state, attempt, claim_token, owner, lease_us, lease_expire_time, expire_time, result, transactional, claim_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		k.Scope, k.Key, r.Fingerprint[:], r.Scheme, int16(r.State), int64(r.Attempt), r.Token[:], r.Owner,
		lease.Microseconds(), leaseExpiry, r.Expiry, res, r.Durability == storage.Transactional, nullTime(r.ClaimTime))
	return nil
}

// replaced is err, or ErrSuperseded when err is an insert that found its
// key taken. Another attempt's record was then stored since the claim read
// it.
func replaced(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == "idempotency_records" {
		return storage.ErrSuperseded
	}
	return err
}

// execAll reads the results of a batch of statements that return no rows
// anyone needs.
func execAll(b *pgx.Batch) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		for range b.Len() {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	}
}

// sendBatch sends b on t's connection in one round trip and reads its
// results with read. A lock wait that ran out is errLocked. A failure that
// says the database cannot write is noted for Probe.
func (t *Tx) sendBatch(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	br := t.conn.SendBatch(ctx, b)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if isLockTimeout(err) {
		return errLocked
	}
	return t.db.noteFailure(err)
}

// inFlightGuess is the record a claim answers in flight with. Another
// process then holds the key locked, not yet committed. The record is what
// that claim most likely is. Its lease is the lock timeout, the retry hint
// a waiter gets.
func inFlightGuess(req storage.ClaimRequest, lockTimeout time.Duration) *storage.Record {
	return &storage.Record{
		Fingerprint: req.Fingerprint,
		Scheme:      req.Scheme,
		State:       storage.StateInFlight,
		Attempt:     1,
		LeaseExpiry: req.Now.Add(lockTimeout),
		Expiry:      req.Now.Add(req.TTL),
	}
}

func isLockTimeout(err error) bool {
	if err == nil {
		return false // without the allocation errors.As would make
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// selectRecord reads the record of a key: a row, or none.
const selectRecord = `SELECT ` + recordColumns + ` FROM idempotency_records r WHERE r.scope = $1 AND r.key = $2`

// selectRecordAt reads the record of a key, if any, and the database's
// clock. A key without a record gives null columns. The row is read by
// scanRecord with the clock first.
const selectRecordAt = `SELECT clock_timestamp(), ` + recordColumns + `
	FROM (VALUES (1)) AS one LEFT JOIN idempotency_records r ON r.scope = $1 AND r.key = $2`

// scanRecord reads a row of recordColumns, after the columns before it
// that first are scanned into. It returns the record, or nil when there is
// none (no row, or null columns).
//
// A record may break the rules of the table. Its bytes may not decode, or
// its state, attempt or result may not be what queueInsert and
// idempotency_complete write. Such a record is an error wrapping
// storage.ErrDamaged. No answer can be made from it, and retrying will not
// mend it. The table has no CHECK constraints for those rules. PostgreSQL
// would read and plan them for every insert (migration 0005). So they are
// checked here, where a record is used.
func scanRecord(row pgx.Row, first ...any) (*storage.Record, error) {
	var c struct { // the columns, in one allocation rather than one each
		fingerprint, token, res []byte
		scheme, owner           *string
		state                   *int16
		attempt                 *int64
		leaseExpiry, expiry     *time.Time
		claimTime               *time.Time
		transactional           *bool
	}
	err := row.Scan(append(first, &c.fingerprint, &c.scheme, &c.state, &c.attempt, &c.token, &c.owner, &c.leaseExpiry, &c.expiry, &c.res, &c.transactional, &c.claimTime)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case c.state == nil:
		return nil, nil
	}
	rec := &storage.Record{Scheme: *c.scheme, State: storage.State(*c.state), Attempt: uint64(*c.attempt), Owner: *c.owner, Expiry: *c.expiry}
	if *c.transactional {
		rec.Durability = storage.Transactional
	}
	switch {
	case rec.State != storage.StateInFlight && rec.State != storage.StateCompleted:
		return nil, fmt.Errorf("pgstore: %w: a record has state %d", storage.ErrDamaged, *c.state)
	case *c.attempt <= 0:
		return nil, fmt.Errorf("pgstore: %w: a record has attempt %d", storage.ErrDamaged, *c.attempt)
	case (rec.State == storage.StateCompleted) != (c.res != nil):
		return nil, fmt.Errorf("pgstore: %w: a record of state %d with a result: %t", storage.ErrDamaged, *c.state, c.res != nil)
	case len(c.fingerprint) != len(rec.Fingerprint) || len(c.token) != len(rec.Token):
		return nil, fmt.Errorf("pgstore: %w: a record has a malformed fingerprint or claim token", storage.ErrDamaged)
	}
	copy(rec.Fingerprint[:], c.fingerprint)
	copy(rec.Token[:], c.token)
	if c.leaseExpiry != nil {
		rec.LeaseExpiry = *c.leaseExpiry
	}
	if c.claimTime != nil {
		rec.ClaimTime = *c.claimTime
	}
	if rec.State == storage.StateCompleted {
		rec.Result = new(storage.Result)
		if err := rec.Result.UnmarshalBinary(c.res); err != nil {
			return nil, fmt.Errorf("pgstore: %w: a completed record's result: %w", storage.ErrDamaged, err)
		}
	}
	return rec, nil
}

// Get returns the record stored for k, live or expired, or nil when there
// is none. It only reads. It is for an operator's question about a key.
func (db *DB) Get(ctx context.Context, k storage.RecordKey) (rec *storage.Record, err error) {
	err = db.Read(ctx, func(q Querier) error {
		rec, err = scanRecord(q.QueryRow(ctx, selectRecord, k.Scope, k.Key))
		return err
	})
	return rec, err
}

// CountRecords returns PostgreSQL's estimate of the records the table
// holds, live or expired but not yet swept. So a metrics scrape never
// counts the table. The estimate is the live rows the table's statistics
// count as rows come and go (pg_stat_user_tables.n_live_tup). Once a crash
// has reset those, it is the rows the last VACUUM or ANALYZE found
// (pg_class.reltuples).
func (db *DB) CountRecords(ctx context.Context) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT CASE WHEN coalesce(s.n_live_tup, 0) > 0 THEN s.n_live_tup ELSE greatest(c.reltuples, 0)::bigint END
		FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.oid = 'idempotency_records'::regclass`).Scan(&n)
	return n, err
}

var _ storage.Upkeep = (*DB)(nil)

// Renew extends the claim's lease by its length from now, on the
// database's clock. With CallerClock, it extends it to claim.LeaseExpiry.
// It does so only if the claim is still the stored one. State 1 is
// storage.StateInFlight, as queueInsert stores it.
func (db *DB) Renew(ctx context.Context, k storage.RecordKey, claim *storage.Record) error {
	var to *time.Time
	if db.opts.CallerClock {
		to = &claim.LeaseExpiry
	}
	tag, err := db.pool.Exec(ctx, `UPDATE idempotency_records
		SET lease_expire_time = coalesce($5::timestamptz, clock_timestamp() + lease_us * interval '1 microsecond')
		WHERE scope = $1 AND key = $2 AND state = 1 AND attempt = $3 AND claim_token = $4`,
		k.Scope, k.Key, int64(claim.Attempt), claim.Token[:], to)
	if err != nil {
		return db.noteFailure(err)
	}
	if tag.RowsAffected() != 1 {
		return storage.ErrSuperseded
	}
	return nil
}

// Complete stores done if its claim is still the stored one. It tells the
// processes waiting for the key.
func (db *DB) Complete(ctx context.Context, k storage.RecordKey, done *storage.Record) error {
	stmt, args, err := completion(k, done, true)
	if err != nil {
		return err
	}
	return superseded(k.Scope, commitOutcome(db.noteFailure(db.execCommit(ctx, stmt, args...))))
}

// commitOutcome is the error of a commit. The commit is a batch that ends
// in COMMIT, or a statement that commits by itself. The server's own error
// means nothing was kept. (A statement failed, so the transaction aborted
// and its COMMIT did not run.) Any other error leaves unknown whether the
// server committed, and
// wraps ErrOutcomeUnknown. Such an error is a connection lost or a deadline
// passed after the request went out.
func commitOutcome(err error) error {
	var pgErr *pgconn.PgError
	// pgx's SafeToRetry is no proof here: a batch may go out in more than
	// one write (a statement prepared, then run), and a write that sent
	// nothing may follow one that sent the COMMIT.
	if err == nil || errors.As(err, &pgErr) || errors.Is(err, errLocked) || errors.Is(err, storage.ErrOutcomeUnknown) {
		return err
	}
	return fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, err)
}

// completion is the statement that stores done if its claim is still the
// stored one. Otherwise it raises SQLSTATE PI001 (see superseded). With
// notify, the processes watching the key hear of it once it commits.
func completion(k storage.RecordKey, done *storage.Record, notify bool) (string, []any, error) {
	res, err := done.Result.MarshalBinary()
	if err != nil {
		return "", nil, err
	}
	var notice *string
	if notify {
		p := noticePayload(k)
		notice = &p
	}
	return `SELECT idempotency_complete($1, $2, $3, $4, $5, $6, $7)`,
		[]any{k.Scope, k.Key, int64(done.Attempt), done.Token[:], res, notice, FenceLock(k.Scope)}, nil
}

// superseded is err, or ErrSuperseded when err is idempotency_complete's
// finding that the claim is no longer the stored one, or a
// ScopeUnavailableError when it found the scope fenced.
func superseded(scope string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case !errors.As(err, &pgErr):
		return err
	case pgErr.Code == "PI001":
		return storage.ErrSuperseded
	case pgErr.Code == "PI002":
		return &storage.ScopeUnavailableError{Scope: scope, Why: "moved to another database", RetryAfter: FenceRetry}
	}
	return err
}

// Sweep deletes the records expired at now (the database's clock, unless
// CallerClock). It deletes in batches of at most sweepBatch, each its own
// statement, oldest first through the expiry index. Rows another process
// is sweeping or claiming are skipped, not waited for. So every process
// may sweep at once without doing the same work twice. It then deletes the
// release entries expired at now the same way, uncounted, and the health
// probes' rows of processes gone for a day.
func (db *DB) Sweep(ctx context.Context, now time.Time) (int, error) {
	var at *time.Time
	if db.opts.CallerClock {
		at = &now
	}
	total := 0
	for {
		tag, err := db.pool.Exec(ctx, `DELETE FROM idempotency_records WHERE (scope, key) IN (
				SELECT scope, key FROM idempotency_records
				WHERE expire_time <= coalesce($1::timestamptz, clock_timestamp())
				ORDER BY expire_time LIMIT $2
				FOR UPDATE SKIP LOCKED)`, at, sweepBatch)
		if err != nil {
			return total, db.noteFailure(err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < sweepBatch {
			break
		}
	}
	for {
		tag, err := db.pool.Exec(ctx, `DELETE FROM idempotency_releases WHERE ctid IN (
				SELECT ctid FROM idempotency_releases
				WHERE expire_time <= coalesce($1::timestamptz, clock_timestamp())
				ORDER BY expire_time LIMIT $2
				FOR UPDATE SKIP LOCKED)`, at, sweepBatch)
		if err != nil {
			return total, db.noteFailure(err)
		}
		if tag.RowsAffected() < sweepBatch {
			break
		}
	}
	// One row per process that ever probed: few, and no batches needed.
	_, err := db.pool.Exec(ctx, `DELETE FROM idempotency_heartbeats
		WHERE beat_time < coalesce($1::timestamptz, clock_timestamp()) - interval '1 day'`, at)
	return total, db.noteFailure(err)
}

// NewClaimantID is a fresh name for a claimant: the host, the process id
// and a random suffix, so that a restarted process is another claimant.
func NewClaimantID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails; see crypto/rand.Read
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d %x", host, os.Getpid(), b)
}
