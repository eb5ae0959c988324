package boltstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// A file written by a build without the release history opens: the
// history's buckets are made, a stored error written before is released,
// and its entry is kept and checked as every sealed value is.
func TestReleaseHistory_OlderFileOpensAndKeepsReleases(t *testing.T) {
	path, db := openFile(t)
	ctx, now := context.Background(), time.Now()
	req := storage.ClaimRequest{Key: storage.RecordKey{Scope: "dev:old", Key: "k"}, Now: now, Lease: time.Minute, TTL: time.Hour}
	_, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, rec.Completed(&storage.Result{Status: &spb.Status{Code: 3, Message: "bad amount"}})); err != nil {
		t.Fatal(err)
	}
	db.Close()

	asEarlierBuild(t, path, func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketReleases, bucketReleaseExpiry} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("idempotency_sealed")).Delete(bucketReleases)
	})

	db, err = Open(path, nil)
	if err != nil {
		t.Fatalf("Open of a file without the release history: %v", err)
	}
	defer db.Close()
	if _, err := db.Release(ctx, req.Key, now.Add(time.Second), "oncall", storage.Seen{}); err != nil {
		t.Fatalf("Release in a file of an earlier build: %v", err)
	}
	got, err := db.Releases(ctx, req.Key)
	if err != nil || len(got) != 1 || got[0].By != "oncall" || got[0].Code != 3 {
		t.Fatalf("Releases = %+v, %v; want the one release", got, err)
	}
	err = db.bolt.View(func(tx *bolt.Tx) error {
		if !sealed.Marked(tx, bucketReleases) {
			return fmt.Errorf("the release history is not marked sealed: Check would not verify it")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

// BenchmarkFindKey finds one key among 100,000 records in 100 scopes.
// The file orders records by scope, so FindKey reads them all: its cost
// is per record stored. Run with
//
//	go test -run '^$' -bench BenchmarkFindKey ./boltstore
func BenchmarkFindKey(b *testing.B) {
	db := openBench(b)
	fillRecords(b, db, 100_000, 0)
	for b.Loop() {
		if got, err := db.FindKey(context.Background(), "key-4242", 10); err != nil || len(got) != 1 {
			b.Fatal(len(got), err)
		}
	}
}
