package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsd/paymentsd/interceptor"
)

// DB is an interceptor.TxStore and a Watcher.
var (
	_ interceptor.TxStore = (*DB)(nil)
	_ interceptor.Watcher = (*DB)(nil)
)

// sweepBatch bounds the records one statement of Sweep deletes, so that no
// sweep holds many row locks or a long transaction.
const sweepBatch = 1000

const (
	stateInFlight  = 1
	stateCompleted = 2
)

// Claim decides req and, when it is claimed, commits the claim before
// returning.
func (db *DB) Claim(ctx context.Context, req interceptor.ClaimRequest) (interceptor.Outcome, *interceptor.Record, error) {
	outcome, rec, tx, err := db.claim(ctx, req, true)
	if tx != nil {
		tx.Rollback() // nothing to roll back: a durable claim's Tx begins on its first write
	}
	return outcome, rec, err
}

// ClaimTx decides req as Claim does and, when it is claimed, returns the Tx
// that completes it. A claim that is not durable is a row inserted (or
// replaced) in the Tx's transaction, uncommitted: other processes cannot
// see it, but their claims of the key wait for its lock, and see its result
// once it commits. A crash, or a connection lost, rolls it back.
func (db *DB) ClaimTx(ctx context.Context, req interceptor.ClaimRequest, durable bool) (interceptor.Outcome, *interceptor.Record, interceptor.Tx, error) {
	outcome, rec, tx, err := db.claim(ctx, req, durable)
	if tx == nil {
		return outcome, rec, nil, err // no typed nil in the interface
	}
	return outcome, rec, tx, err
}

// claim reads the record without a lock and decides on it; only a request
// that claims writes, and only if the record is still the one it read
// (compare-and-set): otherwise something changed meanwhile, and it decides
// again on what is there now. Replays, mismatches and requests in flight
// take one statement and no lock.
func (db *DB) claim(ctx context.Context, req interceptor.ClaimRequest, durable bool) (interceptor.Outcome, *interceptor.Record, *Tx, error) {
	for {
		if err := ctx.Err(); err != nil {
			return 0, nil, nil, err
		}
		if outcome, rec := db.decidePending(req); outcome != 0 {
			return outcome, rec, nil, nil
		}
		stored, dbNow, err := db.read(ctx, db.pool, req.Key)
		if err != nil {
			return 0, nil, nil, err
		}
		if !db.opts.CallerClock {
			req.Now = dbNow
		}
		outcome, rec := interceptor.Decide(stored, req, db.claimant)
		if !outcome.Claimed() {
			return outcome, rec, nil, nil
		}
		// Pending until committed: a durable claim for its write, another
		// until its Tx ends.
		if !db.addPending(req.Key, rec) {
			continue // a claim of this process came first
		}
		tx, err := db.write(ctx, req, stored, rec, durable)
		if err != nil || durable {
			db.removePending(req.Key, rec)
		}
		switch {
		case errors.Is(err, errLocked):
			if outcome, rec := db.decidePending(req); outcome != 0 {
				return outcome, rec, nil, nil
			}
			// Another process's claim of the key, not yet committed.
			return interceptor.OutcomeInFlight, inFlightGuess(req, stored, db.opts.LockTimeout), nil, nil
		case errors.Is(err, errChanged):
			continue
		case err != nil:
			return 0, nil, nil, err
		}
		return outcome, rec, tx, nil
	}
}

// decidePending decides req on the uncommitted claim this process holds
// of its key, if any: in flight for the same request, a mismatch for
// another; 0 when there is none. Other processes cannot see that claim and
// wait for its lock instead; this one knows it, and answers at once.
func (db *DB) decidePending(req interceptor.ClaimRequest) (interceptor.Outcome, *interceptor.Record) {
	db.mu.Lock()
	defer db.mu.Unlock()
	p := db.pending[req.Key]
	switch {
	case p == nil:
		return 0, nil
	case p.Fingerprint != req.Fingerprint || p.Scheme != req.Scheme:
		return interceptor.OutcomeMismatch, p
	default:
		return interceptor.OutcomeInFlight, p
	}
}

// addPending records rec as this process's uncommitted claim of k, unless
// there is one already. A durable claim is pending only until its own
// commit; from then on other claims see its row.
func (db *DB) addPending(k interceptor.RecordKey, rec *interceptor.Record) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.pending[k] != nil {
		return false
	}
	db.pending[k] = rec
	return true
}

// removePending forgets rec, the uncommitted claim of k, once its
// transaction has ended.
func (db *DB) removePending(k interceptor.RecordKey, rec *interceptor.Record) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.pending[k] == rec {
		delete(db.pending, k)
	}
}

var (
	// errLocked: the row is locked by another transaction past LockTimeout.
	errLocked = errors.New("pgstore: record locked by another claim")
	// errChanged: the record is no longer the one the claim decided on.
	errChanged = errors.New("pgstore: record changed since it was read")
)

// write stores rec, a claim decided on stored, in a new transaction,
// provided the row still holds stored. A durable claim is committed and its
// Tx begins a transaction of its own on first use; otherwise the
// transaction stays open in the returned Tx.
func (db *DB) write(ctx context.Context, req interceptor.ClaimRequest, stored, rec *interceptor.Record, durable bool) (*Tx, error) {
	ptx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	k := req.Key
	var tag pgconn.CommandTag
	if stored == nil {
		tag, err = ptx.Exec(ctx, `INSERT INTO idempotency_records
			(scope, key, fingerprint, fingerprint_scheme, state, attempt, claim_token, owner, lease_us, lease_expire_time, expire_time)
			VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (scope, key) DO NOTHING`,
			k.Scope, k.Key, rec.Fingerprint[:], rec.Scheme, int64(rec.Attempt), rec.Token[:], rec.Owner,
			req.Lease.Microseconds(), rec.LeaseExpiry, rec.Expiry)
	} else {
		tag, err = ptx.Exec(ctx, `UPDATE idempotency_records SET
			fingerprint = $3, fingerprint_scheme = $4, state = 1, attempt = $5, claim_token = $6, owner = $7,
			lease_us = $8, lease_expire_time = $9, expire_time = $10, result = NULL
			WHERE scope = $1 AND key = $2 AND attempt = $11 AND claim_token = $12`,
			k.Scope, k.Key, rec.Fingerprint[:], rec.Scheme, int64(rec.Attempt), rec.Token[:], rec.Owner,
			req.Lease.Microseconds(), rec.LeaseExpiry, rec.Expiry, int64(stored.Attempt), stored.Token[:])
	}
	if err == nil && tag.RowsAffected() != 1 {
		err = errChanged
	}
	if err == nil && !durable {
		_, err = ptx.Exec(ctx, `SAVEPOINT handler`) // Commit without the handler's writes rolls back to here
	}
	if err == nil && durable {
		err = ptx.Commit(ctx)
	}
	if err != nil {
		ptx.Rollback(context.WithoutCancel(ctx))
		if isLockTimeout(err) {
			return nil, errLocked
		}
		return nil, err
	}
	t := &Tx{db: db, key: k, claim: rec, durable: durable, claimedAt: time.Now()}
	if !durable {
		t.ptx = ptx
	}
	return t, nil
}

// inFlightGuess is the record a claim answers in flight with when another
// process holds the key's row locked: what that claim most likely is. Its
// lease is the lock timeout, the retry hint a waiter gets.
func inFlightGuess(req interceptor.ClaimRequest, stored *interceptor.Record, lockTimeout time.Duration) *interceptor.Record {
	rec := &interceptor.Record{
		Fingerprint: req.Fingerprint,
		Scheme:      req.Scheme,
		State:       interceptor.StateInFlight,
		Attempt:     1,
		LeaseExpiry: req.Now.Add(lockTimeout),
		Expiry:      req.Now.Add(req.TTL),
	}
	if stored != nil && req.Now.Before(stored.Expiry) {
		rec.Attempt, rec.Expiry = stored.Attempt+1, stored.Expiry
	}
	return rec
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// read returns the record stored for k (nil when none) and the database's
// clock, read in the same statement.
func (db *DB) read(ctx context.Context, q Querier, k interceptor.RecordKey) (*interceptor.Record, time.Time, error) {
	var (
		now                     time.Time
		fingerprint, token, res []byte
		scheme, owner           *string
		state                   *int16
		attempt                 *int64
		leaseExpiry, expiry     *time.Time
	)
	err := q.QueryRow(ctx, `SELECT clock_timestamp(), r.fingerprint, r.fingerprint_scheme, r.state, r.attempt,
			r.claim_token, r.owner, r.lease_expire_time, r.expire_time, r.result
		FROM (VALUES (1)) AS one LEFT JOIN idempotency_records r ON r.scope = $1 AND r.key = $2`,
		k.Scope, k.Key).Scan(&now, &fingerprint, &scheme, &state, &attempt, &token, &owner, &leaseExpiry, &expiry, &res)
	if err != nil {
		return nil, time.Time{}, err
	}
	if state == nil {
		return nil, now, nil
	}
	rec := &interceptor.Record{Scheme: *scheme, State: interceptor.State(*state), Attempt: uint64(*attempt), Owner: *owner, Expiry: *expiry}
	if len(fingerprint) != len(rec.Fingerprint) || len(token) != len(rec.Token) {
		return nil, time.Time{}, fmt.Errorf("pgstore: record has a malformed fingerprint or claim token")
	}
	copy(rec.Fingerprint[:], fingerprint)
	copy(rec.Token[:], token)
	if leaseExpiry != nil {
		rec.LeaseExpiry = *leaseExpiry
	}
	if rec.State == interceptor.StateCompleted {
		rec.Result = new(interceptor.Result)
		if err := rec.Result.UnmarshalBinary(res); err != nil {
			return nil, time.Time{}, fmt.Errorf("pgstore: %w", err)
		}
	}
	return rec, now, nil
}

// Renew extends the claim's lease by its length from now, on the
// database's clock (with CallerClock, to claim.LeaseExpiry), provided the
// claim is still the stored one.
func (db *DB) Renew(ctx context.Context, k interceptor.RecordKey, claim *interceptor.Record) error {
	var to *time.Time
	if db.opts.CallerClock {
		to = &claim.LeaseExpiry
	}
	tag, err := db.pool.Exec(ctx, `UPDATE idempotency_records
		SET lease_expire_time = coalesce($5::timestamptz, clock_timestamp() + lease_us * interval '1 microsecond')
		WHERE scope = $1 AND key = $2 AND state = 1 AND attempt = $3 AND claim_token = $4`,
		k.Scope, k.Key, int64(claim.Attempt), claim.Token[:], to)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return interceptor.ErrSuperseded
	}
	return nil
}

// Complete stores done provided its claim is still the stored one, and
// tells the processes waiting for the key.
func (db *DB) Complete(ctx context.Context, k interceptor.RecordKey, done *interceptor.Record) error {
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		return complete(ctx, tx, k, done, true)
	})
}

// complete stores done in tx, provided its claim is still the stored one;
// with notify, the processes watching the key hear of it once tx commits.
func complete(ctx context.Context, tx pgx.Tx, k interceptor.RecordKey, done *interceptor.Record, notify bool) error {
	res, err := done.Result.MarshalBinary()
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE idempotency_records SET state = 2, lease_expire_time = NULL, result = $5
		WHERE scope = $1 AND key = $2 AND state = 1 AND attempt = $3 AND claim_token = $4`,
		k.Scope, k.Key, int64(done.Attempt), done.Token[:], res)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return interceptor.ErrSuperseded
	}
	if notify {
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, noticeChannel, noticePayload(k))
	}
	return err
}

// Sweep deletes the records expired at now (the database's clock, unless
// CallerClock) in batches of at most sweepBatch, each its own statement,
// oldest first through the expiry index. Rows another process is sweeping
// or claiming are skipped, not waited for, so every process may sweep at
// once without doing the same work twice.
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
			return total, err
		}
		n := int(tag.RowsAffected())
		total += n
		if n < sweepBatch {
			return total, nil
		}
	}
}

func newProcessID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails; see crypto/rand.Read
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d %x", host, os.Getpid(), b)
}
