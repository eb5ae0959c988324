package boltstore

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/storage"
)

// TestExpiryIndex_FilledAsItGrows appends to the expiry index as claims do,
// in expiry order, and checks that its pages are left nearly full: at
// bbolt's default they would be half empty.
func TestExpiryIndex_FilledAsItGrows(t *testing.T) {
	db := openTest(t)
	t0 := time.Now()
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		for i := range 3000 {
			rk := storage.RecordKey{Scope: "dev:fill", Key: fmt.Sprintf("key-%d", i)}
			_, rec := storage.Decide(nil, false, storage.ClaimRequest{
				Key: rk, Now: t0.Add(time.Duration(i) * time.Millisecond), Lease: time.Minute, TTL: time.Hour,
			}, storage.Durable, db.Claimant())
			if err := putClaim(tx, recordKey(rk), nil, rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.bolt.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketRecordExpiry).Stats()
		if st.KeyN != 3000 {
			t.Fatalf("index holds %d entries, want 3000", st.KeyN)
		}
		if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < 0.8 {
			t.Errorf("index leaf pages are %.0f%% full (%d pages), want at least 80%%", 100*fill, st.LeafPageN)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
