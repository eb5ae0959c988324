package boltstore_test

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/storage"
)

// The key and the two requests of the tests of kept records.
var (
	keptKey           = storage.RecordKey{Scope: "s", Key: "k"}
	firstFP, secondFP = sha256.Sum256([]byte("first")), sha256.Sum256([]byte("second"))
)

func openKept(t *testing.T) *boltstore.DB {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func keptRequest(fp storage.Fingerprint, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{Key: keptKey, Fingerprint: fp, Scheme: storage.FingerprintScheme,
		Now: now, Lease: time.Minute, TTL: time.Hour}
}

func textResult(t *testing.T, text string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Response: resp}
}

// claimKept claims with a durable claim and wants outcome.
func claimKept(t *testing.T, db *boltstore.DB, req storage.ClaimRequest, want storage.Outcome) *storage.Record {
	t.Helper()
	outcome, rec, err := db.Claim(context.Background(), req)
	if err != nil || outcome != want {
		t.Fatalf("claim at %v: %v, %v; want %v", req.Now, outcome, err, want)
	}
	return rec
}

// A retry of a completed record before it expires is answered from memory,
// with no read of the file; once the record has been replaced or swept, what
// was kept never answers again, even for a request whose clock says the old
// record would still be live (a clock set back).
func TestKeptRecord_AnswersWithoutReadingUntilReplacedOrSwept(t *testing.T) {
	db := openKept(t)
	ctx := context.Background()
	t0 := time.Now()
	claim := func(fp storage.Fingerprint, now time.Time) (storage.Outcome, storage.Tx) {
		t.Helper()
		outcome, _, tx, err := db.ClaimTx(ctx, keptRequest(fp, now), storage.Transactional)
		if err != nil {
			t.Fatal(err)
		}
		return outcome, tx
	}
	complete := func(fp storage.Fingerprint, now time.Time, text string) {
		t.Helper()
		outcome, rec, tx, err := db.ClaimTx(ctx, keptRequest(fp, now), storage.Transactional)
		if err != nil || !outcome.Claimed() {
			t.Fatalf("claim at %v: %v, %v; want it claimed", now.Sub(t0), outcome, err)
		}
		if err := tx.Commit(ctx, rec.Completed(textResult(t, text))); err != nil {
			t.Fatal(err)
		}
	}
	reads := func() int { return db.Bolt().Stats().TxN }

	complete(firstFP, t0, "first")
	if outcome, _ := claim(firstFP, t0.Add(time.Minute)); outcome != storage.OutcomeReplay {
		t.Fatalf("retry: %v, want a replay", outcome)
	}
	before := reads()
	if outcome, _ := claim(firstFP, t0.Add(2*time.Minute)); outcome != storage.OutcomeReplay {
		t.Fatalf("second retry: %v, want a replay", outcome)
	}
	if outcome, _ := claim(secondFP, t0.Add(2*time.Minute)); outcome != storage.OutcomeMismatch {
		t.Fatalf("other request: %v, want a mismatch", outcome)
	}
	if n := reads() - before; n != 0 {
		t.Errorf("retries of a kept record opened %d read transactions, want none", n)
	}

	// Expired, the key is claimed anew by another request.
	complete(secondFP, t0.Add(2*time.Hour), "second")
	if outcome, _ := claim(firstFP, t0.Add(2*time.Minute)); outcome != storage.OutcomeMismatch {
		t.Errorf("the first request, its clock set back, after the key was reused: %v, want a mismatch with the new record", outcome)
	}

	// Kept again, then swept.
	if outcome, _ := claim(secondFP, t0.Add(2*time.Hour+time.Minute)); outcome != storage.OutcomeReplay {
		t.Fatalf("retry of the second: %v, want a replay", outcome)
	}
	if n, err := db.Sweep(ctx, t0.Add(4*time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1 record deleted", n, err)
	}
	if outcome, tx := claim(secondFP, t0.Add(2*time.Hour+2*time.Minute)); outcome != storage.OutcomeFresh {
		t.Errorf("the second request, its clock set back, after its record was swept: %v, want fresh", outcome)
	} else {
		tx.Rollback()
	}
}

// A durable claim that takes over a key whose record expired forgets it.
func TestKeptRecord_ForgottenWhenADurableClaimTakesTheKey(t *testing.T) {
	db := openKept(t)
	t0 := time.Now()
	rec := claimKept(t, db, keptRequest(firstFP, t0), storage.OutcomeFresh)
	if err := db.Complete(context.Background(), keptKey, rec.Completed(textResult(t, "first"))); err != nil {
		t.Fatal(err)
	}
	claimKept(t, db, keptRequest(firstFP, t0.Add(time.Minute)), storage.OutcomeReplay)
	claimKept(t, db, keptRequest(secondFP, t0.Add(2*time.Hour)), storage.OutcomeFresh)
	// The first request, its clock set back, meets the second's claim.
	claimKept(t, db, keptRequest(firstFP, t0.Add(2*time.Minute)), storage.OutcomeMismatch)
}

// A closed DB answers nothing, not even from memory.
func TestKeptRecord_NotAnsweredAfterClose(t *testing.T) {
	db := openKept(t)
	req := keptRequest(firstFP, time.Now())
	rec := claimKept(t, db, req, storage.OutcomeFresh)
	if err := db.Complete(context.Background(), keptKey, rec.Completed(textResult(t, "done"))); err != nil {
		t.Fatal(err)
	}
	claimKept(t, db, req, storage.OutcomeReplay)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := db.Claim(context.Background(), req); err == nil {
		t.Errorf("retry after Close: %v, want an error", outcome)
	}
}
