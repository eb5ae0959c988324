package boltstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

// A file written before the in-flight index existed gets it built from its
// records when it is first opened: its claims in flight are listed, its
// completed records are not.
func TestInFlightIndex_BuiltForAnOlderFile(t *testing.T) {
	path, db := openFile(t)
	ctx, now := context.Background(), time.Now()
	req := func(key string) storage.ClaimRequest {
		return storage.ClaimRequest{Key: storage.RecordKey{Scope: "dev:old", Key: key}, Now: now, Lease: time.Minute, TTL: time.Hour}
	}
	if _, _, err := db.Claim(ctx, req("in-flight")); err != nil {
		t.Fatal(err)
	}
	_, rec, err := db.Claim(ctx, req("completed"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, req("completed").Key, rec.Completed(&storage.Result{})); err != nil {
		t.Fatal(err)
	}
	db.Close()

	asEarlierBuild(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketInFlight) })

	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.InFlight(ctx, storage.RecordKey{}, 10)
	if err != nil || len(got) != 1 || got[0].Key != req("in-flight").Key {
		t.Fatalf("InFlight after the index was built = %v, %v; want the claim in flight alone", got, err)
	}
}

// BenchmarkInFlightPage reads a page of the 3 claims in flight among
// records completed by the thousand: its time must not grow with them.
func BenchmarkInFlightPage(b *testing.B) {
	for _, completed := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("completed=%d", completed), func(b *testing.B) {
			db := openBench(b)
			fillRecords(b, db, completed+3, completed)
			for b.Loop() {
				if got, err := db.InFlight(context.Background(), storage.RecordKey{}, 50); err != nil || len(got) != 3 {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}

// asEarlierBuild makes the closed file at path look written by an earlier
// build: change removes what that build did not have.
func asEarlierBuild(t testing.TB, path string, change func(*bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(change); err != nil {
		t.Fatal(err)
	}
}

// fillRecords stores n claims under keys key-0 and on, in 100 scopes.
// The first completed of them are completed.
func fillRecords(b testing.TB, db *DB, n, completed int) {
	b.Helper()
	now := time.Now()
	// A thousand a transaction: bbolt splits its nodes only at commit, so
	// one transaction of them all inserts into ever larger nodes.
	for first := 0; first < n; first += 1000 {
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			for i := first; i < min(first+1000, n); i++ {
				rk := storage.RecordKey{Scope: fmt.Sprintf("dev:%d", i%100), Key: fmt.Sprintf("key-%d", i)}
				_, rec := storage.Decide(nil, false, storage.ClaimRequest{Key: rk, Now: now, Lease: time.Minute, TTL: time.Hour}, storage.Durable, db.Claimant())
				if err := putClaim(tx, recordKey(rk), nil, rec); err != nil {
					return err
				}
				if i < completed {
					if err := replaceClaim(tx, recordKey(rk), rec.Completed(&storage.Result{})); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// openFile opens a new data file, to be closed and opened again.
func openFile(t *testing.T) (string, *DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return path, db
}
