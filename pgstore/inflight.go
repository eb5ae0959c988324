package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// DB lists its claims in flight.
var _ storage.InFlightLister = (*DB)(nil)

// recordColumns are a record's columns, as scanRecord reads them.
const recordColumns = `r.fingerprint, r.fingerprint_scheme, r.state, r.attempt,
		r.claim_token, r.owner, r.lease_expire_time, r.expire_time, r.result, r.transactional, r.claim_time`

// selectInFlight reads a page of the claims stored in flight, through
// their partial index: a page costs its rows, whatever the table holds.
// The zero RecordKey comes before every key the interceptor stores.
const selectInFlight = `SELECT r.scope, r.key, ` + recordColumns + `
	FROM idempotency_records r
	WHERE r.state = 1 AND (r.scope, r.key) > ($1, $2)
	ORDER BY r.scope, r.key LIMIT $3`

// InFlight returns up to limit claims in flight after the key after, in
// storage.CompareKeys order (the table's collation is "C", byte by byte):
// the durable claims that every process stored, and the transactional
// claims of this process, which no other can see before they commit.
func (db *DB) InFlight(ctx context.Context, after storage.RecordKey, limit int) ([]storage.KeyedRecord, error) {
	rows, err := db.pool.Query(ctx, selectInFlight, after.Scope, after.Key, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var stored []storage.KeyedRecord
	for rows.Next() {
		var k storage.RecordKey
		rec, err := scanRecord(rows, &k.Scope, &k.Key)
		if err != nil {
			return nil, err
		}
		stored = append(stored, storage.KeyedRecord{Key: k, Record: rec})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return storage.MergeInFlight(db.pendingAfter(after, limit), stored, limit, storage.CompareKeys), nil
}

// pendingAfter returns up to limit of this process's uncommitted claims
// whose keys come after after, in storage.CompareKeys order.
func (db *DB) pendingAfter(after storage.RecordKey, limit int) []storage.KeyedRecord {
	db.mu.Lock()
	claims := make([]storage.KeyedRecord, 0, len(db.pending))
	for k, rec := range db.pending {
		if storage.CompareKeys(k, after) > 0 {
			r := *rec // the caller may change it
			claims = append(claims, storage.KeyedRecord{Key: k, Record: &r})
		}
	}
	db.mu.Unlock()
	slices.SortFunc(claims, func(a, b storage.KeyedRecord) int { return storage.CompareKeys(a.Key, b.Key) })
	return claims[:min(limit, len(claims))]
}

// nullTime is t for a nullable column: NULL when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
