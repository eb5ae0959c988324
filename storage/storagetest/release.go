package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// storeResult stores result for req and returns the completed record. When
// transactional is true and s is a TxStore, it stores it as a
// transactional method would, through a claim that is not durable. Else it
// goes through Claim and Complete.
func storeResult(t *testing.T, s Store, req storage.ClaimRequest, result *storage.Result, transactional bool) *storage.Record {
	t.Helper()
	if ts, ok := s.(storage.TxStore); ok && transactional {
		rec, tx := claimTx(t, ts, req, storage.Transactional, storage.OutcomeFresh)
		done := rec.Completed(result)
		done.Durability = storage.Transactional
		if err := tx.Commit(context.Background(), done); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		return done
	}
	done := claim(t, s, req, storage.OutcomeFresh).Completed(result)
	if transactional {
		done.Durability = storage.Transactional
	}
	if err := s.Complete(context.Background(), req.Key, done); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return done
}

func testReleaseTxError(t *testing.T, open Opener) {
	s := newStore(t, open)
	r := as[storage.Releaser](t, s)
	req := request("k", "body", t0)
	done := storeResult(t, s, req, errorResult(t), true)
	claim(t, s, request("k", "body", t0.Add(time.Minute)), storage.OutcomeReplay) // kept in memory, if the store keeps any

	other := req.Key
	other.Scope = "scope-b"
	if _, err := r.Release(context.Background(), other, t0.Add(time.Minute), "oncall", storage.Seen{}); !errors.Is(err, storage.ErrNoRecord) {
		t.Fatalf("Release of the key in another scope: %v, want ErrNoRecord", err)
	}
	got, err := r.Release(context.Background(), req.Key, t0.Add(time.Minute), "oncall", storage.Seen{})
	if err != nil {
		t.Fatalf("Release of a transactional method's stored error: %v", err)
	}
	if got == nil || got.Attempt != done.Attempt || got.Token != done.Token || got.Durability != storage.Transactional {
		t.Fatalf("Release returned %+v, want the stored record %+v", got, done)
	}
	sameResult(t, got.Result, errorResult(t))
	if rec, err := s.Get(context.Background(), req.Key); err != nil || rec != nil {
		t.Fatalf("Get after Release = %+v, %v; want no record", rec, err)
	}
	if rec := claim(t, s, request("k", "body", t0.Add(2*time.Minute)), storage.OutcomeFresh); rec.Attempt != 1 {
		t.Errorf("claim after Release: attempt %d, want 1", rec.Attempt)
	}
	if _, err := r.Release(context.Background(), req.Key, t0.Add(2*time.Minute), "oncall", storage.Seen{}); !errors.Is(err, storage.ErrReleaseInFlight) {
		t.Errorf("Release of the new claim in flight: %v, want ErrReleaseInFlight", err)
	}
	if n, err := s.Sweep(context.Background(), t0.Add(ttl+time.Hour)); err != nil || n != 1 {
		t.Errorf("Sweep after Release = %d, %v; want 1, nil (the released record's index entry gone with it)", n, err)
	}
}

func testReleaseRefused(t *testing.T, open Opener) {
	s := newStore(t, open)
	r := as[storage.Releaser](t, s)
	later := t0.Add(lease / 2) // the claim in flight still holds its lease
	storeResult(t, s, request("success", "body", t0), sampleResult(t, "ok"), true)
	storeResult(t, s, request("not-transactional", "body", t0), errorResult(t), false)
	storeResult(t, s, request("expired", "body", t0), errorResult(t), true)
	claim(t, s, request("in-flight", "body", t0), storage.OutcomeFresh)
	for _, tc := range []struct {
		key  string
		at   time.Time
		want error
		then storage.Outcome
	}{
		{"never-used", later, storage.ErrNoRecord, storage.OutcomeFresh},
		{"success", later, storage.ErrReleaseSuccess, storage.OutcomeReplay},
		{"not-transactional", later, storage.ErrReleaseNotTransactional, storage.OutcomeReplay},
		{"in-flight", later, storage.ErrReleaseInFlight, storage.OutcomeInFlight},
		{"expired", t0.Add(ttl), storage.ErrNoRecord, storage.OutcomeReplay},
	} {
		rec, err := r.Release(context.Background(), storage.RecordKey{Scope: "scope-a", Key: tc.key}, tc.at, "oncall", storage.Seen{})
		if !errors.Is(err, tc.want) || rec != nil {
			t.Errorf("Release(%s) = %+v, %v; want %v", tc.key, rec, err, tc.want)
		}
		claim(t, s, request(tc.key, "body", later), tc.then) // still there, as it was
	}
	testReleasePendingTx(t, s, r)
}

// testReleasePendingTx: a transactional claim not yet committed is not
// released. A store may see it in flight, or not at all. The claim commits
// afterwards as if nothing happened.
func testReleasePendingTx(t *testing.T, s Store, r storage.Releaser) {
	ts, ok := s.(storage.TxStore)
	if !ok {
		return
	}
	req := request("pending", "body", t0)
	rec, tx := claimTx(t, ts, req, storage.Transactional, storage.OutcomeFresh)
	_, err := r.Release(context.Background(), req.Key, t0, "oncall", storage.Seen{})
	if !errors.Is(err, storage.ErrReleaseInFlight) && !errors.Is(err, storage.ErrNoRecord) {
		t.Errorf("Release of a claim not yet committed: %v, want ErrReleaseInFlight or ErrNoRecord", err)
	}
	commit(t, tx, rec, sampleResult(t, "kept"))
	sameResult(t, claim(t, s, request("pending", "body", t0.Add(time.Minute)), storage.OutcomeReplay).Result, sampleResult(t, "kept"))
}

// testReleaseSeen: a release that names the record seen deletes only
// that one. A record of another attempt or claim time, or the key's next
// record after the seen one expired, is refused with ErrReleaseChanged
// and kept, and no release is recorded.
func testReleaseSeen(t *testing.T, open Opener) {
	s := newStore(t, open)
	r := as[storage.Releaser](t, s)
	req := request("k", "body", t0)
	storeResult(t, s, req, errorResult(t), true)
	stored, err := s.Get(context.Background(), req.Key)
	if err != nil || stored == nil {
		t.Fatalf("Get = %+v, %v", stored, err)
	}
	seen := storage.Seen{Attempt: stored.Attempt, ClaimTime: stored.ClaimTime}
	refused := func(at time.Time, seen storage.Seen, what string) {
		t.Helper()
		if rec, err := r.Release(context.Background(), req.Key, at, "oncall", seen); !errors.Is(err, storage.ErrReleaseChanged) {
			t.Fatalf("Release naming %s = %+v, %v; want ErrReleaseChanged", what, rec, err)
		}
		if rec, err := s.Get(context.Background(), req.Key); err != nil || rec == nil {
			t.Fatalf("Get after a refused release = %+v, %v; want the record kept", rec, err)
		}
		if h, ok := s.(storage.ReleaseHistory); ok {
			if got, err := h.Releases(context.Background(), req.Key); err != nil || len(got) != 0 {
				t.Fatalf("Releases after a refused release = %+v, %v; want none", got, err)
			}
		}
	}
	refused(t0.Add(time.Minute), storage.Seen{Attempt: seen.Attempt + 1, ClaimTime: seen.ClaimTime}, "another attempt")
	refused(t0.Add(time.Minute), storage.Seen{Attempt: seen.Attempt, ClaimTime: seen.ClaimTime.Add(-time.Second)}, "another claim time")

	// The seen record expires, and the key's next request stores another
	// error of its own: attempt 1 again, a later claim time.
	next := request("k", "body", t0.Add(ttl+time.Minute))
	storeResult(t, s, next, errorResult(t), true)
	refused(t0.Add(ttl+2*time.Minute), seen, "the expired record, replaced")

	now, err := s.Get(context.Background(), req.Key)
	if err != nil || now == nil {
		t.Fatalf("Get = %+v, %v", now, err)
	}
	got, err := r.Release(context.Background(), req.Key, t0.Add(ttl+2*time.Minute), "oncall", storage.Seen{Attempt: now.Attempt, ClaimTime: now.ClaimTime})
	if err != nil || got.Attempt != now.Attempt || !got.ClaimTime.Equal(now.ClaimTime) {
		t.Fatalf("Release naming the record stored = %+v, %v; want it released", got, err)
	}
}
