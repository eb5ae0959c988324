package storagetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/storage"
)

// testInFlightDurability: a claim is listed in flight with the durability
// it was made with. A transactional claim not yet committed says
// Transactional; a durable one, made through ClaimTx or Claim, Durable.
func testInFlightDurability(t *testing.T, open Opener) {
	s := newStore(t, open)
	ts, l := as[storage.TxStore](t, s), as[storage.InFlightLister](t, s)
	claimTx(t, ts, request("held-transactional", "body", t0), storage.Transactional, storage.OutcomeFresh)
	claimTx(t, ts, request("held-durable", "body", t0), storage.Durable, storage.OutcomeFresh)
	claim(t, s, request("claimed", "body", t0), storage.OutcomeFresh)
	_, records := listInFlight(t, l, 10)
	for key, want := range map[string]storage.Durability{
		"held-transactional": storage.Transactional,
		"held-durable":       storage.Durable,
		"claimed":            storage.Durable,
	} {
		rec := records["scope-a/"+key]
		if rec == nil {
			t.Errorf("InFlight did not list %s: %v", key, records)
			continue
		}
		if rec.Durability != want {
			t.Errorf("InFlight lists %s as %v, want %v", key, rec.Durability, want)
		}
	}
}

// releases returns key's release history, failing the test on an error.
func releases(t *testing.T, h storage.ReleaseHistory, key storage.RecordKey) []storage.ReleaseEntry {
	t.Helper()
	got, err := h.Releases(context.Background(), key)
	if err != nil {
		t.Fatalf("Releases(%v): %v", key, err)
	}
	return got
}

// release releases key at now by by, failing the test on an error.
func release(t *testing.T, r storage.Releaser, key storage.RecordKey, now time.Time, by string) *storage.Record {
	t.Helper()
	rec, err := r.Release(context.Background(), key, now, by, storage.Seen{})
	if err != nil {
		t.Fatalf("Release(%v at %v by %s): %v", key, now, by, err)
	}
	return rec
}

// checkEntry fails the test unless e is the release of done at at by by.
func checkEntry(t *testing.T, e storage.ReleaseEntry, done *storage.Record, at time.Time, by string) {
	t.Helper()
	if !e.Time.Equal(at) || e.By != by || e.Attempt != done.Attempt ||
		e.Code != int32(codes.InvalidArgument) || e.Message != "bad amount" || !e.Expiry.Equal(storage.ReleaseExpiry(done, at)) {
		t.Errorf("release entry = %+v, want at %v by %s, attempt %d, code %d, %q, kept until %v",
			e, at, by, done.Attempt, codes.InvalidArgument, "bad amount", storage.ReleaseExpiry(done, at))
	}
}

// testReleaseHistory: a release leaves one entry naming the operator and
// what was released, in the key's history alone. A second release of the
// key comes after the first.
func testReleaseHistory(t *testing.T, open Opener) {
	s := newStore(t, open)
	r, h := as[storage.Releaser](t, s), as[storage.ReleaseHistory](t, s)
	req := request("k", "body", t0)
	if got := releases(t, h, req.Key); len(got) != 0 {
		t.Fatalf("Releases of a key never released = %+v, want none", got)
	}
	done := storeResult(t, s, req, errorResult(t), true)
	first := t0.Add(time.Minute)
	release(t, r, req.Key, first, "alice-oncall")
	got := releases(t, h, req.Key)
	if len(got) != 1 {
		t.Fatalf("Releases after one release = %+v, want one entry", got)
	}
	checkEntry(t, got[0], done, first, "alice-oncall")
	other := req.Key
	other.Scope = "scope-b"
	if got := releases(t, h, other); len(got) != 0 {
		t.Errorf("Releases of the key in another scope = %+v, want none", got)
	}
	if got := releases(t, h, storage.RecordKey{Scope: "scope-a", Key: "k2"}); len(got) != 0 {
		t.Errorf("Releases of another key = %+v, want none", got)
	}

	again := request("k", "body", t0.Add(2*time.Minute))
	done2 := storeResult(t, s, again, errorResult(t), true)
	second := t0.Add(3 * time.Minute)
	release(t, r, req.Key, second, "bob")
	got = releases(t, h, req.Key)
	if len(got) != 2 {
		t.Fatalf("Releases after two releases = %+v, want two entries", got)
	}
	checkEntry(t, got[0], done, first, "alice-oncall")
	checkEntry(t, got[1], done2, second, "bob")
}

// testReleaseHistoryRefused: a refused release leaves no entry.
func testReleaseHistoryRefused(t *testing.T, open Opener) {
	s := newStore(t, open)
	r, h := as[storage.Releaser](t, s), as[storage.ReleaseHistory](t, s)
	later := t0.Add(lease / 2)
	storeResult(t, s, request("success", "body", t0), sampleResult(t, "ok"), true)
	storeResult(t, s, request("not-transactional", "body", t0), errorResult(t), false)
	storeResult(t, s, request("expired", "body", t0), errorResult(t), true)
	claim(t, s, request("in-flight", "body", t0), storage.OutcomeFresh)
	for key, at := range map[string]time.Time{
		"never-used": later, "success": later, "not-transactional": later, "in-flight": later, "expired": t0.Add(ttl),
	} {
		k := storage.RecordKey{Scope: "scope-a", Key: key}
		if _, err := r.Release(context.Background(), k, at, "oncall", storage.Seen{}); err == nil {
			t.Fatalf("Release(%s) succeeded, want a refusal", key)
		}
		if got := releases(t, h, k); len(got) != 0 {
			t.Errorf("Releases of %s after a refused release = %+v, want none", key, got)
		}
	}
}

// testReleaseHistorySwept: an entry is kept until storage.ReleaseExpiry,
// after the released record's own expiry, and then swept. So the history
// is bounded.
func testReleaseHistorySwept(t *testing.T, open Opener) {
	s := newStore(t, open)
	r, h := as[storage.Releaser](t, s), as[storage.ReleaseHistory](t, s)
	req := request("k", "body", t0)
	done := storeResult(t, s, req, errorResult(t), true)
	at := t0.Add(time.Minute)
	release(t, r, req.Key, at, "oncall")
	expiry := storage.ReleaseExpiry(done, at)
	if !expiry.After(done.Expiry) {
		t.Fatalf("ReleaseExpiry = %v, want after the record's expiry %v", expiry, done.Expiry)
	}
	if _, err := s.Sweep(context.Background(), done.Expiry); err != nil {
		t.Fatal(err)
	}
	if got := releases(t, h, req.Key); len(got) != 1 {
		t.Fatalf("Releases after a sweep at the record's expiry = %+v, want the entry kept", got)
	}
	if _, err := s.Sweep(context.Background(), expiry.Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := releases(t, h, req.Key); len(got) != 1 {
		t.Fatalf("Releases after a sweep before the entry's expiry = %+v, want the entry kept", got)
	}
	if n, err := s.Sweep(context.Background(), expiry); err != nil || n != 0 {
		t.Fatalf("Sweep at the entry's expiry = %d, %v; want 0 records, nil", n, err)
	}
	if got := releases(t, h, req.Key); len(got) != 0 {
		t.Fatalf("Releases after a sweep at the entry's expiry = %+v, want none", got)
	}
}

// testReleaseHistoryReopen: a reopened store keeps its release history.
func testReleaseHistoryReopen(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir)
	as[storage.ReleaseHistory](t, s) // skips at once on a store without one
	req := request("k", "body", t0)
	done := storeResult(t, s, req, errorResult(t), true)
	at := t0.Add(time.Minute)
	release(t, as[storage.Releaser](t, s), req.Key, at, "oncall")
	s = reopen(t, open, dir, s)
	got := releases(t, as[storage.ReleaseHistory](t, s), req.Key)
	if len(got) != 1 {
		t.Fatalf("Releases after reopening = %+v, want the one entry", got)
	}
	checkEntry(t, got[0], done, at, "oncall")
}

// testFindKey: a key's records are found in every scope, ordered by
// scope, up to the limit. Other keys, and keys that only share a prefix,
// are not.
func testFindKey(t *testing.T, open Opener) {
	s := newStore(t, open)
	f := as[storage.KeyFinder](t, s)
	for _, scope := range []string{"scope-c", "scope-a", "scope-b"} {
		for _, key := range []string{"k", "k-other", "kk", "other"} {
			req := request(key, "body", t0)
			req.Key.Scope = scope
			if scope == "scope-b" && key == "k" {
				complete(t, s, req, claim(t, s, req, storage.OutcomeFresh), sampleResult(t, "b"))
				continue
			}
			claim(t, s, req, storage.OutcomeFresh)
		}
	}
	find := func(key string, limit int) []string { return findScopes(t, f, key, limit) }
	if got, want := find("k", 10), []string{"scope-a", "scope-b", "scope-c"}; !slices.Equal(got, want) {
		t.Errorf("FindKey(k, 10) found in %v, want %v", got, want)
	}
	if got, want := find("k", 2), []string{"scope-a", "scope-b"}; !slices.Equal(got, want) {
		t.Errorf("FindKey(k, 2) found in %v, want %v", got, want)
	}
	// Scopes of other lengths, more than twice the limits below: found in
	// the order of their names, whatever order a store keeps them in.
	scopes := []string{"zz-long-scope", "b", "scope-a", "y", "a-long-scope"}
	for _, scope := range scopes {
		req := request("j", "body", t0)
		req.Key.Scope = scope
		claim(t, s, req, storage.OutcomeFresh)
	}
	slices.Sort(scopes)
	for _, limit := range []int{1, 2, 10} {
		if got, want := find("j", limit), scopes[:min(limit, len(scopes))]; !slices.Equal(got, want) {
			t.Errorf("FindKey(j, %d) found in %v, want %v", limit, got, want)
		}
	}
	if got := find("missing", 10); len(got) != 0 {
		t.Errorf("FindKey(missing) found in %v, want none", got)
	}
	found, err := f.FindKey(context.Background(), "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	if rec := found[1].Record; rec.State != storage.StateCompleted {
		t.Errorf("FindKey(k) in scope-b: state %v, want the completed record", rec.State)
	} else {
		sameResult(t, rec.Result, sampleResult(t, "b"))
	}
	if _, err := f.FindKey(canceled(), "k", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("FindKey with a canceled context: %v, want context.Canceled", err)
	}
}

// findScopes returns the scopes in which FindKey found key, in its order.
func findScopes(t *testing.T, f storage.KeyFinder, key string, limit int) []string {
	t.Helper()
	found, err := f.FindKey(context.Background(), key, limit)
	if err != nil {
		t.Fatalf("FindKey(%q, %d): %v", key, limit, err)
	}
	var names []string
	for _, c := range found {
		if c.Key.Key != key || c.Record == nil {
			t.Fatalf("FindKey(%q) returned %+v", key, c)
		}
		names = append(names, c.Key.Scope)
	}
	return names
}
