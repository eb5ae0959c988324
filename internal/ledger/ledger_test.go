package ledger

import (
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

var (
	t0  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	key = storage.RecordKey{Scope: "s", Key: "k"}
	who = storage.Claimant{ID: "me", Exclusive: true}
)

func request(body byte, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{Key: key, Fingerprint: storage.Fingerprint{body}, Now: now,
		Lease: time.Second, TTL: time.Hour}
}

// A claim held here is in flight to its own request however late its
// lease or expiry, a mismatch to another, and is never taken over.
func TestHeldClaim_InFlightUntilReleased(t *testing.T) {
	l := New(who, 0)
	outcome, claim, ok := l.Claim(request(1, t0), storage.Durable, nil, l.Version(key))
	if !ok || outcome != storage.OutcomeFresh {
		t.Fatalf("claim: %v ok %t, want fresh", outcome, ok)
	}
	for _, at := range []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Hour)} {
		if outcome, rec, ok := l.Answer(request(1, at)); !ok || outcome != storage.OutcomeInFlight || rec != claim {
			t.Errorf("at %v: %v ok %t, want in flight with the held claim", at, outcome, ok)
		}
		if outcome, _, _ := l.Answer(request(2, at)); outcome != storage.OutcomeMismatch {
			t.Errorf("at %v, another request: %v, want mismatch", at, outcome)
		}
	}
	l.Release(key, claim)
	if _, _, ok := l.Answer(request(1, t0)); ok {
		t.Fatal("answered after the claim was released")
	}
	// The stored claim now decides, by the lease rule alone.
	if outcome, _ := l.Decide(request(1, t0.Add(time.Minute)), storage.Durable, claim); outcome != storage.OutcomeTakeover {
		t.Errorf("stored claim, no longer held, lease gone: %v, want takeover", outcome)
	}
}

// A claim that ended after a record was read is seen: Claim refuses to
// decide on the old read.
func TestClaim_RefusesAReadOlderThanARelease(t *testing.T) {
	l := New(who, 0)
	_, claim, _ := l.Claim(request(1, t0), storage.Durable, nil, l.Version(key))
	version := l.Version(key) // a read begins, and finds nothing stored
	l.Release(key, claim)     // the claim commits, and its Tx ends
	if _, _, ok := l.Claim(request(1, t0), storage.Durable, nil, version); ok {
		t.Fatal("decided on a read made before a claim of the key ended")
	}
	if outcome, _, ok := l.Claim(request(1, t0), storage.Durable, nil, l.Version(key)); !ok || !outcome.Claimed() {
		t.Fatalf("fresh read: %v ok %t, want claimed", outcome, ok)
	}
}

// A lease renewed in memory decides for the stored claim it renews, and
// only for it.
func TestRenewal_DecidesForTheStoredClaim(t *testing.T) {
	l := New(storage.Claimant{ID: "me"}, 0)
	_, claim, _ := l.Claim(request(1, t0), storage.Durable, nil, l.Version(key))
	renewed := *claim
	renewed.LeaseExpiry = t0.Add(time.Minute)
	if !l.Renew(key, &renewed) {
		t.Fatal("renewal of the held claim not kept")
	}
	l.Release(key, claim) // its Tx ended without a result
	late := request(1, t0.Add(30*time.Second))
	if outcome, rec := l.Decide(late, storage.Durable, claim); outcome != storage.OutcomeInFlight || !rec.LeaseExpiry.Equal(renewed.LeaseExpiry) {
		t.Errorf("stored claim with a lease renewed in memory: %v lease %v, want in flight until %v", outcome, rec.LeaseExpiry, renewed.LeaseExpiry)
	}
	if claim.LeaseExpiry.Equal(renewed.LeaseExpiry) {
		t.Error("the stored record was changed, not a copy")
	}
	l.Settled(key)
	if outcome, _ := l.Decide(late, storage.Durable, claim); outcome != storage.OutcomeTakeover {
		t.Errorf("after Settled: %v, want takeover by the stored lease", outcome)
	}
	other := *claim
	other.Attempt++
	if l.Renew(key, &other) {
		t.Error("renewal of a claim not held was kept in memory")
	}
}

// A read that ends after its key was forgotten (its record replaced or
// swept meanwhile) keeps nothing: what it read may be gone. A record in
// flight forgets what was kept.
func TestRemember_ReadEndingAfterAForget_KeepsNothing(t *testing.T) {
	l := New(who, 0)
	done := &storage.Record{State: storage.StateCompleted, Expiry: t0.Add(time.Hour)}

	s := l.Sight(key) // a read begins
	l.Forget(key)     // the record it reads is replaced
	l.Remember(key, done, []byte("old"), s)
	if l.trusted(key, t0) != nil {
		t.Fatal("kept what a read made before the forget found")
	}
	l.Remember(key, done, []byte("new"), l.Sight(key))
	if l.trusted(key, t0) == nil {
		t.Fatal("a read after the forget kept nothing")
	}
	if rec, _ := l.Decoded(key, []byte("new")); rec == nil {
		t.Error("the kept record was not found by its encoding")
	}
	if rec, _ := l.Decoded(key, []byte("other")); rec != nil {
		t.Error("the kept record was found by another encoding")
	}
	inFlight := &storage.Record{State: storage.StateInFlight, Expiry: t0.Add(time.Hour)}
	l.Remember(key, inFlight, []byte("claim"), l.Sight(key))
	if l.trusted(key, t0) != nil {
		t.Fatal("a read that found a claim in flight left the completed record kept")
	}
	if n := l.n.Load(); n != 0 {
		t.Errorf("%d records counted kept, want 0", n)
	}
}

// A completed record answers a retry until it expires, or, with a trust
// bound, until that has passed since it was seen.
func TestTrusted_UntilExpiryOrTrustBound(t *testing.T) {
	done := &storage.Record{Fingerprint: storage.Fingerprint{1}, State: storage.StateCompleted, Expiry: t0.Add(time.Hour)}
	forever := New(who, 0)
	forever.Remember(key, done, nil, forever.Sight(key))
	if outcome, _, ok := forever.Answer(request(1, t0)); !ok || outcome != storage.OutcomeReplay {
		t.Errorf("kept record: %v ok %t, want replay", outcome, ok)
	}
	if outcome, _, ok := forever.Answer(request(2, t0)); !ok || outcome != storage.OutcomeMismatch {
		t.Errorf("kept record, another request: %v ok %t, want mismatch", outcome, ok)
	}
	if _, _, ok := forever.Answer(request(1, t0.Add(time.Hour))); ok {
		t.Error("an expired record answered")
	}

	brief := New(who, time.Millisecond)
	brief.Remember(key, done, nil, brief.Sight(key))
	time.Sleep(5 * time.Millisecond)
	if _, _, ok := brief.Answer(request(1, t0)); ok {
		t.Error("a record answered after its trust bound had passed")
	}
}

// The kept records stay within their bound, and so does their count.
func TestRemember_Bounded(t *testing.T) {
	l := New(who, 0)
	done := &storage.Record{State: storage.StateCompleted, Expiry: t0.Add(time.Hour)}
	for i := range maxCompleted + 100 {
		k := storage.RecordKey{Scope: "s", Key: string(rune(i))}
		l.Remember(k, done, []byte("x"), l.Sight(k))
	}
	n := 0
	l.completed.Range(func(any, any) bool { n++; return true })
	if n > maxCompleted || int64(n) != l.n.Load() {
		t.Errorf("%d records kept, counted %d; want at most %d, counted exactly", n, l.n.Load(), maxCompleted)
	}
	big := make([]byte, maxCompletedSize+1)
	l.Remember(key, done, big, l.Sight(key))
	if l.trusted(key, t0) != nil {
		t.Error("kept a record over the size bound")
	}
}

// HeldAfter lists held claims after a key, in order, up to a limit.
func TestHeldAfter_InOrderFromAKey(t *testing.T) {
	l := New(who, 0)
	for _, k := range []string{"c", "a", "b"} {
		req := request(1, t0)
		req.Key = storage.RecordKey{Scope: "s", Key: k}
		l.Claim(req, storage.Durable, nil, l.Version(req.Key))
	}
	got := ""
	for _, c := range l.HeldAfter(storage.RecordKey{Scope: "s", Key: "a"}, 5, storage.CompareKeys) {
		got += c.Key.Key
	}
	if got != "bc" {
		t.Errorf("held after a: %q, want %q", got, "bc")
	}
	if n := len(l.HeldAfter(storage.RecordKey{}, 2, storage.CompareKeys)); n != 2 {
		t.Errorf("limit 2: %d claims", n)
	}
}
