package boltstore

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// A file written before records were sealed (their encodings stored bare)
// is read by the tools as it is, and sealed once by the first Open: every
// record then answers as before.
func TestRecordsWrittenBeforeSealing_ReadThenSealedByOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	now := time.Now()
	resp, err := anypb.New(wrapperspb.String("the answer"))
	if err != nil {
		t.Fatal(err)
	}
	req := storage.ClaimRequest{
		Key: storage.RecordKey{Scope: "s", Key: "k"}, Fingerprint: sha256.Sum256([]byte("r")),
		Scheme: storage.FingerprintScheme, Now: now, Lease: time.Minute, TTL: time.Hour,
	}
	_, claim := storage.Decide(nil, false, req, storage.Durable, storage.Claimant{ID: "old"})
	old, err := claim.Completed(&storage.Result{Response: resp}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error { // as the version before sealing wrote it
		records, err := tx.CreateBucket(bucketRecords)
		if err != nil {
			return err
		}
		index, err := tx.CreateBucket(bucketRecordExpiry)
		if err != nil {
			return err
		}
		if err := index.Put(expiryKey(claim.Expiry, recordKey(req.Key)), nil); err != nil {
			return err
		}
		return records.Put(recordKey(req.Key), old)
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}

	ro, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := ro.Get(context.Background(), req.Key); err != nil || rec == nil || rec.State != storage.StateCompleted {
		t.Errorf("read-only Get before sealing: %v, %v; want the completed record", rec, err)
	}
	if err := ro.Check(); err != nil {
		t.Errorf("read-only Check before sealing: %v", err)
	}
	ro.Close()

	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	req.Now = now.Add(time.Second)
	outcome, rec, err := db.Claim(context.Background(), req)
	if err != nil || outcome != storage.OutcomeReplay || !rec.Result.Response.MessageIs(wrapperspb.String("")) {
		t.Fatalf("claim after Open: %v, %v; want the old record's replay", outcome, err)
	}
	db.bolt.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get(recordKey(req.Key))
		if payload, err := sealed.Open(recordKey(req.Key), v); err != nil || string(payload) != string(old) {
			t.Errorf("stored record after Open: %v; want the old encoding, sealed", err)
		}
		return nil
	})
	if err := db.Check(); err != nil {
		t.Errorf("Check after sealing: %v", err)
	}
}
