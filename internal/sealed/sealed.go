// Package sealed guards what the bbolt stores keep with checksums. The
// bbolt format checks the structure of its pages, not what they hold. A
// byte damaged on disk inside a stored answer would be read, and replayed,
// as another answer. One damaged inside a key would move a record to
// another key. Its own key, found free, would then run its request a second
// time.
//
// A sealed value is a zero byte, the CRC-32C (Castagnoli) of its key, the
// CRC-32C of its payload (both big-endian), then the payload. A value whose
// payload's checksum fails is damaged, and the calls about its key fail.
// A value whose key's checksum fails sits under a key it was not written
// under. The key it was written under is lost, so the file cannot be
// trusted. Verify reports this as ErrKeyMismatch. Values written before
// sealing had no such frame and never start with a zero byte. Their first
// byte is a protobuf tag, or the length of an intent's owner, which is
// never empty. Migrate seals them once.
package sealed

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
)

const (
	mark       = 0x00
	headerSize = 9
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors of Open.
var (
	// ErrMismatch: the payload is not what was written.
	ErrMismatch = errors.New("checksum mismatch")
	// ErrKeyMismatch: the key is not the one the value was written under.
	ErrKeyMismatch = errors.New("checksum mismatch of the key: it is not the key the value was written under")
	ErrUnsealed    = errors.New("value is not sealed")
)

// bucketSealed names, by its keys, the buckets whose values are all
// sealed. It is Migrate's mark, and what Verify walks. It is named as the
// idempotency store's buckets are, since that store creates it in an
// embedder's file too.
var bucketSealed = []byte("idempotency_sealed")

// Seal returns payload framed with its checksum and its key's.
func Seal(key, payload []byte) []byte {
	v := make([]byte, headerSize, headerSize+len(payload))
	binary.BigEndian.PutUint32(v[1:], crc32.Checksum(key, castagnoli))
	binary.BigEndian.PutUint32(v[5:], crc32.Checksum(payload, castagnoli))
	return append(v, payload...)
}

// Open returns the payload of v, the sealed value stored under key. The
// payload shares v's memory. Open fails with ErrKeyMismatch, ErrMismatch or
// ErrUnsealed.
func Open(key, v []byte) ([]byte, error) {
	if len(v) < headerSize || v[0] != mark {
		return nil, ErrUnsealed
	}
	if binary.BigEndian.Uint32(v[1:]) != crc32.Checksum(key, castagnoli) {
		return nil, ErrKeyMismatch
	}
	if binary.BigEndian.Uint32(v[5:]) != crc32.Checksum(v[headerSize:], castagnoli) {
		return nil, ErrMismatch
	}
	return v[headerSize:], nil
}

// Unseal is Open for a value of bucket read from a file that may not be
// migrated yet. A file opened read-only is never migrated. Unless the
// bucket is marked sealed, a non-empty value without a frame is returned as
// it is.
func Unseal(tx *bolt.Tx, bucket, key, v []byte) ([]byte, error) {
	if len(v) > 0 && v[0] != mark && !Marked(tx, bucket) {
		return v, nil
	}
	return Open(key, v)
}

// Marked reports whether Migrate has sealed every value of bucket.
func Marked(tx *bolt.Tx, bucket []byte) bool {
	marks := tx.Bucket(bucketSealed)
	return marks != nil && marks.Get(bucket) != nil
}

// One transaction of Migrate reads at most migrateBatch keys and seals at
// most migrateBytes of values. Stored results may be megabytes, and these
// limits keep such values from making one transaction large.
const (
	migrateBatch = 10000
	migrateBytes = 64 << 20
)

// Migrate seals every value of bucket written before values were sealed,
// then marks the bucket sealed. The bucket must exist. If it is already
// marked sealed, Migrate does nothing. Its argument update runs a function
// in a write transaction. Each batch of keys takes one, so a file of any
// size is migrated in bounded transactions. A function given to update may
// run more than once.
func Migrate(update func(func(*bolt.Tx) error) error, bucket []byte) error {
	var after []byte // the last key of the batches done
	for {
		var next []byte
		done := false
		err := update(func(tx *bolt.Tx) error {
			next, done = nil, false
			marks, err := tx.CreateBucketIfNotExists(bucketSealed)
			if err != nil {
				return err
			}
			if marks.Get(bucket) != nil {
				done = true
				return nil
			}
			b := tx.Bucket(bucket)
			if b == nil {
				return fmt.Errorf("seal bucket %s: it does not exist", bucket)
			}
			var unsealed [][2][]byte
			c := b.Cursor()
			k, v := c.First()
			if after != nil {
				if k, v = c.Seek(after); bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			for n, size := 0, 0; k != nil && n < migrateBatch && size < migrateBytes; k, v = c.Next() {
				n++
				next = k
				if v != nil && (len(v) == 0 || v[0] != mark) { // nil: a nested bucket
					unsealed = append(unsealed, [2][]byte{bytes.Clone(k), Seal(k, v)})
					size += len(v)
				}
			}
			next = bytes.Clone(next)
			for _, kv := range unsealed { // after the walk: a cursor skips keys put under it
				if err := b.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
			if k == nil {
				done = true
				return marks.Put(bucket, []byte("crc32c"))
			}
			return nil
		})
		if err != nil || done {
			return err
		}
		after = next
	}
}

// Verify checks the checksums of every value of every sealed bucket in tx.
// It returns the first few values it finds damaged. It names each by its
// bucket and a hash of its key, since keys may hold what never reaches a
// log. A key that is not the one its value was written under is an
// ErrKeyMismatch.
func Verify(tx *bolt.Tx) error {
	marks := tx.Bucket(bucketSealed)
	if marks == nil {
		return nil
	}
	var errs []error
	keyLost := false // one is always reported, however many values are damaged
	err := marks.ForEach(func(name, _ []byte) error {
		b := tx.Bucket(name)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if v == nil { // a nested bucket
				return nil
			}
			_, err := Open(k, v)
			lost := errors.Is(err, ErrKeyMismatch)
			if err != nil && (len(errs) < 10 || lost && !keyLost) {
				errs = append(errs, fmt.Errorf("bucket %s, value of key %s: %w", name, KeyHash(k), err))
				keyLost = keyLost || lost
			}
			return nil
		})
	})
	return errors.Join(append(errs, err)...)
}

// KeyHash names a key in a message without showing it.
func KeyHash(k []byte) string {
	sum := sha256.Sum256(k)
	return fmt.Sprintf("%x", sum[:6])
}
