package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

// DB lists its claims in flight.
var _ storage.InFlightLister = (*DB)(nil)

// InFlight returns up to limit claims in flight after the key after. They
// come in the order of their keys in the file. The claims this process
// holds in memory are among them. Those are transactional ones not yet
// committed, and durable ones whose handler runs, with the leases renewed
// in memory. The claims stored in flight are among them too, read through
// the in-flight index. So a page reads the claims it returns and never the
// completed records.
func (db *DB) InFlight(ctx context.Context, after storage.RecordKey, limit int) ([]storage.KeyedRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var start []byte
	if after != (storage.RecordKey{}) {
		start = recordKey(after)
	}
	var stored []storage.KeyedRecord
	err := db.view(func(tx *bolt.Tx) error {
		stored = stored[:0]
		c := tx.Bucket(bucketInFlight).Cursor()
		k, _ := c.First()
		if start != nil {
			if k, _ = c.Seek(start); bytes.Equal(k, start) {
				k, _ = c.Next()
			}
		}
		for ; k != nil && len(stored) < limit; k, _ = c.Next() {
			rec, err := getRecord(tx, k)
			if err != nil {
				return err
			}
			rk, ok := splitRecordKey(k)
			if !ok || rec == nil || rec.State != storage.StateInFlight {
				return &damaged{cause: fmt.Errorf("the in-flight index names %x, which holds no claim in flight", k)}
			}
			stored = append(stored, storage.KeyedRecord{Key: rk, Record: rec})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return storage.MergeInFlight(db.ledger.HeldAfter(after, limit, compareKeys), db.ledger.WithRenewals(stored), limit, compareKeys), nil
}

// compareKeys orders record keys as the file does.
func compareKeys(a, b storage.RecordKey) int { return bytes.Compare(recordKey(a), recordKey(b)) }

// splitRecordKey is the RecordKey that recordKey made k of.
func splitRecordKey(k []byte) (storage.RecordKey, bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)-w) {
		return storage.RecordKey{}, false
	}
	scope := k[w : w+int(n)]
	return storage.RecordKey{Scope: string(scope), Key: string(k[w+int(n):])}, true
}

// indexInFlight builds the in-flight index of a file written before the
// index existed. It reads the file's records, once, as New first opens the
// file.
func indexInFlight(tx *bolt.Tx) error {
	if tx.Bucket(bucketInFlight) != nil {
		return nil
	}
	index, err := tx.CreateBucket(bucketInFlight)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
		rec, err := decodeRecord(k, v)
		if err != nil || rec.State != storage.StateInFlight {
			return nil // a damaged record is reported by the calls about it
		}
		return index.Put(k, nil)
	})
}
