package pgstore

import (
	"context"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// DB lists its claims in flight.
var _ storage.InFlightLister = (*DB)(nil)

// recordColumns are a record's columns, as scanRecord reads them.
const recordColumns = `r.fingerprint, r.fingerprint_scheme, r.state, r.attempt,
		r.claim_token, r.owner, r.lease_expire_time, r.expire_time, r.result, r.transactional, r.claim_time`

// selectInFlight reads a page of the claims stored in flight, through
// their partial index. A page costs its rows, whatever the table holds.
// The zero RecordKey comes before every key the interceptor stores.
const selectInFlight = `SELECT r.scope, r.key, ` + recordColumns + `
	FROM idempotency_records r
	WHERE r.state = 1 AND (r.scope, r.key) > ($1, $2)
	ORDER BY r.scope, r.key LIMIT $3`

// InFlight returns up to limit claims in flight after the key after. They
// come in storage.CompareKeys order (the table's collation is "C", byte by
// byte). They are the durable claims that every process stored, and this
// process's transactional claims. No other process can see those before
// they commit.
func (db *DB) InFlight(ctx context.Context, after storage.RecordKey, limit int) ([]storage.KeyedRecord, error) {
	stored, err := db.queryKeyed(ctx, selectInFlight, after.Scope, after.Key, limit)
	if err != nil {
		return nil, err
	}
	return storage.MergeInFlight(db.ledger.HeldAfter(after, limit, storage.CompareKeys), stored, limit, storage.CompareKeys), nil
}

// nullTime is t for a nullable column: NULL when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// queryKeyed runs query, whose rows are a scope, a key and a record's
// columns, and returns the records with their keys.
func (db *DB) queryKeyed(ctx context.Context, query string, args ...any) (found []storage.KeyedRecord, err error) {
	err = db.Read(ctx, func(q Querier) error {
		rows, err := q.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k storage.RecordKey
			rec, err := scanRecord(rows, &k.Scope, &k.Key)
			if err != nil {
				return err
			}
			found = append(found, storage.KeyedRecord{Key: k, Record: rec})
		}
		return rows.Err()
	})
	return found, err
}
