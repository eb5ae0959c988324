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
func TestHeldClaim_InFlightUntilUnheld(t *testing.T) {
	l := New(who, 0)
	outcome, claim, ok := l.DecideAndHold(request(1, t0), storage.Durable, nil, l.Generation(key))
	if !ok || outcome != storage.OutcomeFresh {
		t.Fatalf("claim: %v ok %t, want fresh", outcome, ok)
	}
	for _, at := range []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Hour)} {
		if outcome, rec, ok := l.Lookup(request(1, at), nil); !ok || outcome != storage.OutcomeInFlight || rec != claim {
			t.Errorf("at %v: %v ok %t, want in flight with the held claim", at, outcome, ok)
		}
		if outcome, _, _ := l.Lookup(request(2, at), nil); outcome != storage.OutcomeMismatch {
			t.Errorf("at %v, another request: %v, want mismatch", at, outcome)
		}
	}
	l.Unhold(key, claim)
	if _, _, ok := l.Lookup(request(1, t0), nil); ok {
		t.Fatal("answered after the claim was unheld")
	}
	// The stored claim now decides, by the lease rule alone.
	if outcome, _ := l.Decide(request(1, t0.Add(time.Minute)), storage.Durable, claim); outcome != storage.OutcomeTakeover {
		t.Errorf("stored claim, no longer held, lease gone: %v, want takeover", outcome)
	}
}

// A claim that ended after a record was read is seen: DecideAndHold
// refuses to decide on the old read. A read under the store's write lock
// is current, and is decided on.
func TestDecideAndHold_RefusesAReadOlderThanAnUnhold(t *testing.T) {
	l := New(who, 0)
	_, claim, _ := l.DecideAndHold(request(1, t0), storage.Durable, nil, l.Generation(key))
	g := l.Generation(key) // a read begins, and finds nothing stored
	l.Unhold(key, claim)   // the claim commits, and its Tx ends
	if _, _, ok := l.DecideAndHold(request(1, t0), storage.Durable, nil, g); ok {
		t.Fatal("decided on a read made before a claim of the key ended")
	}
	if outcome, _, ok := l.DecideAndHold(request(1, t0), storage.Durable, nil, UnderLock); !ok || !outcome.Claimed() {
		t.Fatalf("read under the write lock: %v ok %t, want claimed", outcome, ok)
	}
}

// The generation moves when a held claim ends and when a record is
// forgotten, and only then: a read taken before either is stale.
func TestGeneration_MovesOnUnholdAndOnForget(t *testing.T) {
	l := New(who, 0)
	g := l.Generation(key)
	claim := &storage.Record{State: storage.StateInFlight}
	l.Unhold(key, claim)         // not held: nothing ends
	l.Remember(key, claim, 0, g) // a read: it changes nothing
	l.Hold(key, claim)           // a claim begins: the record is as read
	if l.Generation(key) != g {
		t.Fatal("the generation moved though no claim ended and nothing was forgotten")
	}
	l.Unhold(key, claim)
	if l.Generation(key) == g {
		t.Fatal("the generation did not move as a held claim ended")
	}
	g = l.Generation(key)
	l.Forget(key)
	if l.Generation(key) == g {
		t.Fatal("the generation did not move as the record was forgotten")
	}
}

// Lookup never claims. Whatever it is given, a fresh key, an expired
// record or a claim whose lease is gone, it answers or says it cannot,
// and holds nothing.
func TestLookup_NeverClaims(t *testing.T) {
	l := New(storage.Claimant{ID: "me"}, 0)
	expired := &storage.Record{Fingerprint: storage.Fingerprint{1}, State: storage.StateCompleted, Expiry: t0}
	leaseGone := &storage.Record{Fingerprint: storage.Fingerprint{1}, State: storage.StateInFlight, Attempt: 1,
		LeaseExpiry: t0, Expiry: t0.Add(time.Hour)}
	for _, stored := range []*storage.Record{nil, expired, leaseGone} {
		if outcome, rec, ok := l.Lookup(request(1, t0.Add(time.Minute)), stored); ok || rec != nil || outcome != 0 {
			t.Errorf("stored %+v: %v %v ok %t, want no answer", stored, outcome, rec, ok)
		}
	}
	if l.Holds(key) {
		t.Error("Lookup held a claim")
	}
	live := &storage.Record{Fingerprint: storage.Fingerprint{1}, State: storage.StateCompleted, Expiry: t0.Add(time.Hour)}
	if outcome, _, ok := l.Lookup(request(1, t0), live); !ok || outcome != storage.OutcomeReplay {
		t.Errorf("a live completed record read: %v ok %t, want replay", outcome, ok)
	}
}

// A lease renewed in memory decides for the stored claim it renews, and
// only for it.
func TestRenewal_DecidesForTheStoredClaim(t *testing.T) {
	l := New(storage.Claimant{ID: "me"}, 0)
	_, claim, _ := l.DecideAndHold(request(1, t0), storage.Durable, nil, l.Generation(key))
	renewed := *claim
	renewed.LeaseExpiry = t0.Add(time.Minute)
	if !l.RenewHeld(key, &renewed) {
		t.Fatal("renewal of the held claim not kept")
	}
	l.Unhold(key, claim) // its Tx ended without a result
	late := request(1, t0.Add(30*time.Second))
	if outcome, rec := l.Decide(late, storage.Durable, claim); outcome != storage.OutcomeInFlight || !rec.LeaseExpiry.Equal(renewed.LeaseExpiry) {
		t.Errorf("stored claim with a lease renewed in memory: %v lease %v, want in flight until %v", outcome, rec.LeaseExpiry, renewed.LeaseExpiry)
	}
	if claim.LeaseExpiry.Equal(renewed.LeaseExpiry) {
		t.Error("the stored record was changed, not a copy")
	}
	l.DropRenewals(key)
	if outcome, _ := l.Decide(late, storage.Durable, claim); outcome != storage.OutcomeTakeover {
		t.Errorf("after Settled: %v, want takeover by the stored lease", outcome)
	}
	other := *claim
	other.Attempt++
	if l.RenewHeld(key, &other) {
		t.Error("renewal of a claim not held was kept in memory")
	}
}

// A read that ends after its key was forgotten (its record replaced or
// swept meanwhile) keeps nothing: what it read may be gone. A record in
// flight forgets what was kept.
func TestRemember_ReadEndingAfterAForget_KeepsNothing(t *testing.T) {
	l := New(who, 0)
	done := &storage.Record{State: storage.StateCompleted, Expiry: t0.Add(time.Hour)}

	g := l.Generation(key) // a read begins
	l.Forget(key)          // the record it reads is replaced
	l.Remember(key, done, 3, g)
	if l.trusted(key, t0) != nil {
		t.Fatal("kept what a read made before the forget found")
	}
	l.Remember(key, done, 3, l.Generation(key))
	if l.trusted(key, t0) == nil {
		t.Fatal("a read after the forget kept nothing")
	}
	inFlight := &storage.Record{State: storage.StateInFlight, Expiry: t0.Add(time.Hour)}
	l.Remember(key, inFlight, 5, l.Generation(key))
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
	forever.Remember(key, done, 0, forever.Generation(key))
	if outcome, _, ok := forever.Lookup(request(1, t0), nil); !ok || outcome != storage.OutcomeReplay {
		t.Errorf("kept record: %v ok %t, want replay", outcome, ok)
	}
	if outcome, _, ok := forever.Lookup(request(2, t0), nil); !ok || outcome != storage.OutcomeMismatch {
		t.Errorf("kept record, another request: %v ok %t, want mismatch", outcome, ok)
	}
	if _, _, ok := forever.Lookup(request(1, t0.Add(time.Hour)), nil); ok {
		t.Error("an expired record answered")
	}

	brief := New(who, time.Millisecond)
	brief.Remember(key, done, 0, brief.Generation(key))
	time.Sleep(5 * time.Millisecond)
	if _, _, ok := brief.Lookup(request(1, t0), nil); ok {
		t.Error("a record answered after its trust bound had passed")
	}
}

// The kept records stay within their bound, and so does their count.
func TestRemember_Bounded(t *testing.T) {
	l := New(who, 0)
	done := &storage.Record{State: storage.StateCompleted, Expiry: t0.Add(time.Hour)}
	for i := range maxCompleted + 100 {
		k := storage.RecordKey{Scope: "s", Key: string(rune(i))}
		l.Remember(k, done, 1, l.Generation(k))
	}
	n := 0
	l.completed.Range(func(any, any) bool { n++; return true })
	if n > maxCompleted || int64(n) != l.n.Load() {
		t.Errorf("%d records kept, counted %d; want at most %d, counted exactly", n, l.n.Load(), maxCompleted)
	}
	l.Remember(key, done, maxCompletedSize+1, l.Generation(key))
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
		l.DecideAndHold(req, storage.Durable, nil, l.Generation(req.Key))
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
