package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

var _ storage.Releaser = (*DB)(nil)

// Release deletes k's record if storage.CheckRelease allows it. It judges
// at now with CallerClock, else on the database's clock. The delete runs in
// one transaction holding the key's lock, so no claim of the key runs
// meanwhile. A transactional claim not yet committed holds that lock. Once
// LockTimeout has passed, Release refuses its key as in flight.
//
// Release then waits completedTrust before returning. By then no process
// sharing the database still answers from the released record (see
// completedTrust). So after Release returns, the key's next claim, on any
// replica, runs fresh.
func (db *DB) Release(ctx context.Context, k storage.RecordKey, now time.Time) (*storage.Record, error) {
	var released *storage.Record
	err := pgx.BeginTxFunc(ctx, db.pool, readCommitted, func(tx pgx.Tx) error {
		// The wait for the key's lock is bounded whatever the pool's own
		// lock_timeout. An embedder's pool may have none.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(max(db.opts.LockTimeout.Milliseconds(), 1), 10)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, KeyLock(k)); err != nil {
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
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM idempotency_records
			WHERE scope = $1 AND key = $2 AND state = 2 AND attempt = $3 AND claim_token = $4`,
			k.Scope, k.Key, int64(stored.Attempt), stored.Token[:])
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return storage.ErrNoRecord // swept meanwhile
		}
		released = stored
		return nil
	})
	if isLockTimeout(err) {
		return nil, fmt.Errorf("%w: a claim of the key holds its lock", storage.ErrReleaseInFlight)
	}
	if err != nil {
		return nil, err
	}
	db.ledger.Forget(k)
	time.Sleep(completedTrust) // not cut short by ctx: the delete has committed, and the caller is to hear so only once it holds
	return released, nil
}
