package sealed

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// FuzzOpen: whatever bytes are read from a file, under whatever key, Open
// gives an error or the payload that was sealed, never a panic and never
// another payload; every payload sealed under any key opens again; and a
// sealed value with any one byte changed (xor at byte at of it) is refused.
//
// Open finds every change of one byte, by the format: the mark byte made
// nonzero is ErrUnsealed; a change in the key's checksum ErrKeyMismatch; a
// change in the payload's checksum or in the payload ErrMismatch, since
// CRC-32C, of degree 32, finds every burst of errors up to 32 bits long.
// Two things it cannot tell:
//   - a change in the key's checksum is reported as ErrKeyMismatch (the key
//     lost, the file not to be trusted), though the key is sound: nothing
//     guards the checksums themselves. The error is louder than the damage,
//     never quieter.
//   - Unseal, for a bucket not marked sealed, returns a value whose first
//     byte is not zero as it is, a value written before sealing: a sealed
//     value whose mark byte is changed is read as such a value, its frame
//     taken for payload. A file has sealed values in an unmarked bucket
//     only when its mark is lost, since Migrate marks a bucket before any
//     sealed value is written to it; the fuzz checks that Unseal opens
//     every value of a marked bucket as Open does.
//
// The seeds in testdata/fuzz/FuzzOpen are values (and keys) of the
// idempotency records and intents buckets of a file that boltstore and
// boltintents wrote: records in flight, completed with a response and
// with an error, and intents with their index entries.
func FuzzOpen(f *testing.F) {
	f.Add([]byte("\x05alice order-1001"), Seal([]byte("\x05alice order-1001"), []byte("\x0a\x20payload")), uint32(0), byte(1))
	f.Add([]byte{}, []byte{}, uint32(0), byte(0))
	f.Add([]byte("k"), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, uint32(4), byte(0x80))
	db := openFuzzBuckets(f)

	f.Fuzz(func(t *testing.T, key, v []byte, at uint32, x byte) {
		got, err := openAnyBytes(t, key, v)
		unsealAgreesWithOpen(t, db, key, v, got, err)

		// v taken as a payload: sealed, it opens to itself.
		s := Seal(key, v)
		if got, err := Open(key, s); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("Open(Seal(%q, %q)) = %q, %v", key, v, got, err)
		}
		damageRefused(t, key, v, s, at, x)
	})
}

// The buckets FuzzOpen unseals in: fuzzMarked, which Migrate marked
// sealed, and fuzzUnmarked, which a file from before sealing has.
var fuzzMarked, fuzzUnmarked = []byte("marked"), []byte("unmarked")

// openFuzzBuckets opens a bbolt file with FuzzOpen's two buckets.
func openFuzzBuckets(f *testing.F) *bolt.DB {
	db, err := bolt.Open(filepath.Join(f.TempDir(), "fuzz.db"), 0o600, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{fuzzMarked, fuzzUnmarked} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	if err := Migrate(db.Update, fuzzMarked); err != nil {
		f.Fatal(err)
	}
	return db
}

// openAnyBytes checks that Open of any bytes gives an error, or exactly
// the payload of a value Seal would have written. It returns what Open
// gave, for the checks that must agree with it.
func openAnyBytes(t *testing.T, key, v []byte) ([]byte, error) {
	t.Helper()
	got, err := Open(key, v)
	switch {
	case err == nil:
		if !bytes.Equal(got, v[headerSize:]) || !bytes.Equal(Seal(key, got), v) {
			t.Fatalf("Open(%q, %q) = %q; not what Seal framed", key, v, got)
		}
	case got != nil:
		t.Fatalf("Open(%q, %q) = %q with %v; want no payload with an error", key, v, got, err)
	case !errors.Is(err, ErrUnsealed) && !errors.Is(err, ErrKeyMismatch) && !errors.Is(err, ErrMismatch):
		t.Fatalf("Open(%q, %q): %v, not one of its errors", key, v, err)
	}
	return got, err
}

// unsealAgreesWithOpen checks that Unseal in a marked bucket is Open, and
// that in an unmarked one it takes a value without the mark as it is.
func unsealAgreesWithOpen(t *testing.T, db *bolt.DB, key, v, got []byte, err error) {
	t.Helper()
	db.View(func(tx *bolt.Tx) error {
		if u, uerr := Unseal(tx, fuzzMarked, key, v); !bytes.Equal(u, got) || uerr != err {
			t.Fatalf("Unseal in a marked bucket = %q, %v; Open = %q, %v", u, uerr, got, err)
		}
		u, uerr := Unseal(tx, fuzzUnmarked, key, v)
		if len(v) > 0 && v[0] != mark {
			if uerr != nil || !bytes.Equal(u, v) {
				t.Fatalf("Unseal of a value from before sealing = %q, %v; want it as it is", u, uerr)
			}
		} else if !bytes.Equal(u, got) || uerr != err {
			t.Fatalf("Unseal of a framed value in an unmarked bucket = %q, %v; Open = %q, %v", u, uerr, got, err)
		}
		return nil
	})
}

// damageRefused checks that s, v sealed under key, with byte at (mod its
// length) xor x is refused, with the error of the part it is in. An x of
// zero changes nothing and is not checked.
func damageRefused(t *testing.T, key, v, s []byte, at uint32, x byte) {
	t.Helper()
	if x == 0 {
		return
	}
	i := int(at % uint32(len(s)))
	damaged := bytes.Clone(s)
	damaged[i] ^= x
	want := ErrMismatch
	switch {
	case i == 0:
		want = ErrUnsealed
	case i < 5:
		want = ErrKeyMismatch
	}
	if got, err := Open(key, damaged); !errors.Is(err, want) || got != nil {
		t.Fatalf("byte %d of Seal(%q, %q) xor %#x: Open = %q, %v; want %v", i, key, v, x, got, err, want)
	}
}
