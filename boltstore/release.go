package boltstore

import (
	"context"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

var _ storage.Releaser = (*DB)(nil)

// Release deletes k's record, with its expiry index entry, if
// storage.CheckRelease allows it at now and seen matches it. It writes
// the release's entry, by by, to the release history. The checks, the
// delete and the entry take one write of the group commit. This process
// keeps completed records decoded. It forgets this one before Release
// returns. No other process uses the file. So no replay of the released
// result follows Release.
func (db *DB) Release(ctx context.Context, k storage.RecordKey, now time.Time, by string, seen storage.Seen) (*storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := recordKey(k)
	var released *storage.Record
	err := db.update(ctx, func(tx *bolt.Tx) error {
		released = nil // in case the write runs again
		stored, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		if db.ledger.Holds(k) {
			return storage.ErrReleaseInFlight // a transactional claim, not yet stored
		}
		if err := storage.CheckRelease(stored, now); err != nil {
			return err
		}
		if !seen.Matches(stored) {
			return storage.ErrReleaseChanged
		}
		if err := tx.Bucket(bucketRecordExpiry).Delete(expiryKey(stored.Expiry, key)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRecords).Delete(key); err != nil {
			return err
		}
		if err := putRelease(tx, k, storage.NewReleaseEntry(stored, now, by)); err != nil {
			return err
		}
		released = stored
		return nil
	})
	db.ledger.Forget(k) // whether or not it committed: cheap, and never stale
	if err != nil {
		return nil, err
	}
	return released, nil
}
