// Package boltintents keeps paymentsd's payment intents in the bbolt file
// of a boltstore.DB. They live in buckets of their own and are written
// through its group commit. Inside a handler under the idempotency
// interceptor, its writes join the completion of the request's record.
// Intent and answer commit together, or neither does.
package boltintents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/server"
)

// Intents live in two buckets. The bucket intents maps an id to its owner
// and the intent's encoding. The bucket intents_by_owner lists each owner's
// ids in creation order, for paging. Its values are only the seal of their
// keys. Every value is sealed (internal/sealed), so a damaged id or entry
// is found.
var (
	bucketIntents = []byte("intents")
	bucketByOwner = []byte("intents_by_owner")
)

// errChanged is a compare-and-set that lost. The intent changed between its
// read and its write. Inside a boltstore.Tx, it runs the request again.
var errChanged = fmt.Errorf("payment intent changed while it was being updated: %w", boltstore.ErrConflict)

// Store is a server.IntentStore in a boltstore.DB.
type Store struct {
	db *boltstore.DB
}

var _ server.IntentStore = (*Store)(nil)

// New returns the intents kept in db, creating their buckets if needed.
func New(ctx context.Context, db *boltstore.DB) (*Store, error) {
	ready := false
	db.View(ctx, func(tx *bolt.Tx) error {
		ready = tx.Bucket(bucketIntents) != nil && tx.Bucket(bucketByOwner) != nil &&
			sealed.Marked(tx, bucketIntents) && sealed.Marked(tx, bucketByOwner)
		return nil
	})
	if ready { // no write, so that opening a file costs no commit
		return &Store{db: db}, nil
	}
	err := db.Update(ctx, func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketIntents, bucketByOwner} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("intents: create buckets: %w", err)
	}
	update := func(fn func(*bolt.Tx) error) error { return db.Update(ctx, fn) }
	for _, b := range [][]byte{bucketIntents, bucketByOwner} {
		if err := sealed.Migrate(update, b); err != nil {
			return nil, fmt.Errorf("intents: seal what was written before checksums: %w", err)
		}
	}
	return &Store{db: db}, nil
}

// CreateIntent stores a new intent owned by owner. It returns
// server.ErrExists if the id is taken. Inside a boltstore.Tx, the write is
// staged. A taken id then fails the Tx when it commits.
func (s *Store) CreateIntent(ctx context.Context, owner string, pi *paymentsv1.PaymentIntent) error {
	v, err := encodeIntent(owner, pi)
	if err != nil {
		return err
	}
	return serverError(s.db.Update(ctx, func(tx *bolt.Tx) error {
		intents := tx.Bucket(bucketIntents)
		if intents.Get([]byte(pi.Id)) != nil {
			return fmt.Errorf("create intent %s: %w", pi.Id, server.ErrExists)
		}
		if err := intents.Put([]byte(pi.Id), v); err != nil {
			return err
		}
		k := ownerIndexKey(owner, pi)
		return tx.Bucket(bucketByOwner).Put(k, sealed.Seal(k, nil))
	}))
}

// GetIntent returns owner's intent id, or server.ErrNotFound when there is
// none. Another owner's intent is as absent as a missing one.
func (s *Store) GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error) {
	pi, _, err := s.read(ctx, owner, id)
	return pi, err
}

// FindIntent returns intent id and its owner, whoever that is, or
// server.ErrNotFound. Ids are unique across owners. It is for operators,
// who look an intent up by its id alone.
func (s *Store) FindIntent(ctx context.Context, id string) (owner string, pi *paymentsv1.PaymentIntent, err error) {
	err = s.db.View(ctx, func(tx *bolt.Tx) error {
		if owner, err = intentOwner(tx, id); err == nil {
			pi, _, err = getIntent(tx, owner, id)
		}
		if errors.Is(err, server.ErrNotFound) {
			return nil // an answer, not a failure of the storage
		}
		return err
	})
	if err == nil && pi == nil {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return owner, pi, serverError(err)
}

// UpdateIntent applies update to owner's intent id. It stores the intent
// if update reports a change. The write is a compare-and-set on the stored
// bytes. A concurrent change makes UpdateIntent read and apply update
// again. Inside a boltstore.Tx, the write is staged. A concurrent change
// then fails the Tx when it commits, with boltstore.ErrConflict. So the
// interceptor runs a transactional request again.
func (s *Store) UpdateIntent(ctx context.Context, owner, id string, update func(*paymentsv1.PaymentIntent) bool) (*paymentsv1.PaymentIntent, error) {
	for {
		pi, before, err := s.read(ctx, owner, id)
		if err != nil || !update(pi) {
			return pi, err
		}
		v, err := encodeIntent(owner, pi)
		if err != nil {
			return nil, err
		}
		err = s.db.Update(ctx, func(tx *bolt.Tx) error {
			intents := tx.Bucket(bucketIntents)
			if !bytes.Equal(intents.Get([]byte(id)), before) {
				return fmt.Errorf("update intent %s: %w", id, errChanged)
			}
			return intents.Put([]byte(id), v)
		})
		if !errors.Is(err, errChanged) {
			return pi, serverError(err)
		}
	}
}

// ListIntents returns up to limit of owner's intents in creation order. It
// starts after the cursor after, which is nil for the first page. It also
// returns the cursor of the next page, nil when there is none. A cursor is
// opaque. One that names no intent still lists from where it would sort.
func (s *Store) ListIntents(ctx context.Context, owner string, after []byte, limit int) ([]*paymentsv1.PaymentIntent, []byte, error) {
	if limit <= 0 {
		return nil, nil, fmt.Errorf("list intents: limit %d, want at least 1", limit)
	}
	var (
		page []*paymentsv1.PaymentIntent
		next []byte
	)
	prefix := ownerPrefix(owner)
	err := s.db.View(ctx, func(tx *bolt.Tx) error {
		page, next = nil, nil
		c := tx.Bucket(bucketByOwner).Cursor()
		k, v := c.Seek(append(prefix[:len(prefix):len(prefix)], after...))
		if after != nil && k != nil && bytes.Equal(k[len(prefix):], after) {
			k, v = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(page) == limit {
				next = ownerCursor(page[len(page)-1])
				return nil
			}
			if len(k) < len(prefix)+8 {
				return boltstore.DamagedValue(fmt.Errorf("an intent index key of %d bytes is too short", len(k)))
			}
			if _, err := sealed.Open(k, v); err != nil {
				return boltstore.DamagedValue(fmt.Errorf("intent index entry %s: %w", sealed.KeyHash(k), err))
			}
			id := string(k[len(prefix)+8:])
			pi, _, err := getIntent(tx, owner, id)
			if errors.Is(err, server.ErrNotFound) {
				return boltstore.DamagedValue(fmt.Errorf("intent index names %s, which is missing", id))
			}
			if err != nil {
				return err
			}
			page = append(page, pi)
		}
		return nil
	})
	return page, next, serverError(err)
}

// read returns owner's intent id and its stored bytes.
func (s *Store) read(ctx context.Context, owner, id string) (pi *paymentsv1.PaymentIntent, raw []byte, err error) {
	err = s.db.View(ctx, func(tx *bolt.Tx) error {
		pi, raw, err = getIntent(tx, owner, id)
		if errors.Is(err, server.ErrNotFound) {
			return nil // an answer, not a failure of the storage
		}
		return err
	})
	if err == nil && pi == nil {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return pi, raw, serverError(err)
}

// serverError is err, an error of the DB, as the server is to read it. A
// boltstore.ErrDamaged is a server.ErrDamaged too.
func serverError(err error) error {
	if errors.Is(err, boltstore.ErrDamaged) {
		return damaged{err}
	}
	return err
}

// damaged is a boltstore.ErrDamaged, with its message, that the server
// knows as a server.ErrDamaged.
type damaged struct{ error }

func (e damaged) Unwrap() []error { return []error{server.ErrDamaged, e.error} }

// ownerPrefix starts the index keys of owner's intents. It is the owner's
// length, then owner. So no owner's keys run into another's.
func ownerPrefix(owner string) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(owner))), owner...)
}

// ownerIndexKey orders an owner's intents by creation time, then id.
func ownerIndexKey(owner string, pi *paymentsv1.PaymentIntent) []byte {
	return append(ownerPrefix(owner), ownerCursor(pi)...)
}

func ownerCursor(pi *paymentsv1.PaymentIntent) []byte {
	c := binary.BigEndian.AppendUint64(nil, uint64(pi.GetCreateTime().AsTime().UnixNano()))
	return append(c, pi.Id...)
}

// intentOwner returns the owner of intent id, or server.ErrNotFound.
func intentOwner(tx *bolt.Tx, id string) (string, error) {
	v := tx.Bucket(bucketIntents).Get([]byte(id))
	if v == nil {
		return "", server.ErrNotFound
	}
	b, err := sealed.Open([]byte(id), v)
	if err != nil {
		return "", boltstore.DamagedValue(fmt.Errorf("intent %s: %w", id, err))
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return "", boltstore.DamagedValue(fmt.Errorf("intent %s: corrupt owner", id))
	}
	return string(b[w : w+int(n)]), nil
}

// getIntent returns owner's intent id and a copy of its stored bytes, or
// server.ErrNotFound. An intent damaged on disk is a
// boltstore.DamagedValue, never another intent.
func getIntent(tx *bolt.Tx, owner, id string) (*paymentsv1.PaymentIntent, []byte, error) {
	v := tx.Bucket(bucketIntents).Get([]byte(id))
	if v == nil {
		return nil, nil, server.ErrNotFound
	}
	b, err := sealed.Open([]byte(id), v)
	if err != nil {
		return nil, nil, boltstore.DamagedValue(fmt.Errorf("intent %s: %w", id, err))
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, boltstore.DamagedValue(fmt.Errorf("intent %s: corrupt owner", id))
	}
	if string(b[w:w+int(n)]) != owner {
		return nil, nil, server.ErrNotFound
	}
	pi := new(paymentsv1.PaymentIntent)
	if err := proto.Unmarshal(b[w+int(n):], pi); err != nil {
		return nil, nil, boltstore.DamagedValue(fmt.Errorf("intent %s: %w", id, err))
	}
	return pi, bytes.Clone(v), nil
}

// encodeIntent is the stored form of pi. That is its owner, then its
// deterministic encoding, sealed with a checksum.
func encodeIntent(owner string, pi *paymentsv1.PaymentIntent) ([]byte, error) {
	if owner == "" { // an intent belongs to someone; its stored form relies on it
		return nil, fmt.Errorf("encode intent %s: no owner", pi.Id)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pi)
	if err != nil {
		return nil, fmt.Errorf("encode intent %s: %w", pi.Id, err)
	}
	return sealed.Seal([]byte(pi.Id), append(ownerPrefix(owner), b...)), nil
}
