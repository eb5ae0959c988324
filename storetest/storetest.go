// Package storetest is the conformance suite every interceptor.Store must
// pass. A backend's test calls RunTests with a function that opens it:
//
//	func TestConformance(t *testing.T) {
//		storetest.RunTests(t, func(t *testing.T, dir string) storetest.Store {
//			db, err := mystore.Open(dir)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return db
//		})
//	}
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/interceptor"
)

// Store is what the suite tests: the interceptor's Store plus the upkeep a
// backend offers its operator.
type Store interface {
	interceptor.Store
	// Sweep deletes the records expired at now and returns how many.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// Claimant is who this opening of the store claims as: the suite
	// checks orphan takeover for an exclusive store, the lease rule for a
	// shared one.
	Claimant() interceptor.Claimant
	// Close releases the store; opening the same dir again must find every
	// record it held.
	Close() error
}

// Opener opens the store kept in dir, a directory of its own for each test.
// Opening a dir again after Close reopens the same data. The suite closes
// every store it opens.
type Opener func(t *testing.T, dir string) Store

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// RunTests runs the conformance suite against the stores open returns.
func RunTests(t *testing.T, open Opener) {
	tests := []struct {
		name string
		run  func(t *testing.T, open Opener)
	}{
		{"Claim_NewKey_IsFresh", testFresh},
		{"Claim_WhileLeaseLive_IsInFlight", testInFlight},
		{"Claim_AfterComplete_ReplaysWholeResult", testReplay},
		{"Claim_OtherFingerprint_IsMismatch", testMismatch},
		{"Claim_AfterLeaseExpiry_TakesOverWithNextAttempt", testTakeover},
		{"Complete_SupersededAttempt_IsRefused", testSuperseded},
		{"Renew_ExtendsLease", testRenew},
		{"Renew_SupersededOrCompleted_IsRefused", testRenewRefused},
		{"Complete_UnknownOrReplacedClaim_IsRefused", testCompleteReplaced},
		{"Claim_AfterRecordExpiry_IsFresh", testExpiry},
		{"Claim_Concurrent_ExactlyOneFresh", testConcurrent},
		{"Claim_SameKeyOtherScope_IsIsolated", testScopes},
		{"Sweep_DeletesExpiredKeepsLive", testSweep},
		{"Reopen_KeepsRecords", testReopen},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

func openStore(t *testing.T, open Opener, dir string) Store {
	t.Helper()
	s := open(t, dir)
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T, open Opener) Store { return openStore(t, open, t.TempDir()) }

func fingerprint(s string) interceptor.Fingerprint { return sha256.Sum256([]byte(s)) }

func request(key string, fp string, now time.Time) interceptor.ClaimRequest {
	return interceptor.ClaimRequest{
		Key:         interceptor.RecordKey{Scope: "scope-a", Key: key},
		Fingerprint: fingerprint(fp),
		Scheme:      interceptor.FingerprintScheme,
		Now:         now, Lease: lease, TTL: ttl,
	}
}

func claim(t *testing.T, s Store, req interceptor.ClaimRequest, want interceptor.Outcome) *interceptor.Record {
	t.Helper()
	got, rec, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%q at %v): %v", req.Key.Key, req.Now, err)
	}
	if got != want {
		t.Fatalf("Claim(%q at %v) = %v, want %v", req.Key.Key, req.Now, got, want)
	}
	if rec == nil {
		t.Fatalf("Claim(%q) returned no record", req.Key.Key)
	}
	return rec
}

// sampleResult is a result with every part a store must keep.
func sampleResult(t *testing.T, text string) *interceptor.Result {
	t.Helper()
	resp, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		t.Fatal(err)
	}
	return &interceptor.Result{
		Response: resp,
		Header:   metadata.Pairs("x-request", text, "x-bin", "\x00\xff"),
		Trailer:  metadata.Pairs("x-trailer", "a", "x-trailer", "b"),
	}
}

func errorResult(t *testing.T) *interceptor.Result {
	t.Helper()
	detail, err := anypb.New(wrapperspb.String("detail"))
	if err != nil {
		t.Fatal(err)
	}
	return &interceptor.Result{Status: &spb.Status{
		Code: int32(codes.InvalidArgument), Message: "bad amount", Details: []*anypb.Any{detail},
	}}
}

func complete(t *testing.T, s Store, req interceptor.ClaimRequest, claim *interceptor.Record, result *interceptor.Result) *interceptor.Record {
	t.Helper()
	done := claim.Completed(result)
	if err := s.Complete(context.Background(), req.Key, done); err != nil {
		t.Fatalf("Complete(%q, attempt %d): %v", req.Key.Key, claim.Attempt, err)
	}
	return done
}

func sameResult(t *testing.T, got, want *interceptor.Result) {
	t.Helper()
	if got == nil {
		t.Fatal("record has no result")
	}
	if !proto.Equal(got.Response, want.Response) || !proto.Equal(got.Status, want.Status) {
		t.Errorf("result = %v / %v, want %v / %v", got.Response, got.Status, want.Response, want.Status)
	}
	if fmt.Sprint(got.Header) != fmt.Sprint(want.Header) || fmt.Sprint(got.Trailer) != fmt.Sprint(want.Trailer) {
		t.Errorf("metadata = %v / %v, want %v / %v", got.Header, got.Trailer, want.Header, want.Trailer)
	}
}

func testFresh(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	rec := claim(t, s, req, interceptor.OutcomeFresh)
	if rec.Attempt != 1 || rec.State != interceptor.StateInFlight || rec.Fingerprint != req.Fingerprint || rec.Scheme != req.Scheme {
		t.Errorf("fresh claim = attempt %d state %v, want attempt 1, in flight, with the request's fingerprint and scheme", rec.Attempt, rec.State)
	}
	if !rec.LeaseExpiry.Equal(t0.Add(lease)) || !rec.Expiry.Equal(t0.Add(ttl)) {
		t.Errorf("lease %v expiry %v, want %v and %v", rec.LeaseExpiry, rec.Expiry, t0.Add(lease), t0.Add(ttl))
	}
}

func testInFlight(t *testing.T, open Opener) {
	s := newStore(t, open)
	claim(t, s, request("k", "body", t0), interceptor.OutcomeFresh)
	rec := claim(t, s, request("k", "body", t0.Add(lease-time.Millisecond)), interceptor.OutcomeInFlight)
	if !rec.LeaseExpiry.Equal(t0.Add(lease)) {
		t.Errorf("in-flight record's lease = %v, want %v", rec.LeaseExpiry, t0.Add(lease))
	}
}

func testReplay(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name   string
		result func(*testing.T) *interceptor.Result
	}{
		{"Response", func(t *testing.T) *interceptor.Result { return sampleResult(t, "one") }},
		{"Status", errorResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, open)
			req := request("k", "body", t0)
			want := tc.result(t)
			complete(t, s, req, claim(t, s, req, interceptor.OutcomeFresh), want)
			rec := claim(t, s, request("k", "body", t0.Add(time.Hour)), interceptor.OutcomeReplay)
			if rec.State != interceptor.StateCompleted || rec.Attempt != 1 {
				t.Errorf("replayed record: state %v attempt %d, want completed, 1", rec.State, rec.Attempt)
			}
			sameResult(t, rec.Result, want)
		})
	}
}

func testMismatch(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	first := claim(t, s, req, interceptor.OutcomeFresh)
	rec := claim(t, s, request("k", "other body", t0), interceptor.OutcomeMismatch)
	if rec.Fingerprint != req.Fingerprint {
		t.Errorf("mismatch reports fingerprint %v, want the stored %v", rec.Fingerprint, req.Fingerprint)
	}
	complete(t, s, req, first, sampleResult(t, "one"))
	claim(t, s, request("k", "other body", t0.Add(time.Hour)), interceptor.OutcomeMismatch)
	// The same fingerprint under another scheme cannot be compared.
	otherScheme := request("k", "body", t0.Add(time.Hour))
	otherScheme.Scheme = "another scheme"
	claim(t, s, otherScheme, interceptor.OutcomeMismatch)
	// The rejection stored nothing: the original still replays.
	sameResult(t, claim(t, s, request("k", "body", t0.Add(time.Hour)), interceptor.OutcomeReplay).Result, sampleResult(t, "one"))
}

func testTakeover(t *testing.T, open Opener) {
	s := newStore(t, open)
	first := claim(t, s, request("k", "body", t0), interceptor.OutcomeFresh)
	second := claim(t, s, request("k", "body", t0.Add(lease)), interceptor.OutcomeTakeover)
	if second.Attempt != 2 || second.Token == first.Token {
		t.Errorf("takeover: attempt %d (want 2), token changed %t (want true)", second.Attempt, second.Token != first.Token)
	}
	if !second.LeaseExpiry.Equal(t0.Add(2*lease)) || !second.Expiry.Equal(first.Expiry) {
		t.Errorf("takeover: lease %v expiry %v, want %v and the first claim's %v", second.LeaseExpiry, second.Expiry, t0.Add(2*lease), first.Expiry)
	}
	claim(t, s, request("k", "body", t0.Add(lease+time.Second)), interceptor.OutcomeInFlight)
	third := claim(t, s, request("k", "body", t0.Add(2*lease)), interceptor.OutcomeTakeover)
	if third.Attempt != 3 {
		t.Errorf("second takeover: attempt %d, want 3", third.Attempt)
	}
}

func testSuperseded(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	first := claim(t, s, req, interceptor.OutcomeFresh)
	second := claim(t, s, request("k", "body", t0.Add(lease)), interceptor.OutcomeTakeover)

	done := first.Completed(sampleResult(t, "stale"))
	if err := s.Complete(context.Background(), req.Key, done); !errors.Is(err, interceptor.ErrSuperseded) {
		t.Fatalf("Complete(attempt 1 after takeover) = %v, want ErrSuperseded", err)
	}
	complete(t, s, req, second, sampleResult(t, "current"))
	// Once completed, even the current attempt cannot write again.
	if err := s.Complete(context.Background(), req.Key, done); !errors.Is(err, interceptor.ErrSuperseded) {
		t.Fatalf("Complete(attempt 1 after completion) = %v, want ErrSuperseded", err)
	}
	rec := claim(t, s, request("k", "body", t0.Add(2*lease)), interceptor.OutcomeReplay)
	sameResult(t, rec.Result, sampleResult(t, "current"))
}

func testRenew(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	rec := claim(t, s, req, interceptor.OutcomeFresh)
	renewed := *rec
	renewed.LeaseExpiry = t0.Add(3 * lease)
	if err := s.Renew(context.Background(), req.Key, &renewed); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	// Past the first lease, the renewed claim holds.
	got := claim(t, s, request("k", "body", t0.Add(2*lease)), interceptor.OutcomeInFlight)
	if !got.LeaseExpiry.Equal(renewed.LeaseExpiry) {
		t.Errorf("lease after renewal = %v, want %v", got.LeaseExpiry, renewed.LeaseExpiry)
	}
	claim(t, s, request("k", "body", t0.Add(3*lease)), interceptor.OutcomeTakeover)
}

func testRenewRefused(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	first := claim(t, s, req, interceptor.OutcomeFresh)
	claim(t, s, request("k", "body", t0.Add(lease)), interceptor.OutcomeTakeover)
	stale := *first
	stale.LeaseExpiry = t0.Add(5 * lease)
	if err := s.Renew(context.Background(), req.Key, &stale); !errors.Is(err, interceptor.ErrSuperseded) {
		t.Errorf("Renew(superseded attempt) = %v, want ErrSuperseded", err)
	}
	// The refused renewal changed nothing: the second attempt's lease, not
	// the stale one's, decides.
	claim(t, s, request("k", "body", t0.Add(2*lease)), interceptor.OutcomeTakeover)

	s2 := newStore(t, open)
	rec := claim(t, s2, req, interceptor.OutcomeFresh)
	complete(t, s2, req, rec, sampleResult(t, "done"))
	late := *rec
	late.LeaseExpiry = t0.Add(5 * lease)
	if err := s2.Renew(context.Background(), req.Key, &late); !errors.Is(err, interceptor.ErrSuperseded) {
		t.Errorf("Renew(completed claim) = %v, want ErrSuperseded", err)
	}
	sameResult(t, claim(t, s2, request("k", "body", t0.Add(time.Hour)), interceptor.OutcomeReplay).Result, sampleResult(t, "done"))
}

func testCompleteReplaced(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	old := claim(t, s, req, interceptor.OutcomeFresh)
	// The record expires and the key is claimed afresh, attempt 1 again:
	// the old worker must still be refused.
	claim(t, s, request("k", "body", t0.Add(ttl)), interceptor.OutcomeFresh)
	done := old.Completed(sampleResult(t, "stale"))
	if err := s.Complete(context.Background(), req.Key, done); !errors.Is(err, interceptor.ErrSuperseded) {
		t.Errorf("Complete(claim of an expired record) = %v, want ErrSuperseded", err)
	}
	other := request("never-claimed", "body", t0)
	if err := s.Complete(context.Background(), other.Key, done); !errors.Is(err, interceptor.ErrSuperseded) {
		t.Errorf("Complete(unknown key) = %v, want ErrSuperseded", err)
	}
}

func testExpiry(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	complete(t, s, req, claim(t, s, req, interceptor.OutcomeFresh), sampleResult(t, "one"))
	claim(t, s, request("k", "body", t0.Add(ttl-time.Nanosecond)), interceptor.OutcomeReplay)
	// An expired record counts as absent, whatever the fingerprint.
	rec := claim(t, s, request("k", "other body", t0.Add(ttl)), interceptor.OutcomeFresh)
	if rec.Attempt != 1 || !rec.Expiry.Equal(t0.Add(2*ttl)) {
		t.Errorf("claim after expiry: attempt %d expiry %v, want 1 and %v", rec.Attempt, rec.Expiry, t0.Add(2*ttl))
	}
}

func testConcurrent(t *testing.T, open Opener) {
	s := newStore(t, open)
	const n = 100
	var wg sync.WaitGroup
	outcomes := make(chan interceptor.Outcome, n)
	for range n {
		wg.Go(func() {
			got, _, err := s.Claim(context.Background(), request("k", "body", t0))
			if err != nil {
				t.Error(err)
			}
			outcomes <- got
		})
	}
	wg.Wait()
	close(outcomes)
	counts := map[interceptor.Outcome]int{}
	for o := range outcomes {
		counts[o]++
	}
	if counts[interceptor.OutcomeFresh] != 1 || counts[interceptor.OutcomeInFlight] != n-1 {
		t.Errorf("%d concurrent claims: %v, want 1 fresh and %d in flight", n, counts, n-1)
	}
}

func testScopes(t *testing.T, open Opener) {
	s := newStore(t, open)
	a := request("k", "body", t0)
	b := a
	b.Key.Scope = "scope-b"
	complete(t, s, a, claim(t, s, a, interceptor.OutcomeFresh), sampleResult(t, "a"))
	claim(t, s, b, interceptor.OutcomeFresh)
	// Scopes that would collide if their parts were simply concatenated.
	c := a
	c.Key = interceptor.RecordKey{Scope: "scope-ak", Key: ""}
	d := a
	d.Key = interceptor.RecordKey{Scope: "scope-a", Key: "k"}
	claim(t, s, c, interceptor.OutcomeFresh)
	sameResult(t, claim(t, s, d, interceptor.OutcomeReplay).Result, sampleResult(t, "a"))
}

func testSweep(t *testing.T, open Opener) {
	s := newStore(t, open)
	const expired, live = 25, 5
	for i := range expired {
		req := request(fmt.Sprintf("old-%d", i), "body", t0)
		rec := claim(t, s, req, interceptor.OutcomeFresh)
		if i%2 == 0 {
			complete(t, s, req, rec, sampleResult(t, "old"))
		}
	}
	later := t0.Add(time.Hour)
	for i := range live {
		req := request(fmt.Sprintf("new-%d", i), "body", later)
		complete(t, s, req, claim(t, s, req, interceptor.OutcomeFresh), sampleResult(t, "new"))
	}
	// A key that expired and was claimed again is live, not swept.
	claim(t, s, request("old-0", "body", t0.Add(ttl)), interceptor.OutcomeFresh)

	n, err := s.Sweep(context.Background(), t0.Add(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if n != expired-1 { // old-0 was replaced by its new claim, not swept
		t.Errorf("Sweep removed %d records, want %d", n, expired-1)
	}
	for i := range live {
		claim(t, s, request(fmt.Sprintf("new-%d", i), "body", t0.Add(ttl)), interceptor.OutcomeReplay)
	}
	claim(t, s, request("old-0", "body", t0.Add(ttl)), interceptor.OutcomeInFlight)
	if n, err := s.Sweep(context.Background(), t0.Add(ttl)); err != nil || n != 0 {
		t.Errorf("second Sweep = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.Sweep(context.Background(), t0.Add(3*ttl)); err != nil || n != live+1 {
		t.Errorf("Sweep after everything expired = %d, %v; want %d, nil", n, err, live+1)
	}
}

func testReopen(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir)
	done := request("done", "body", t0)
	complete(t, s, done, claim(t, s, done, interceptor.OutcomeFresh), sampleResult(t, "kept"))
	running := request("running", "body", t0)
	runningClaim := claim(t, s, running, interceptor.OutcomeFresh)
	if runningClaim.Owner != s.Claimant().ID {
		t.Errorf("claim owner %q, want the store's claimant %q", runningClaim.Owner, s.Claimant().ID)
	}
	old := s.Claimant()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, open, dir)
	if s.Claimant().ID == old.ID {
		t.Errorf("reopened store claims as %q again, want a new ID", old.ID)
	}
	sameResult(t, claim(t, s, request("done", "body", t0), interceptor.OutcomeReplay).Result, sampleResult(t, "kept"))
	if s.Claimant().Exclusive {
		// The earlier opening's claim is an orphan: taken over at once.
		rec := claim(t, s, request("running", "body", t0), interceptor.OutcomeTakeover)
		if rec.Attempt != 2 || rec.Owner != s.Claimant().ID {
			t.Errorf("orphan takeover: attempt %d owner %q, want 2 and %q", rec.Attempt, rec.Owner, s.Claimant().ID)
		}
		done := runningClaim.Completed(sampleResult(t, "orphan"))
		if err := s.Complete(context.Background(), running.Key, done); !errors.Is(err, interceptor.ErrSuperseded) {
			t.Errorf("Complete(orphaned claim) = %v, want ErrSuperseded", err)
		}
	} else {
		claim(t, s, request("running", "body", t0), interceptor.OutcomeInFlight)
	}
	if n, err := s.Sweep(context.Background(), t0.Add(ttl)); err != nil || n != 2 {
		t.Errorf("Sweep after reopen = %d, %v; want 2, nil (the expiry index must persist too)", n, err)
	}
}
