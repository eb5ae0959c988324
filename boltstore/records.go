package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/interceptor"
)

// DB is an interceptor.Store.
var _ interceptor.Store = (*DB)(nil)

// Claim decides req in one bbolt write transaction, so that concurrent
// claims of one key are serialized. Retries that only read (replays,
// mismatches, requests in flight) are decided under a read transaction
// first and never wait for the write lock. The file lock makes this
// process the only one using the file, so in-flight claims left by an
// earlier process are orphans, taken over by the first retry without
// waiting for their lease.
func (db *DB) Claim(ctx context.Context, req interceptor.ClaimRequest) (interceptor.Outcome, *interceptor.Record, error) {
	key := recordKey(req.Key)
	var stored *interceptor.Record
	err := db.bolt.View(func(tx *bolt.Tx) (err error) {
		stored, err = getRecord(tx, key)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	if outcome, rec := interceptor.Decide(stored, req, db.claimant); !outcome.Claimed() {
		return outcome, rec, nil
	}

	var outcome interceptor.Outcome
	var rec *interceptor.Record
	err = db.update(func(tx *bolt.Tx) error {
		stored, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		outcome, rec = interceptor.Decide(stored, req, db.claimant)
		if !outcome.Claimed() {
			return nil
		}
		if stored != nil && !stored.Expiry.Equal(rec.Expiry) {
			if err := tx.Bucket(bucketRecordExpiry).Delete(expiryKey(stored.Expiry, key)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketRecordExpiry).Put(expiryKey(rec.Expiry, key), nil); err != nil {
			return err
		}
		return putRecord(tx, key, rec)
	})
	if err != nil {
		return 0, nil, err
	}
	return outcome, rec, nil
}

// Claimant is who this opening of the file claims as: exclusive, since the
// file lock keeps every other process out.
func (db *DB) Claimant() interceptor.Claimant { return db.claimant }

// Renew stores claim with its later lease if it is still the stored claim.
func (db *DB) Renew(ctx context.Context, rk interceptor.RecordKey, claim *interceptor.Record) error {
	return db.replaceClaim(rk, claim)
}

// Complete stores done if the stored record is still its claim.
func (db *DB) Complete(ctx context.Context, rk interceptor.RecordKey, done *interceptor.Record) error {
	return db.replaceClaim(rk, done)
}

// replaceClaim writes r over the stored record, in one transaction, if
// CheckClaim allows it. The record's expiry never changes after the first
// claim, so the expiry index stays as it is.
func (db *DB) replaceClaim(rk interceptor.RecordKey, r *interceptor.Record) error {
	key := recordKey(rk)
	return db.update(func(tx *bolt.Tx) error {
		stored, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		if err := interceptor.CheckClaim(stored, r); err != nil {
			return err
		}
		return putRecord(tx, key, r)
	})
}

// Sweep deletes the records that expired by now and returns how many. It
// walks the expiry index, never the live records, and deletes in batches of
// Options.SweepBatch, one write transaction each, so that claims wait for
// one batch at most.
func (db *DB) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		scanned, deleted, err := db.sweepBatchOnce(now)
		total += deleted
		if err != nil || scanned < db.sweepBatch {
			return total, err
		}
	}
}

// sweepBatchOnce deletes up to one batch of expired index entries and the
// records they point to, in one transaction. It collects the batch before
// deleting: a bbolt cursor skips keys when deleted under.
func (db *DB) sweepBatchOnce(now time.Time) (scanned, deleted int, err error) {
	err = db.update(func(tx *bolt.Tx) error {
		scanned, deleted = 0, 0 // in case the batch runs again
		records, index := tx.Bucket(bucketRecords), tx.Bucket(bucketRecordExpiry)
		var batch [][]byte
		c := index.Cursor()
		for k, _ := c.First(); k != nil && len(batch) < db.sweepBatch; k, _ = c.Next() {
			if expiry, _ := splitExpiryKey(k); expiry.After(now) {
				break
			}
			batch = append(batch, clone(k))
		}
		for _, k := range batch {
			expiry, key := splitExpiryKey(k)
			// Delete the record only if this entry is still its own.
			stored, err := getRecord(tx, key)
			if err != nil {
				return err
			}
			if stored != nil && stored.Expiry.Equal(expiry) {
				if err := records.Delete(key); err != nil {
					return err
				}
				deleted++
			}
			if err := index.Delete(k); err != nil {
				return err
			}
		}
		scanned = len(batch)
		return nil
	})
	return scanned, deleted, err
}

func recordKey(rk interceptor.RecordKey) []byte {
	return joinParts([]byte(rk.Scope), []byte(rk.Key))
}

// expiryKey orders the index by expiry: 8 bytes of big-endian Unix
// nanoseconds, then the record's key.
func expiryKey(expiry time.Time, key []byte) []byte {
	k := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(k, uint64(expiry.UnixNano()))
	return append(k, key...)
}

func splitExpiryKey(k []byte) (time.Time, []byte) {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))), k[8:]
}

func getRecord(tx *bolt.Tx, key []byte) (*interceptor.Record, error) {
	v := tx.Bucket(bucketRecords).Get(key)
	if v == nil {
		return nil, nil
	}
	var r interceptor.Record
	if err := r.UnmarshalBinary(v); err != nil { // copies what it keeps
		return nil, fmt.Errorf("record %x: %w", key, err)
	}
	return &r, nil
}

func putRecord(tx *bolt.Tx, key []byte, r *interceptor.Record) error {
	v, err := r.MarshalBinary()
	if err != nil {
		return err
	}
	return tx.Bucket(bucketRecords).Put(key, v)
}
