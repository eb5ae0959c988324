package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/storage"
)

var _ storage.Releaser = (*DB)(nil)

// Release deletes k's record if storage.CheckRelease allows it and seen
// matches it. It judges at now with CallerClock, else on the database's
// clock. In the same transaction it inserts the release's entry, by by,
// into the release history. The delete runs in one transaction holding
// the key's lock, so no claim of the key runs meanwhile. A transactional
// claim not yet committed holds that lock. Once LockTimeout has passed,
// Release refuses its key as in flight. A refusal is read from the server
// as a replay is, and given once it is proven (see proveReadSQL): an old
// primary left running after a failover refuses nothing.
//
// Release then waits completedTrust before returning. By then no process
// sharing the database still answers from the released record (see
// completedTrust). So after Release returns, the key's next claim, on any
// replica, runs fresh.
func (db *DB) Release(ctx context.Context, k storage.RecordKey, now time.Time, by string, seen storage.Seen) (*storage.Record, error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, db.noteFailure(err)
	}
	defer conn.Release()
	var released *storage.Record
	var refused error
	refuse := func(tx pgx.Tx, err error) error {
		refused = err
		_, err = tx.Exec(ctx, proveReadSQL)
		return err
	}
	err = pgx.BeginTxFunc(ctx, conn, readCommitted, func(tx pgx.Tx) error {
		if err := db.lockKey(ctx, tx, k); err != nil {
			return err
		}
		var dbNow time.Time
		stored, err := scanRecord(tx.QueryRow(ctx, selectRecordAt, k.Scope, k.Key), &dbNow)
		if err != nil {
			return err
		}
		if !db.opts.CallerClock {
			now = dbNow
		}
		if err := storage.CheckRelease(stored, now); err != nil {
			return refuse(tx, err)
		}
		if !seen.Matches(stored) {
			return refuse(tx, storage.ErrReleaseChanged)
		}
		switch deleted, err := deleteReleased(ctx, tx, k, stored, now, by); {
		case err != nil:
			return err
		case !deleted:
			return refuse(tx, storage.ErrNoRecord) // swept meanwhile
		}
		released = stored
		return nil
	})
	if isLockTimeout(err) {
		refused = fmt.Errorf("%w: a claim of the key holds its lock", storage.ErrReleaseInFlight)
		err = db.commitOn(ctx, conn, proveReadSQL)
	}
	switch {
	case err != nil:
		return nil, db.noteFailure(err)
	case refused != nil:
		return nil, refused
	}
	db.ledger.Forget(k)
	time.Sleep(completedTrust) // not cut short by ctx: the delete has committed, and the caller is to hear so only once it holds
	return released, nil
}

// lockKey takes the key's lock in tx. The wait for it is bounded whatever
// the pool's own lock_timeout: an embedder's pool may have none.
func (db *DB) lockKey(ctx context.Context, tx pgx.Tx, k storage.RecordKey) error {
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(max(db.opts.LockTimeout.Milliseconds(), 1), 10)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, KeyLock(k))
	return err
}

// deleteReleased deletes the completed record stored and writes its
// release entry, in tx. It returns false when the record was no longer
// there to delete.
func deleteReleased(ctx context.Context, tx pgx.Tx, k storage.RecordKey, stored *storage.Record, now time.Time, by string) (bool, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM idempotency_records
		WHERE scope = $1 AND key = $2 AND state = 2 AND attempt = $3 AND claim_token = $4`,
		k.Scope, k.Key, int64(stored.Attempt), stored.Token[:])
	if err != nil || tag.RowsAffected() != 1 {
		return false, err
	}
	e := storage.NewReleaseEntry(stored, now, by)
	_, err = tx.Exec(ctx, `INSERT INTO idempotency_releases
			(scope, key, release_time, released_by, attempt, code, message, expire_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		k.Scope, k.Key, e.Time, e.By, int64(e.Attempt), e.Code, e.Message, e.Expiry)
	return err == nil, err
}

var (
	_ storage.ReleaseHistory = (*DB)(nil)
	_ storage.KeyFinder      = (*DB)(nil)
)

// Releases returns k's releases not yet swept, oldest first.
func (db *DB) Releases(ctx context.Context, k storage.RecordKey) (entries []storage.ReleaseEntry, err error) {
	err = db.Read(ctx, func(q Querier) error {
		rows, err := q.Query(ctx, `SELECT release_time, released_by, attempt, code, message, expire_time
			FROM idempotency_releases WHERE scope = $1 AND key = $2 ORDER BY release_time`, k.Scope, k.Key)
		if err != nil {
			return err
		}
		entries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (storage.ReleaseEntry, error) {
			var (
				e       storage.ReleaseEntry
				attempt int64
			)
			err := row.Scan(&e.Time, &e.By, &attempt, &e.Code, &e.Message, &e.Expiry)
			e.Attempt = uint64(attempt)
			return e, err
		})
		return err
	})
	return entries, err
}

// selectKey reads the records of a key in every scope, through the index
// on the key alone (migration 0006).
const selectKey = `SELECT r.scope, r.key, ` + recordColumns + `
	FROM idempotency_records r WHERE r.key = $1 ORDER BY r.scope LIMIT $2`

// FindKey returns up to limit records of key, live or expired, in every
// scope, ordered by scope (the table's collation is "C", byte by byte). A
// transactional claim not yet committed is not stored, so not found.
func (db *DB) FindKey(ctx context.Context, key string, limit int) ([]storage.KeyedRecord, error) {
	return db.queryKeyed(ctx, selectKey, key, limit)
}
