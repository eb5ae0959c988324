package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

// Get returns the record stored for k, live or expired, or nil when there
// is none. It only reads, to answer an operator's question about a key. A
// claim not yet committed is not stored, so Get does not see it. Such a
// claim is a transactional method's, held in memory.
func (db *DB) Get(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, rec, _, err := db.read(k, recordKey(k))
	return rec, err
}

// CountRecords returns how many records the file holds. It counts live
// records and expired ones not yet swept.
func (db *DB) CountRecords(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	err := db.view(func(tx *bolt.Tx) error {
		n = int64(tx.Bucket(bucketRecords).Stats().KeyN)
		return nil
	})
	return n, err
}

var _ storage.Upkeep = (*DB)(nil)
