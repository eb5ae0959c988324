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
	"github.com/paymentsd/paymentsd/interceptor"
)

// A retry of a completed record before it expires is answered from memory,
// with no read of the file; once the record has been replaced or swept, what
// was kept never answers again, even for a request whose clock says the old
// record would still be live (a clock set back).
func TestKeptRecord_AnswersWithoutReadingUntilReplacedOrSwept(t *testing.T) {
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	key := interceptor.RecordKey{Scope: "s", Key: "k"}
	first, second := sha256.Sum256([]byte("first")), sha256.Sum256([]byte("second"))
	t0 := time.Now()
	claim := func(fp interceptor.Fingerprint, now time.Time) (interceptor.Outcome, *interceptor.Record, interceptor.Tx) {
		t.Helper()
		outcome, rec, tx, err := db.ClaimTx(ctx, interceptor.ClaimRequest{Key: key, Fingerprint: fp,
			Scheme: interceptor.FingerprintScheme, Now: now, Lease: time.Minute, TTL: time.Hour}, false)
		if err != nil {
			t.Fatal(err)
		}
		return outcome, rec, tx
	}
	complete := func(fp interceptor.Fingerprint, now time.Time, text string) {
		t.Helper()
		outcome, rec, tx := claim(fp, now)
		if !outcome.Claimed() {
			t.Fatalf("claim at %v: %v, want it claimed", now.Sub(t0), outcome)
		}
		resp, err := anypb.New(wrapperspb.String(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx, rec.Completed(&interceptor.Result{Response: resp}), true); err != nil {
			t.Fatal(err)
		}
	}
	reads := func() int { return db.Bolt().Stats().TxN }

	complete(first, t0, "first")
	if outcome, _, _ := claim(first, t0.Add(time.Minute)); outcome != interceptor.OutcomeReplay {
		t.Fatalf("retry: %v, want a replay", outcome)
	}
	before := reads()
	if outcome, _, _ := claim(first, t0.Add(2*time.Minute)); outcome != interceptor.OutcomeReplay {
		t.Fatalf("second retry: %v, want a replay", outcome)
	}
	if outcome, _, _ := claim(second, t0.Add(2*time.Minute)); outcome != interceptor.OutcomeMismatch {
		t.Fatalf("other request: %v, want a mismatch", outcome)
	}
	if n := reads() - before; n != 0 {
		t.Errorf("retries of a kept record opened %d read transactions, want none", n)
	}

	// Expired, the key is claimed anew by another request.
	complete(second, t0.Add(2*time.Hour), "second")
	if outcome, _, _ := claim(first, t0.Add(2*time.Minute)); outcome != interceptor.OutcomeMismatch {
		t.Errorf("the first request, its clock set back, after the key was reused: %v, want a mismatch with the new record", outcome)
	}

	// Kept again, then swept.
	if outcome, _, _ := claim(second, t0.Add(2*time.Hour+time.Minute)); outcome != interceptor.OutcomeReplay {
		t.Fatalf("retry of the second: %v, want a replay", outcome)
	}
	if n, err := db.Sweep(ctx, t0.Add(4*time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1 record deleted", n, err)
	}
	if outcome, _, tx := claim(second, t0.Add(2*time.Hour+2*time.Minute)); outcome != interceptor.OutcomeFresh {
		t.Errorf("the second request, its clock set back, after its record was swept: %v, want fresh", outcome)
	} else {
		tx.Rollback()
	}
}

// A durable claim that takes over a key whose record expired forgets it.
func TestKeptRecord_ForgottenWhenADurableClaimTakesTheKey(t *testing.T) {
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	key := interceptor.RecordKey{Scope: "s", Key: "k"}
	first, second := sha256.Sum256([]byte("first")), sha256.Sum256([]byte("second"))
	t0 := time.Now()
	req := func(fp interceptor.Fingerprint, now time.Time) interceptor.ClaimRequest {
		return interceptor.ClaimRequest{Key: key, Fingerprint: fp, Scheme: interceptor.FingerprintScheme,
			Now: now, Lease: time.Minute, TTL: time.Hour}
	}
	_, rec, err := db.Claim(ctx, req(first, t0))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := anypb.New(wrapperspb.String("first"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, key, rec.Completed(&interceptor.Result{Response: resp})); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := db.Claim(ctx, req(first, t0.Add(time.Minute))); err != nil || outcome != interceptor.OutcomeReplay {
		t.Fatalf("retry: %v, %v; want a replay", outcome, err)
	}
	if outcome, _, err := db.Claim(ctx, req(second, t0.Add(2*time.Hour))); err != nil || outcome != interceptor.OutcomeFresh {
		t.Fatalf("another request after the expiry: %v, %v; want fresh", outcome, err)
	}
	if outcome, _, err := db.Claim(ctx, req(first, t0.Add(2*time.Minute))); err != nil || outcome != interceptor.OutcomeMismatch {
		t.Errorf("the first request, its clock set back, after the key was claimed again: %v, %v; want a mismatch with the claim", outcome, err)
	}
}

// A closed DB answers nothing, not even from memory.
func TestKeptRecord_NotAnsweredAfterClose(t *testing.T) {
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := interceptor.ClaimRequest{Key: interceptor.RecordKey{Scope: "s", Key: "k"}, Fingerprint: sha256.Sum256(nil),
		Scheme: interceptor.FingerprintScheme, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}
	_, rec, err := db.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := anypb.New(wrapperspb.String("done"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, req.Key, rec.Completed(&interceptor.Result{Response: resp})); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := db.Claim(ctx, req); err != nil || outcome != interceptor.OutcomeReplay {
		t.Fatalf("retry: %v, %v; want a replay", outcome, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := db.Claim(ctx, req); err == nil {
		t.Errorf("retry after Close: %v, want an error", outcome)
	}
}
