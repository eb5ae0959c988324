package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
)

// Payment intents live in two buckets: intents maps an id to its owner and
// the intent's encoding; intents_by_owner lists each owner's ids in creation
// order, for paging.

// CreateIntent stores a new intent owned by owner. Its id must be new.
func (db *DB) CreateIntent(ctx context.Context, owner string, pi *paymentsv1.PaymentIntent) error {
	v, err := encodeIntent(owner, pi)
	if err != nil {
		return err
	}
	return db.update(func(tx *bolt.Tx) error {
		intents := tx.Bucket(bucketIntents)
		if intents.Get([]byte(pi.Id)) != nil {
			return fmt.Errorf("create intent: id %s already exists", pi.Id)
		}
		if err := intents.Put([]byte(pi.Id), v); err != nil {
			return err
		}
		return tx.Bucket(bucketIntentsByUser).Put(ownerIndexKey(owner, pi), nil)
	})
}

// GetIntent returns owner's intent id, or nil when there is none: another
// owner's intent is as absent as a missing one.
func (db *DB) GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error) {
	var pi *paymentsv1.PaymentIntent
	err := db.bolt.View(func(tx *bolt.Tx) (err error) {
		pi, err = getIntent(tx, owner, id)
		return err
	})
	return pi, err
}

// UpdateIntent applies update to owner's intent id in one transaction and
// stores it if update reports a change. It returns the intent as stored
// afterwards, or nil when owner has no such intent.
func (db *DB) UpdateIntent(ctx context.Context, owner, id string, update func(*paymentsv1.PaymentIntent) bool) (*paymentsv1.PaymentIntent, error) {
	var pi *paymentsv1.PaymentIntent
	err := db.update(func(tx *bolt.Tx) (err error) {
		pi, err = getIntent(tx, owner, id)
		if err != nil || pi == nil || !update(pi) {
			return err
		}
		v, err := encodeIntent(owner, pi)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketIntents).Put([]byte(id), v)
	})
	return pi, err
}

// ListIntents returns up to limit of owner's intents in creation order,
// starting after the cursor after (nil for the first page), and the cursor
// of the next page, nil when there is none. A cursor is opaque; one that
// names no intent still lists from where it would sort.
func (db *DB) ListIntents(ctx context.Context, owner string, after []byte, limit int) ([]*paymentsv1.PaymentIntent, []byte, error) {
	var (
		page []*paymentsv1.PaymentIntent
		next []byte
	)
	prefix := joinParts([]byte(owner), nil)
	err := db.bolt.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketIntentsByUser).Cursor()
		k, _ := c.Seek(joinParts([]byte(owner), after))
		if after != nil && k != nil && bytes.Equal(k[len(prefix):], after) {
			k, _ = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(page) == limit {
				next = ownerCursor(page[len(page)-1])
				return nil
			}
			if len(k) < len(prefix)+8 {
				return fmt.Errorf("intent index key %x is too short", k)
			}
			id := k[len(prefix)+8:]
			pi, err := getIntent(tx, owner, string(id))
			if err != nil {
				return err
			}
			if pi == nil {
				return fmt.Errorf("intent index names %s, which is missing", id)
			}
			page = append(page, pi)
		}
		return nil
	})
	return page, next, err
}

// ownerIndexKey orders an owner's intents by creation time, then id.
func ownerIndexKey(owner string, pi *paymentsv1.PaymentIntent) []byte {
	return joinParts([]byte(owner), ownerCursor(pi))
}

func ownerCursor(pi *paymentsv1.PaymentIntent) []byte {
	c := binary.BigEndian.AppendUint64(nil, uint64(pi.GetCreateTime().AsTime().UnixNano()))
	return append(c, pi.Id...)
}

func getIntent(tx *bolt.Tx, owner, id string) (*paymentsv1.PaymentIntent, error) {
	v := tx.Bucket(bucketIntents).Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return nil, fmt.Errorf("intent %s: corrupt owner", id)
	}
	if string(v[w:w+int(n)]) != owner {
		return nil, nil
	}
	pi := new(paymentsv1.PaymentIntent)
	if err := proto.Unmarshal(v[w+int(n):], pi); err != nil {
		return nil, fmt.Errorf("intent %s: %w", id, err)
	}
	return pi, nil
}

func encodeIntent(owner string, pi *paymentsv1.PaymentIntent) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pi)
	if err != nil {
		return nil, fmt.Errorf("encode intent %s: %w", pi.Id, err)
	}
	return joinParts([]byte(owner), b), nil
}
