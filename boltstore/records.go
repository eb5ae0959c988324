package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/internal/ledger"
	"github.com/paymentsd/paymentsd/storage"
)

// DB is a storage.TxStore.
var _ storage.TxStore = (*DB)(nil)

// Claim decides req in one bbolt write transaction. So concurrent claims
// of one key are serialized. Retries that only read are decided under a
// read transaction first, and never wait for the write lock. Those are
// replays, mismatches and requests in flight. The file lock makes this
// process the only one using the file. So in-flight claims left by an
// earlier process are orphans. The first retry takes one over without
// waiting for its lease.
func (db *DB) Claim(ctx context.Context, req storage.ClaimRequest) (storage.Outcome, *storage.Record, error) {
	outcome, rec, tx, err := db.ClaimTx(ctx, req, storage.Durable)
	if tx != nil {
		tx.Rollback() // no Tx will end it: the lease rule alone applies
	}
	return outcome, rec, err
}

// ClaimTx decides req as Claim does. When req is claimed, it returns the
// Tx that completes it. A Transactional claim is held in this
// process's memory until its Tx ends. No other process can use the file,
// so nothing else can claim the key meanwhile. A crash loses only a run
// whose writes were never committed. The claim, the handler's writes and
// the result then take one commit.
//
// A Durable claim is held in memory too until its Tx ends. While this
// process runs its handler, the claim is in flight however late its lease.
// This process knows the handler is alive. So a slow disk that delays
// renewals cannot get a live worker taken over. Only two kinds of claim
// are taken over: one whose process ended (an orphan), and one whose Tx
// ended without a result.
//
// ClaimTx asks the ledger, then reads the record without a lock. A retry
// that only reads is answered there. A claim is decided once: for a
// transactional method in memory, for a durable one in a write of the
// group commit.
func (db *DB) ClaimTx(ctx context.Context, req storage.ClaimRequest, d storage.Durability) (storage.Outcome, *storage.Record, storage.Tx, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, nil, err
	}
	if db.health.damagedErr() == nil && !db.closed() {
		if outcome, rec, ok := db.ledger.Lookup(req, nil); ok {
			return outcome, rec, nil, nil
		}
	}
	key := recordKey(req.Key)
	for {
		raw, stored, g, err := db.read(req.Key, key)
		if err != nil {
			return 0, nil, nil, err
		}
		if outcome, rec, ok := db.ledger.Lookup(req, stored); ok {
			return outcome, rec, nil, nil
		}
		if err := db.health.damagedErr(); err != nil {
			return 0, nil, nil, err // no handler runs for a commit that cannot happen
		}
		if d != storage.Transactional {
			return db.claimDurable(ctx, req, key)
		}
		outcome, rec, ok := db.ledger.DecideAndHold(req, d, stored, g)
		switch {
		case ok && !outcome.Claimed():
			return outcome, rec, nil, nil
		case ok:
			return outcome, rec, &Tx{db: db, rk: req.Key, key: key, claim: rec, base: stored, baseRaw: raw, claimedAt: req.Now}, nil
		}
		// A claim of the key ended since the read: read again.
	}
}

// claimDurable claims key in a write of the group commit, and decides
// there: what it reads there is current. The claim is held from the moment
// it is decided until its Tx ends. A transactional claim reads only what
// is committed. Holding the durable claim keeps a transactional one from
// also being fresh meanwhile. A run of the write that is rolled back
// unholds its own claim.
func (db *DB) claimDurable(ctx context.Context, req storage.ClaimRequest, key []byte) (storage.Outcome, *storage.Record, storage.Tx, error) {
	var (
		outcome storage.Outcome
		rec     *storage.Record
		mine    *storage.Record // the claim this write made, if it made one
	)
	err := db.update(ctx, func(tx *bolt.Tx) error {
		stored, err := getRecord(tx, key)
		if err != nil {
			return err
		}
		if mine != nil { // an earlier run of this write, rolled back
			db.ledger.Unhold(req.Key, mine)
			mine = nil
		}
		if outcome, rec, _ = db.ledger.DecideAndHold(req, storage.Durable, stored, ledger.UnderLock); outcome.Claimed() {
			mine = rec
			return putClaim(tx, key, stored, rec)
		}
		return nil
	})
	if mine != nil {
		db.ledger.Forget(req.Key) // whether or not it committed: the record it replaced had expired
	}
	if err != nil {
		db.ledger.Unhold(req.Key, mine)
		return 0, nil, nil, err
	}
	if !outcome.Claimed() {
		return outcome, rec, nil, nil
	}
	return outcome, rec, &Tx{db: db, rk: req.Key, key: key, claim: rec, durable: true}, nil // held until it ends
}

// read returns the stored record of key, named rk, its encoding, and the
// generation it was read at. It reads under a read transaction. A
// completed record is kept in the ledger.
func (db *DB) read(rk storage.RecordKey, key []byte) (raw []byte, stored *storage.Record, g ledger.Generation, err error) {
	g = db.ledger.Generation(rk)
	err = db.view(func(tx *bolt.Tx) error {
		raw = bytes.Clone(tx.Bucket(bucketRecords).Get(key))
		return nil
	})
	if err != nil || raw == nil {
		return nil, nil, g, err
	}
	if stored, err = decodeRecord(key, raw); err != nil {
		return nil, nil, g, err
	}
	db.ledger.Remember(rk, stored, len(raw), g)
	return raw, stored, g, nil
}

// putClaim writes the new claim rec of key over stored, the record it
// replaces. The argument stored is nil when there is none. putClaim keeps
// the expiry index in step.
func putClaim(tx *bolt.Tx, key []byte, stored, rec *storage.Record) error {
	v, err := encodeRecord(key, rec)
	if err != nil {
		return err
	}
	if err := setInFlight(tx, key, true); err != nil {
		return err
	}
	return putClaimRaw(tx, key, stored, rec.Expiry, v)
}

// indexFillPercent is how full the expiry index's pages are left when they
// split. Its keys start with the expiry, now plus the TTL. So nearly every
// entry goes after the last. The default of bbolt fills pages half full.
// Each page that a split leaves behind would stay half empty for good.
// The etcd project fills its append-only bucket the same way. The few
// entries that come out of order, from claims decided at the same time,
// split a full page. Measured, that costs less than a tenth left free.
const indexFillPercent = 1.0

// recordsFillPercent is how full the records' pages are left when they
// split. Keys that grow, such as order numbers, then leave pages 70% full,
// not half. Random keys, such as UUIDs, fill pages no worse than bbolt's
// default does. A fuller split would: its pages split again at once.
const recordsFillPercent = 0.7

// putClaimRaw is putClaim of a record already encoded as v.
func putClaimRaw(tx *bolt.Tx, key []byte, stored *storage.Record, expiry time.Time, v []byte) error {
	if stored != nil && !stored.Expiry.Equal(expiry) {
		if err := tx.Bucket(bucketRecordExpiry).Delete(expiryKey(stored.Expiry, key)); err != nil {
			return err
		}
	}
	index := tx.Bucket(bucketRecordExpiry)
	index.FillPercent = indexFillPercent
	if err := index.Put(expiryKey(expiry, key), nil); err != nil {
		return err
	}
	return putRecordRaw(tx, key, v)
}

// Claimant is who this opening of the file claims as. It is exclusive,
// since the file lock keeps every other process out.
func (db *DB) Claimant() storage.Claimant { return db.ledger.Claimant() }

// Renew stores claim with its later lease if it is still the stored claim.
// A claim whose Tx this process still runs needs no renewal (see ClaimTx).
// Renew then writes nothing, so a slow disk delays no renewal. It keeps
// the lease in memory for when the Tx ends without a result. (See renewal
// in package ledger.)
func (db *DB) Renew(ctx context.Context, rk storage.RecordKey, claim *storage.Record) error {
	if db.ledger.RenewHeld(rk, claim) {
		return nil
	}
	return db.update(ctx, func(tx *bolt.Tx) error { return replaceClaim(tx, recordKey(rk), claim) })
}

// Complete stores done if the stored record is still its claim.
func (db *DB) Complete(ctx context.Context, rk storage.RecordKey, done *storage.Record) error {
	return db.update(ctx, func(tx *bolt.Tx) error { return replaceClaim(tx, recordKey(rk), done) })
}

// replaceClaim writes r over the stored record of key if it is still r's
// claim. The record's expiry never changes after the first claim. So the
// expiry index stays as it is. The in-flight index loses key once r is
// completed.
func replaceClaim(tx *bolt.Tx, key []byte, r *storage.Record) error {
	if _, err := storedClaim(tx, key, r); err != nil {
		return err
	}
	if r.State != storage.StateInFlight {
		if err := setInFlight(tx, key, false); err != nil {
			return err
		}
	}
	return putRecord(tx, key, r)
}

// storedClaim returns the stored record of key. It also returns
// ErrSuperseded unless that record is still the claim in flight that r is,
// renews or completes. See CheckClaim.
func storedClaim(tx *bolt.Tx, key []byte, r *storage.Record) (*storage.Record, error) {
	stored, err := getRecord(tx, key)
	if err != nil {
		return nil, err
	}
	return stored, storage.CheckClaim(stored, r)
}

// Sweep deletes the records that expired by now and returns how many. It
// walks the expiry index, never the live records. It deletes in batches of
// Options.SweepBatch, one write transaction each. So claims wait for one
// batch at most. It then deletes the release entries expired by now, in
// batches too, through their own index.
func (db *DB) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		scanned, deleted, err := db.sweepBatchOnce(ctx, now)
		total += deleted
		if err != nil {
			return total, err
		}
		if scanned < db.sweepBatch {
			break
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if full, err := db.sweepReleasesOnce(ctx, now); err != nil || !full {
			return total, err
		}
	}
}

// sweepBatchOnce deletes up to one batch of expired index entries and the
// records they point to, in one transaction.
func (db *DB) sweepBatchOnce(ctx context.Context, now time.Time) (scanned, deleted int, err error) {
	var batch [][]byte
	defer func() {
		keys := make([]storage.RecordKey, 0, len(batch))
		for _, k := range batch { // whether or not they were deleted: they had expired
			_, key := splitExpiryKey(k)
			if rk, ok := splitRecordKey(key); ok {
				db.ledger.Forget(rk)
				keys = append(keys, rk)
			}
		}
		db.ledger.DropRenewals(keys...)
	}()
	err = db.update(ctx, func(tx *bolt.Tx) error {
		scanned, deleted = 0, 0 // in case the batch runs again
		records, index := tx.Bucket(bucketRecords), tx.Bucket(bucketRecordExpiry)
		batch = expired(index, now, db.sweepBatch)
		for _, k := range batch {
			expiry, key := splitExpiryKey(k)
			// Delete the record only if this entry is still its own. The
			// entry of a record whose value is damaged is its own. The two
			// are always written together. Such a record expired, and goes
			// as it would have. Else it would stop every later sweep.
			stored, err := getRecord(tx, key)
			if err != nil && !errors.Is(err, ErrDamaged) {
				return err
			}
			if err != nil || stored != nil && stored.Expiry.Equal(expiry) {
				if err := records.Delete(key); err != nil {
					return err
				}
				if err := setInFlight(tx, key, false); err != nil {
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

// expired returns up to limit keys of index, an expiry index, that
// expired by now, oldest first. They are copies, collected before any is
// deleted: a bbolt cursor skips keys deleted under it.
func expired(index *bolt.Bucket, now time.Time, limit int) [][]byte {
	var keys [][]byte
	c := index.Cursor()
	for k, _ := c.First(); k != nil && len(keys) < limit; k, _ = c.Next() {
		if expiry, _ := splitExpiryKey(k); expiry.After(now) {
			break
		}
		keys = append(keys, clone(k))
	}
	return keys
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

func getRecord(tx *bolt.Tx, key []byte) (*storage.Record, error) {
	v := tx.Bucket(bucketRecords).Get(key)
	if v == nil {
		return nil, nil
	}
	return decodeRecord(key, v)
}

func putRecord(tx *bolt.Tx, key []byte, r *storage.Record) error {
	v, err := encodeRecord(key, r)
	if err != nil {
		return err
	}
	return putRecordRaw(tx, key, v)
}

// putRecordRaw stores v, the stored form of key's record.
func putRecordRaw(tx *bolt.Tx, key, v []byte) error {
	records := tx.Bucket(bucketRecords)
	records.FillPercent = recordsFillPercent
	return records.Put(key, v)
}

// setInFlight keeps the in-flight index in step with the record of key,
// written in tx. The key is listed while in flight, not once completed.
func setInFlight(tx *bolt.Tx, key []byte, inFlight bool) error {
	index := tx.Bucket(bucketInFlight)
	if inFlight {
		return index.Put(key, nil)
	}
	return index.Delete(key) // writes nothing when key is not listed
}
