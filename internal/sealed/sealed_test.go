package sealed

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestOpen_EveryBitFlipAndCutIsFound(t *testing.T) {
	key := []byte("\x05alice order-1001")
	payload := []byte("\x0a\x20an answer of 100000000 units, as a stored record holds it")
	v := Seal(key, payload)
	got, err := Open(key, v)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("Open(Seal(k, p)) = %q, %v; want p", got, err)
	}
	for i := range v {
		for bit := range 8 {
			damaged := bytes.Clone(v)
			damaged[i] ^= 1 << bit
			if _, err := Open(key, damaged); err == nil {
				t.Errorf("byte %d bit %d flipped: opened", i, bit)
			}
		}
	}
	for n := range len(v) {
		if _, err := Open(key, v[:n]); err == nil {
			t.Errorf("cut to %d bytes: opened", n)
		}
	}
	if _, err := Open(key, payload); !errors.Is(err, ErrUnsealed) {
		t.Errorf("Open(unsealed) = %v, want ErrUnsealed", err)
	}
}

// A value read under another key than it was written under, its key
// damaged, is told apart from a damaged value: the key it was written
// under is lost.
func TestOpen_EveryBitFlipOfTheKey_IsAKeyMismatch(t *testing.T) {
	key := []byte("\x05alice order-1001")
	v := Seal(key, []byte("payload"))
	for i := range key {
		for bit := range 8 {
			other := bytes.Clone(key)
			other[i] ^= 1 << bit
			if _, err := Open(other, v); !errors.Is(err, ErrKeyMismatch) {
				t.Errorf("key byte %d bit %d flipped: %v, want ErrKeyMismatch", i, bit, err)
			}
		}
	}
}

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "sealed.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// fill writes n values as a version before sealing did, and one sealed.
func fill(t *testing.T, db *bolt.DB, bucket string, n int) {
	t.Helper()
	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		for i := range n {
			if err := b.Put(fmt.Appendf(nil, "k%06d", i), fmt.Appendf(nil, "\x0avalue %d", i)); err != nil {
				return err
			}
		}
		if _, err := b.CreateBucket([]byte("nested")); err != nil { // not a value: left alone
			return err
		}
		return b.Put([]byte("already"), Seal([]byte("already"), []byte("sealed before")))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMigrate_SealsOldValuesInBatchesOnce(t *testing.T) {
	db := openDB(t)
	const n = 2*migrateBatch + 7
	fill(t, db, "intents", n)
	fill(t, db, "other", 3)
	commits := 0
	update := func(fn func(*bolt.Tx) error) error { commits++; return db.Update(fn) }
	if err := Migrate(update, []byte("intents")); err != nil {
		t.Fatal(err)
	}
	if commits != 3 {
		t.Errorf("%d transactions for %d keys, want 3 of at most %d keys", commits, n+2, migrateBatch)
	}
	db.View(func(tx *bolt.Tx) error {
		if !Marked(tx, []byte("intents")) || Marked(tx, []byte("other")) {
			t.Error("marks: want intents alone")
		}
		for i := range n {
			k := fmt.Appendf(nil, "k%06d", i)
			got, err := Open(k, tx.Bucket([]byte("intents")).Get(k))
			if want := fmt.Sprintf("\x0avalue %d", i); err != nil || string(got) != want {
				t.Fatalf("value %d: %q, %v; want %q sealed", i, got, err, want)
			}
		}
		if got, err := Open([]byte("already"), tx.Bucket([]byte("intents")).Get([]byte("already"))); err != nil || string(got) != "sealed before" {
			t.Errorf("a value sealed before: %q, %v; want it sealed once", got, err)
		}
		if v, _ := Open([]byte("k000000"), tx.Bucket([]byte("other")).Get([]byte("k000000"))); v != nil {
			t.Error("a bucket not migrated was sealed")
		}
		return nil
	})
	commits = 0
	if err := Migrate(update, []byte("intents")); err != nil || commits != 1 {
		t.Errorf("again: %v in %d transactions, want nothing to do in 1", err, commits)
	}
}

// A migration cut short (the process dies, a commit fails) is taken up
// again at the next start: values it sealed are not sealed twice.
func TestMigrate_CutShortThenResumed(t *testing.T) {
	db := openDB(t)
	fill(t, db, "intents", migrateBatch+5)
	calls := 0
	failSecond := func(fn func(*bolt.Tx) error) error {
		if calls++; calls == 2 {
			return errors.New("disk failed")
		}
		return db.Update(fn)
	}
	if err := Migrate(failSecond, []byte("intents")); err == nil {
		t.Fatal("Migrate hid the failure of its second transaction")
	}
	if err := Migrate(db.Update, []byte("intents")); err != nil {
		t.Fatal(err)
	}
	if err := db.View(Verify); err != nil {
		t.Errorf("Verify after the resumed migration: %v", err)
	}
}

func TestVerify_FindsDamagedValuesNamingNoKey(t *testing.T) {
	db := openDB(t)
	fill(t, db, "records", 20)
	if err := Migrate(db.Update, []byte("records")); err != nil {
		t.Fatal(err)
	}
	if err := db.View(Verify); err != nil {
		t.Fatalf("Verify of sound values: %v", err)
	}
	secret := []byte("k000007")
	db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		v := bytes.Clone(b.Get(secret))
		v[len(v)-1] ^= 0x10
		return b.Put(secret, v)
	})
	err := db.View(Verify)
	if !errors.Is(err, ErrMismatch) || errors.Is(err, ErrKeyMismatch) || !strings.Contains(err.Error(), KeyHash(secret)) || strings.Contains(err.Error(), string(secret)) {
		t.Errorf("Verify = %v; want ErrMismatch naming %s, not the key", err, KeyHash(secret))
	}
	// A key damaged, its value moved under another key: reported, however
	// many damaged values come before it.
	db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("records"))
		for i := range 12 {
			k := fmt.Appendf(nil, "k%06d", i)
			v := bytes.Clone(b.Get(k))
			v[len(v)-1] ^= 0x10
			b.Put(k, v)
		}
		v := bytes.Clone(b.Get([]byte("k000019")))
		b.Delete([]byte("k000019"))
		return b.Put([]byte("k000029"), v)
	})
	if err := db.View(Verify); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("Verify of a value under a damaged key = %v, want ErrKeyMismatch", err)
	}
}

// Large values end a transaction early: no migration transaction holds
// much more than migrateBytes of them.
func TestMigrate_LargeValuesTakeMoreTransactions(t *testing.T) {
	db := openDB(t)
	value := bytes.Repeat([]byte{0x0a}, 1<<20)
	const n = 80 // MiB, over migrateBytes
	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("results"))
		if err != nil {
			return err
		}
		for i := range n {
			if err := b.Put(fmt.Appendf(nil, "k%03d", i), value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	commits := 0
	update := func(fn func(*bolt.Tx) error) error { commits++; return db.Update(fn) }
	if err := Migrate(update, []byte("results")); err != nil {
		t.Fatal(err)
	}
	if want := n/(migrateBytes>>20) + 1; commits != want {
		t.Errorf("%d transactions for %d MiB, want %d of at most %d MiB", commits, n, want, migrateBytes>>20)
	}
	if err := db.View(Verify); err != nil {
		t.Error(err)
	}
}
