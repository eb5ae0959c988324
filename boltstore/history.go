package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// The release history lives in two buckets, as the records do. The bucket
// idempotency_releases maps a record's key and a release's time to the
// entry. The bucket idempotency_release_expiry lists entries by expiry,
// for the sweep. A file of an earlier build has neither; New creates them.
var (
	bucketReleases      = []byte("idempotency_releases")
	bucketReleaseExpiry = []byte("idempotency_release_expiry")
)

var (
	_ storage.ReleaseHistory = (*DB)(nil)
	_ storage.KeyFinder      = (*DB)(nil)
)

// releasePrefix starts the history keys of the record key. Scope and key
// each carry their length, so no key's entries run into another's.
func releasePrefix(k storage.RecordKey) []byte {
	return joinParts([]byte(k.Scope), []byte(k.Key), nil)
}

// storedRelease is an entry as the file keeps it, sealed under its key.
type storedRelease struct {
	Time    time.Time `json:"time"`
	By      string    `json:"by"`
	Attempt uint64    `json:"attempt"`
	Code    int32     `json:"code"`
	Message string    `json:"message"`
	Expiry  time.Time `json:"expiry"`
}

// putRelease writes e, a release of k, in tx. Two releases of one key at
// the same instant each keep an entry: the later one's time is bumped by
// a nanosecond in its key.
func putRelease(tx *bolt.Tx, k storage.RecordKey, e storage.ReleaseEntry) error {
	b, err := json.Marshal(storedRelease(e))
	if err != nil {
		return err
	}
	releases := tx.Bucket(bucketReleases)
	prefix := releasePrefix(k)
	var key []byte
	for at := e.Time.UnixNano(); ; at++ {
		key = binary.BigEndian.AppendUint64(slices.Clip(prefix), uint64(at))
		if releases.Get(key) == nil {
			break
		}
	}
	if err := releases.Put(key, sealed.Seal(key, b)); err != nil {
		return err
	}
	index := tx.Bucket(bucketReleaseExpiry)
	index.FillPercent = indexFillPercent
	return index.Put(expiryKey(e.Expiry, key), nil)
}

// Releases returns k's releases not yet swept, oldest first.
func (db *DB) Releases(ctx context.Context, k storage.RecordKey) ([]storage.ReleaseEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prefix := releasePrefix(k)
	var entries []storage.ReleaseEntry
	err := db.view(func(tx *bolt.Tx) error {
		entries = entries[:0]
		c := tx.Bucket(bucketReleases).Cursor()
		for key, v := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, v = c.Next() {
			if len(key) != len(prefix)+8 {
				continue // a longer key of its own, sharing the prefix: none is written so
			}
			b, err := sealed.Open(key, v)
			if err != nil {
				return DamagedValue(fmt.Errorf("release entry %s: %w", sealed.KeyHash(key), err))
			}
			var e storedRelease
			if err := json.Unmarshal(b, &e); err != nil {
				return DamagedValue(fmt.Errorf("release entry %s: %w", sealed.KeyHash(key), err))
			}
			entries = append(entries, storage.ReleaseEntry(e))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// sweepReleasesOnce deletes up to one batch of release entries expired at
// now, in one transaction, and reports whether it found a full batch.
func (db *DB) sweepReleasesOnce(ctx context.Context, now time.Time) (full bool, err error) {
	err = db.update(ctx, func(tx *bolt.Tx) error {
		releases, index := tx.Bucket(bucketReleases), tx.Bucket(bucketReleaseExpiry)
		batch := expired(index, now, db.sweepBatch)
		for _, k := range batch {
			_, key := splitExpiryKey(k)
			if err := releases.Delete(key); err != nil {
				return err
			}
			if err := index.Delete(k); err != nil {
				return err
			}
		}
		full = len(batch) == db.sweepBatch
		return nil
	})
	return full, err
}

// FindKey returns up to limit records of key, live or expired, in every
// scope, ordered by scope. The file orders records by scope first, so it
// reads every key in the file: a full scan, for an operator's question
// only. BenchmarkFindKey measures it. A transactional claim not yet
// committed is held in memory and not found.
func (db *DB) FindKey(ctx context.Context, key string, limit int) ([]storage.KeyedRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	want := []byte(key)
	var found []storage.KeyedRecord
	err := db.view(func(tx *bolt.Tx) error {
		found = found[:0]
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n, w := binary.Uvarint(k)
			if w <= 0 || n > uint64(len(k)-w) || !bytes.Equal(k[w+int(n):], want) {
				continue
			}
			rk, _ := splitRecordKey(k)
			rec, err := decodeRecord(k, v)
			if err != nil {
				return err
			}
			found = append(found, storage.KeyedRecord{Key: rk, Record: rec})
			if len(found) > 2*limit {
				found = firstKeyed(found, limit) // memory bounded by the limit, not by the scopes holding key
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return firstKeyed(found, limit), nil
}

// firstKeyed returns the first n of found in the order of their keys.
// The records' keys begin with their scope's length, so the cursor meets
// scopes out of that order.
func firstKeyed(found []storage.KeyedRecord, n int) []storage.KeyedRecord {
	slices.SortFunc(found, func(a, b storage.KeyedRecord) int { return storage.CompareKeys(a.Key, b.Key) })
	return found[:max(0, min(n, len(found)))]
}
