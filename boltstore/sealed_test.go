package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/bolttest"
	"github.com/paymentsd/paymentsd/storage"
)

// A stored answer whose bytes changed on disk (100000000 become 900000000)
// is never replayed as another answer: the calls about that record fail
// with ErrDamaged, the others are served, and Check names the damage.
func TestStoredRecord_ByteChangedOnDisk_DataLossNeverAnotherAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	damagedReq, soundReq := keptRequest(firstFP, now), keptRequest(secondFP, now)
	soundReq.Key.Key = "other"
	for req, text := range map[*storage.ClaimRequest]string{&damagedReq: "amount 100000000", &soundReq: "amount 5"} {
		rec := claimKept(t, db, *req, storage.OutcomeFresh)
		if err := db.Complete(ctx, req.Key, rec.Completed(textResult(t, text))); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	bolttest.ChangeByte(t, path, []byte("amount 100000000"), len("amount "), '9')

	db, err = boltstore.Open(path, nil) // the structure is sound: it opens
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	outcome, rec, err := db.Claim(ctx, damagedReq)
	if !errors.Is(err, storage.ErrDamaged) || !errors.Is(err, boltstore.ErrDamaged) {
		t.Fatalf("claim of the damaged record: %v, %v, %v; want ErrDamaged", outcome, rec, err)
	}
	if outcome, rec, err := db.Claim(ctx, soundReq); err != nil || outcome != storage.OutcomeReplay {
		t.Fatalf("claim of a sound record: %v, %v; want its replay", outcome, err)
	} else if !strings.Contains(rec.Result.Response.String(), "amount 5") {
		t.Fatalf("replay of a sound record: %v", rec.Result.Response)
	}
	if err := db.Check(); !errors.Is(err, boltstore.ErrDamaged) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("Check = %v, want the checksum mismatch", err)
	}
	db.Close()
	ro, err := boltstore.OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Get(ctx, damagedReq.Key); !errors.Is(err, storage.ErrDamaged) {
		t.Errorf("read-only Get of the damaged record: %v, want storage.ErrDamaged", err)
	}
	if err := ro.Check(); !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("read-only Check = %v, want the damage", err)
	}
}

// A damaged record that has expired goes with the others, and does not
// stop the sweeps after it.
func TestSweep_DamagedExpiredRecord_SweptWithTheOthers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := boltstore.Open(path, &boltstore.Options{SweepBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for i, text := range []string{"amount 1", "amount 2", "amount 100000000", "amount 4", "amount 5"} {
		req := keptRequest(firstFP, now)
		req.Key.Key = fmt.Sprint("k", i)
		req.Now = now.Add(time.Duration(i) * time.Millisecond) // sweeps meet them in this order
		rec := claimKept(t, db, req, storage.OutcomeFresh)
		if err := db.Complete(ctx, req.Key, rec.Completed(textResult(t, text))); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	bolttest.ChangeByte(t, path, []byte("amount 100000000"), len("amount "), '9')

	db, err = boltstore.Open(path, &boltstore.Options{SweepBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := db.Sweep(ctx, now.Add(2*time.Hour)); err != nil || n != 5 {
		t.Errorf("Sweep = %d, %v; want all 5 records swept", n, err)
	}
	if err := db.Check(); err != nil {
		t.Errorf("Check after the sweep: %v", err)
	}
}

// A byte changed on disk inside a stored key moves its record under
// another key (order-1001 read as order-1002): the key it was written
// under is lost, and a retry under it, found free, would run its request a
// second time. Open refuses such a file, as it refuses a damaged
// structure, and so do the tools.
func TestStoredKey_ByteChangedOnDisk_FileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := keptRequest(firstFP, time.Now())
	req.Key.Key = "order-1001"
	rec := claimKept(t, db, req, storage.OutcomeFresh)
	if err := db.Complete(context.Background(), req.Key, rec.Completed(textResult(t, "amount 100000000"))); err != nil {
		t.Fatal(err)
	}
	db.Close()
	bolttest.ChangeByte(t, path, []byte("order-1001"), len("order-100"), '2')

	if db, err := boltstore.Open(path, nil); err == nil {
		db.Close()
		t.Fatal("a file with a record under a damaged key was opened")
	} else if !errors.Is(err, boltstore.ErrDamaged) || !strings.Contains(err.Error(), "not the key") || !strings.Contains(err.Error(), "backup") {
		t.Errorf("Open = %v, want ErrDamaged naming the damaged key and a backup", err)
	}
	if ro, err := boltstore.OpenReadOnly(path, 0); err == nil {
		ro.Close()
		t.Error("OpenReadOnly opened a file that Open refuses")
	}
}
