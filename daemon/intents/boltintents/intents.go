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
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/sealed"
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

// CreateIntent stores a new intent owned by owner, created under key. It
// returns server.ErrExists if the id is taken. Inside a boltstore.Tx, the
// write is staged. A taken id then fails the Tx when it commits.
func (s *Store) CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error {
	v, err := encodeIntent(owner, key, pi)
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
	pi, _, _, err := s.read(ctx, owner, id)
	return pi, err
}

// FindIntent returns intent id with its owner, whoever that is, and the
// key that created it; or server.ErrNotFound. Ids are unique across
// owners. It is for operators, who look an intent up by its id alone.
func (s *Store) FindIntent(ctx context.Context, id string) (server.FoundIntent, error) {
	var found server.FoundIntent
	err := s.db.View(ctx, func(tx *bolt.Tx) error {
		v, err := decodeValue(tx, id)
		if errors.Is(err, server.ErrNotFound) {
			return nil // an answer, not a failure of the storage
		}
		if err == nil {
			found = server.FoundIntent{Owner: v.owner, Key: v.key, Intent: v.intent}
		}
		return err
	})
	if err == nil && found.Intent == nil {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return found, serverError(err)
}

// UpdateIntent applies update to owner's intent id. It stores the intent
// if update reports a change. The write is a compare-and-set on the stored
// bytes. A concurrent change makes UpdateIntent read and apply update
// again. Inside a boltstore.Tx, the write is staged. A concurrent change
// then fails the Tx when it commits, with boltstore.ErrConflict. So the
// interceptor runs a transactional request again.
func (s *Store) UpdateIntent(ctx context.Context, owner, id string, update func(*paymentsv1.PaymentIntent) bool) (*paymentsv1.PaymentIntent, error) {
	for {
		pi, key, before, err := s.read(ctx, owner, id)
		if err != nil || !update(pi) {
			return pi, err
		}
		v, err := encodeIntent(owner, key, pi)
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
			found, err := indexedIntent(tx, prefix, owner, k, v)
			if err != nil {
				return err
			}
			page = append(page, found.Intent)
		}
		return nil
	})
	return page, next, serverError(err)
}

// read returns owner's intent id, the key that created it, and its stored
// bytes.
func (s *Store) read(ctx context.Context, owner, id string) (pi *paymentsv1.PaymentIntent, key string, raw []byte, err error) {
	err = s.db.View(ctx, func(tx *bolt.Tx) error {
		pi, key, raw, err = getIntent(tx, owner, id)
		if errors.Is(err, server.ErrNotFound) {
			return nil // an answer, not a failure of the storage
		}
		return err
	})
	if err == nil && pi == nil {
		err = fmt.Errorf("intent %s: %w", id, server.ErrNotFound)
	}
	return pi, key, raw, serverError(err)
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

// A stored intent is its owner, the key that created it, and the intent.
type value struct {
	owner, key string
	intent     *paymentsv1.PaymentIntent
}

// keyedMark starts the payload of an intent stored with its key. An
// intent stored before keys were kept starts with its owner's length,
// which is never 0, and reads with no key.
const keyedMark = 0x00

// decodeValue returns intent id as stored, or server.ErrNotFound. An
// intent damaged on disk is a boltstore.DamagedValue, never another
// intent.
func decodeValue(tx *bolt.Tx, id string) (*value, error) {
	v := tx.Bucket(bucketIntents).Get([]byte(id))
	if v == nil {
		return nil, server.ErrNotFound
	}
	b, err := sealed.Open([]byte(id), v)
	if err != nil {
		return nil, boltstore.DamagedValue(fmt.Errorf("intent %s: %w", id, err))
	}
	return parseValue(id, b)
}

// parseValue reads intent id's payload, as encodeIntent wrote it or, with
// no key, an earlier build.
func parseValue(id string, b []byte) (*value, error) {
	keyed := len(b) > 0 && b[0] == keyedMark
	if keyed {
		b = b[1:]
	}
	owner, b, ok := cutPart(b)
	if !ok || owner == "" {
		return nil, boltstore.DamagedValue(fmt.Errorf("intent %s: corrupt owner", id))
	}
	var key string
	if keyed {
		if key, b, ok = cutPart(b); !ok {
			return nil, boltstore.DamagedValue(fmt.Errorf("intent %s: corrupt key", id))
		}
	}
	pi := new(paymentsv1.PaymentIntent)
	if err := proto.Unmarshal(b, pi); err != nil {
		return nil, boltstore.DamagedValue(fmt.Errorf("intent %s: %w", id, err))
	}
	return &value{owner: owner, key: key, intent: pi}, nil
}

// cutPart cuts a part prefixed with its length off b.
func cutPart(b []byte) (part string, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

// getIntent returns owner's intent id, the key that created it, and a copy
// of its stored bytes; or server.ErrNotFound. Another owner's intent is
// as absent as a missing one.
func getIntent(tx *bolt.Tx, owner, id string) (*paymentsv1.PaymentIntent, string, []byte, error) {
	v, err := decodeValue(tx, id)
	if err != nil {
		return nil, "", nil, err
	}
	if v.owner != owner {
		return nil, "", nil, server.ErrNotFound
	}
	return v.intent, v.key, bytes.Clone(tx.Bucket(bucketIntents).Get([]byte(id))), nil
}

// encodeIntent is the stored form of pi, created under key. That is a
// mark, its owner and key, then its deterministic encoding, sealed with a
// checksum.
func encodeIntent(owner, key string, pi *paymentsv1.PaymentIntent) ([]byte, error) {
	if owner == "" { // an intent belongs to someone; its stored form relies on it
		return nil, fmt.Errorf("encode intent %s: no owner", pi.Id)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pi)
	if err != nil {
		return nil, fmt.Errorf("encode intent %s: %w", pi.Id, err)
	}
	payload := append([]byte{keyedMark}, ownerPrefix(owner)...)
	payload = binary.AppendUvarint(payload, uint64(len(key)))
	payload = append(append(payload, key...), b...)
	return sealed.Seal([]byte(pi.Id), payload), nil
}

var _ server.IntentScanner = (*Store)(nil)

// ScanIntents walks owner's index backward (see Reader).
func (s *Store) ScanIntents(ctx context.Context, owner string, from time.Time, before server.Position, fn func(server.FoundIntent) (bool, error)) error {
	return NewReader(s.db).ScanIntents(ctx, owner, from, before, fn)
}

// Viewer runs read transactions of a bbolt file: a boltstore.DB, or a
// boltstore.ReadOnly that an operator's command opens.
type Viewer interface {
	View(ctx context.Context, fn func(*bolt.Tx) error) error
}

// Reader reads the intents of a file it does not write: what an
// operator's search needs (intentsearch.Store).
type Reader struct{ v Viewer }

// NewReader reads the intents kept in v's file.
func NewReader(v Viewer) *Reader { return &Reader{v} }

// GetIntent returns owner's intent id, or server.ErrNotFound.
func (r *Reader) GetIntent(ctx context.Context, owner, id string) (*paymentsv1.PaymentIntent, error) {
	var pi *paymentsv1.PaymentIntent
	err := r.v.View(ctx, func(tx *bolt.Tx) (err error) {
		pi, _, _, err = getIntent(tx, owner, id)
		return err
	})
	return pi, serverError(err)
}

// ScanIntents walks owner's index backward, from before down to from, in
// one read transaction, and reads each intent it names.
func (r *Reader) ScanIntents(ctx context.Context, owner string, from time.Time, before server.Position, fn func(server.FoundIntent) (bool, error)) error {
	prefix := ownerPrefix(owner)
	floor := prefix
	if !from.IsZero() {
		floor = append(bytes.Clone(prefix), binary.BigEndian.AppendUint64(nil, uint64(from.UnixNano()))...)
	}
	return serverError(r.v.View(ctx, func(tx *bolt.Tx) error {
		if tx.Bucket(bucketByOwner) == nil {
			return nil // a file no server with intents ever wrote
		}
		c := tx.Bucket(bucketByOwner).Cursor()
		seek := append(bytes.Clone(prefix), 0xff) // past owner's keys, whose times start below 0x80
		if before != (server.Position{}) {
			seek = append(bytes.Clone(prefix), positionKey(before)...)
		}
		var k, v []byte
		if at, _ := c.Seek(seek); at == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix) && bytes.Compare(k, floor) >= 0; k, v = c.Prev() {
			if err := ctx.Err(); err != nil {
				return err
			}
			found, err := indexedIntent(tx, prefix, owner, k, v)
			if err != nil {
				return err
			}
			if more, err := fn(found); err != nil || !more {
				return err
			}
		}
		return nil
	}))
}

// positionKey is p as an owner's index keys sort it.
func positionKey(p server.Position) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(p.CreateTime.UnixNano())), p.ID...)
}

// indexedIntent reads the intent that the index entry k, v of owner names.
func indexedIntent(tx *bolt.Tx, prefix []byte, owner string, k, v []byte) (server.FoundIntent, error) {
	if len(k) < len(prefix)+8 {
		return server.FoundIntent{}, boltstore.DamagedValue(fmt.Errorf("an intent index key of %d bytes is too short", len(k)))
	}
	if _, err := sealed.Open(k, v); err != nil {
		return server.FoundIntent{}, boltstore.DamagedValue(fmt.Errorf("intent index entry %s: %w", sealed.KeyHash(k), err))
	}
	id := string(k[len(prefix)+8:])
	stored, err := decodeValue(tx, id)
	switch {
	case errors.Is(err, server.ErrNotFound) || err == nil && stored.owner != owner:
		return server.FoundIntent{}, boltstore.DamagedValue(fmt.Errorf("intent index of %s names %s, which it does not hold", sealed.KeyHash([]byte(owner)), id))
	case err != nil:
		return server.FoundIntent{}, err
	}
	return server.FoundIntent{Owner: owner, Key: stored.key, Intent: stored.intent}, nil
}
