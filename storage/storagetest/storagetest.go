// Package storagetest is the conformance suite every storage.Store must
// pass. A backend's test calls RunTests with a function that opens the
// store:
//
//	func TestConformance(t *testing.T) {
//		storagetest.RunTests(t, func(t *testing.T, dir string) storagetest.Store {
//			db, err := mystore.Open(dir)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return db
//		})
//	}
//
// A store that is also a storage.TxStore is tested for atomic completion
// too. A storage.Releaser is tested for releasing keys, and a
// storage.ReleaseHistory for keeping them. A storage.InFlightLister is
// tested for listing claims, and a storage.KeyFinder for finding a key in
// every scope. For any other store those tests are skipped.
package storagetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/storage"
)

// Store is what the suite tests: the interceptor's Store plus the upkeep a
// backend offers its operator.
type Store interface {
	storage.Store
	// Sweep deletes the records expired at now and returns how many.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// Get returns the record stored for a key, live or expired, or nil
	// when there is none. It changes nothing: it is an operator's lookup.
	Get(ctx context.Context, key storage.RecordKey) (*storage.Record, error)
	// Claimant is who this opening of the store claims as. The suite
	// checks orphan takeover for an exclusive store, and the lease rule
	// for a shared one.
	Claimant() storage.Claimant
	// Close releases the store. Opening the same dir again must find every
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
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

// suite is the conformance suite: each test's name and its run.
var suite = []struct {
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
	{"Get_ShowsWhatIsStoredAndChangesNothing", testGet},

	// A call whose context is already done fails and writes nothing.
	{"Claim_CanceledContext_WritesNothing", testClaimCanceled},
	{"Renew_CanceledContext_LeavesLease", testRenewCanceled},
	{"Complete_CanceledContext_LeavesInFlight", testCompleteCanceled},
	{"ClaimTx_CanceledContext_WritesNothing", testClaimTxCanceled},

	// Atomic completion: run when the store is an storage.TxStore.
	{"ClaimTx_NonDurable_HoldsKeyUntilCommit", testTxHoldsKey},
	{"ClaimTx_Concurrent_ExactlyOneFresh", testTxConcurrent},
	{"ClaimTx_NonDurableRollback_FreesKey", testTxRollbackFrees},
	{"ClaimTx_NonDurable_StoredOnlyByCommit", testTxStoredOnlyByCommit},
	{"ClaimTx_Durable_StoredBeforeCommit", testTxDurableStored},
	{"Commit_Durable_StoresResult", testTxDurableCommit},
	{"Commit_AfterTakeover_IsSupersededAndStoresNothing_ExclusiveNeverTakesOverALiveTx", testTxSuperseded},
	{"Rollback_Durable_StaysInFlight", testTxDurableRollback},
	{"Rollback_DurableRenewed_StaysInFlightUntilTheRenewedLease", testTxDurableRenewedRollback},
	{"Commit_AfterCommitOrRollback_IsRefused", testTxEnded},

	// Releasing a key: run when the store is an storage.Releaser.
	{"Release_TransactionalError_DeletesAndKeyRunsFresh", testReleaseTxError},
	{"Release_SuccessNonTransactionalInFlightOrNone_IsRefused", testReleaseRefused},
	{"Release_OfARecordNotTheOneSeen_IsRefused", testReleaseSeen},

	// Listing claims in flight: run when the store is an
	// storage.InFlightLister.
	{"InFlight_ListsEveryClaimOnceInPages", testInFlightList},
	{"InFlight_CompletedSweptLeave_TakenOverStays", testInFlightChanges},
	{"InFlight_Reopen_KeepsDurableClaims", testInFlightReopen},
	{"InFlight_TakenOverInTx_Leaves", testInFlightTakenOverInTx},
	{"InFlight_ClaimSaysItsDurability", testInFlightDurability},

	// A key's release history: run when the store is an
	// storage.ReleaseHistory.
	{"ReleaseHistory_Release_WritesOneEntryWithOperatorCodeMessageAttempt", testReleaseHistory},
	{"ReleaseHistory_RefusedRelease_WritesNone", testReleaseHistoryRefused},
	{"ReleaseHistory_EntryKeptPastTheRecordThenSwept", testReleaseHistorySwept},
	{"ReleaseHistory_Reopen_KeepsEntries", testReleaseHistoryReopen},

	// Finding a key in every scope: run when the store is an
	// storage.KeyFinder.
	{"FindKey_FindsTheKeyInEveryScopeOrderedByScope", testFindKey},
}

func openStore(t *testing.T, open Opener, dir string) Store {
	t.Helper()
	s := open(t, dir)
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T, open Opener) Store { return openStore(t, open, t.TempDir()) }

// reopen closes s, the store kept in dir, and opens it again.
func reopen(t *testing.T, open Opener, dir string, s Store) Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openStore(t, open, dir)
}

// canceled is a context that is already done.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func fingerprint(s string) storage.Fingerprint { return sha256.Sum256([]byte(s)) }

func request(key string, fp string, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{
		Key:         storage.RecordKey{Scope: "scope-a", Key: key},
		Fingerprint: fingerprint(fp),
		Scheme:      storage.FingerprintScheme,
		Now:         now, Lease: lease, TTL: ttl,
	}
}

func claim(t *testing.T, s Store, req storage.ClaimRequest, want storage.Outcome) *storage.Record {
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

// as returns s as a T, the optional part of a store that a test is about.
// It skips the test when s is not one.
func as[T any](t *testing.T, s Store) T {
	t.Helper()
	v, ok := s.(T)
	if !ok {
		t.Skipf("store is not an %v", reflect.TypeFor[T]())
	}
	return v
}

// claimTx claims req through ClaimTx and checks the outcome. A claimed
// outcome returns its Tx. The Tx is rolled back when the test ends, unless
// it ended before (Rollback after Commit does nothing). Any other outcome
// returns no Tx.
func claimTx(t *testing.T, s storage.TxStore, req storage.ClaimRequest, durable storage.Durability, want storage.Outcome) (*storage.Record, storage.Tx) {
	t.Helper()
	got, rec, tx, err := s.ClaimTx(context.Background(), req, durable)
	if tx != nil {
		t.Cleanup(tx.Rollback)
	}
	if err != nil {
		t.Fatalf("ClaimTx(%q at %v, durability %v): %v", req.Key.Key, req.Now, durable, err)
	}
	if got != want {
		t.Fatalf("ClaimTx(%q at %v, durability %v) = %v, want %v", req.Key.Key, req.Now, durable, got, want)
	}
	if rec == nil {
		t.Fatalf("ClaimTx(%q) returned no record", req.Key.Key)
	}
	if got.Claimed() != (tx != nil) {
		t.Fatalf("ClaimTx(%q) = %v with Tx %v, want a Tx exactly when claimed", req.Key.Key, got, tx)
	}
	return rec, tx
}

// durability is the Durability of a claim durable or not. Subtests keep
// their names of a bool.
func durability(durable bool) storage.Durability {
	if durable {
		return storage.Durable
	}
	return storage.Transactional
}

// commit commits tx with claim completed as result.
func commit(t *testing.T, tx storage.Tx, claim *storage.Record, result *storage.Result) {
	t.Helper()
	if err := tx.Commit(context.Background(), claim.Completed(result)); err != nil {
		t.Fatalf("Commit(attempt %d): %v", claim.Attempt, err)
	}
}

// sampleResult is a result with every part a store must keep.
func sampleResult(t *testing.T, text string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{
		Response: resp,
		Header:   metadata.Pairs("x-request", text, "x-bin", "\x00\xff"),
		Trailer:  metadata.Pairs("x-trailer", "a", "x-trailer", "b"),
	}
}

func errorResult(t *testing.T) *storage.Result {
	t.Helper()
	detail, err := anypb.New(wrapperspb.String("detail"))
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Status: &spb.Status{
		Code: int32(codes.InvalidArgument), Message: "bad amount", Details: []*anypb.Any{detail},
	}}
}

func complete(t *testing.T, s Store, req storage.ClaimRequest, claim *storage.Record, result *storage.Result) *storage.Record {
	t.Helper()
	done := claim.Completed(result)
	if err := s.Complete(context.Background(), req.Key, done); err != nil {
		t.Fatalf("Complete(%q, attempt %d): %v", req.Key.Key, claim.Attempt, err)
	}
	return done
}

func sameResult(t *testing.T, got, want *storage.Result) {
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
	rec := claim(t, s, req, storage.OutcomeFresh)
	if rec.Attempt != 1 || rec.State != storage.StateInFlight || rec.Fingerprint != req.Fingerprint || rec.Scheme != req.Scheme {
		t.Errorf("fresh claim = attempt %d state %v, want attempt 1, in flight, with the request's fingerprint and scheme", rec.Attempt, rec.State)
	}
	if !rec.LeaseExpiry.Equal(t0.Add(lease)) || !rec.Expiry.Equal(t0.Add(ttl)) {
		t.Errorf("lease %v expiry %v, want %v and %v", rec.LeaseExpiry, rec.Expiry, t0.Add(lease), t0.Add(ttl))
	}
}

func testInFlight(t *testing.T, open Opener) {
	s := newStore(t, open)
	claim(t, s, request("k", "body", t0), storage.OutcomeFresh)
	rec := claim(t, s, request("k", "body", t0.Add(lease-time.Millisecond)), storage.OutcomeInFlight)
	if !rec.LeaseExpiry.Equal(t0.Add(lease)) {
		t.Errorf("in-flight record's lease = %v, want %v", rec.LeaseExpiry, t0.Add(lease))
	}
}

func testReplay(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name   string
		result func(*testing.T) *storage.Result
	}{
		{"Response", func(t *testing.T) *storage.Result { return sampleResult(t, "one") }},
		{"Status", errorResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, open)
			req := request("k", "body", t0)
			want := tc.result(t)
			complete(t, s, req, claim(t, s, req, storage.OutcomeFresh), want)
			rec := claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay)
			if rec.State != storage.StateCompleted || rec.Attempt != 1 {
				t.Errorf("replayed record: state %v attempt %d, want completed, 1", rec.State, rec.Attempt)
			}
			sameResult(t, rec.Result, want)
		})
	}
}

func testGet(t *testing.T, open Opener) {
	s := newStore(t, open)
	ctx := context.Background()
	req := request("k", "body", t0)
	get := func() *storage.Record {
		t.Helper()
		rec, err := s.Get(ctx, req.Key)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		return rec
	}
	if rec := get(); rec != nil {
		t.Fatalf("Get of a key never claimed = %+v, want nil", rec)
	}
	first := claim(t, s, req, storage.OutcomeFresh)
	if rec := get(); rec == nil || rec.State != storage.StateInFlight || rec.Attempt != 1 || rec.Token != first.Token || rec.Fingerprint != req.Fingerprint {
		t.Fatalf("Get of a claim in flight = %+v, want attempt 1 in flight with its token", rec)
	}
	want := sampleResult(t, "one")
	complete(t, s, req, first, want)
	rec := get()
	if rec == nil || rec.State != storage.StateCompleted || !rec.Expiry.Equal(first.Expiry) {
		t.Fatalf("Get of a completed record = %+v, want it completed, expiring %v", rec, first.Expiry)
	}
	sameResult(t, rec.Result, want)
	// Expired records are shown as they are, until swept; Get claims none.
	later := request("k", "body", t0.Add(2*ttl))
	if rec := get(); rec == nil || later.Now.Before(rec.Expiry) {
		t.Fatalf("Get after expiry = %+v, want the expired record", rec)
	}
	if rec := claim(t, s, later, storage.OutcomeFresh); rec.Attempt != 1 {
		t.Errorf("claim after Gets: attempt %d, want a fresh claim", rec.Attempt)
	}
}

func testMismatch(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	first := claim(t, s, req, storage.OutcomeFresh)
	rec := claim(t, s, request("k", "other body", t0), storage.OutcomeMismatch)
	if rec.Fingerprint != req.Fingerprint {
		t.Errorf("mismatch reports fingerprint %v, want the stored %v", rec.Fingerprint, req.Fingerprint)
	}
	complete(t, s, req, first, sampleResult(t, "one"))
	claim(t, s, request("k", "other body", t0.Add(time.Hour)), storage.OutcomeMismatch)
	// The same fingerprint under another scheme cannot be compared.
	otherScheme := request("k", "body", t0.Add(time.Hour))
	otherScheme.Scheme = "another scheme"
	claim(t, s, otherScheme, storage.OutcomeMismatch)
	// The rejection stored nothing: the original still replays.
	sameResult(t, claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "one"))
}

func testTakeover(t *testing.T, open Opener) {
	s := newStore(t, open)
	first := claim(t, s, request("k", "body", t0), storage.OutcomeFresh)
	second := claim(t, s, request("k", "body", t0.Add(lease)), storage.OutcomeTakeover)
	if second.Attempt != 2 || second.Token == first.Token {
		t.Errorf("takeover: attempt %d (want 2), token changed %t (want true)", second.Attempt, second.Token != first.Token)
	}
	if !second.LeaseExpiry.Equal(t0.Add(2*lease)) || !second.Expiry.Equal(first.Expiry) {
		t.Errorf("takeover: lease %v expiry %v, want %v and the first claim's %v", second.LeaseExpiry, second.Expiry, t0.Add(2*lease), first.Expiry)
	}
	claim(t, s, request("k", "body", t0.Add(lease+time.Second)), storage.OutcomeInFlight)
	third := claim(t, s, request("k", "body", t0.Add(2*lease)), storage.OutcomeTakeover)
	if third.Attempt != 3 {
		t.Errorf("second takeover: attempt %d, want 3", third.Attempt)
	}
}

func testSuperseded(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	first := claim(t, s, req, storage.OutcomeFresh)
	second := claim(t, s, request("k", "body", t0.Add(lease)), storage.OutcomeTakeover)

	done := first.Completed(sampleResult(t, "stale"))
	if err := s.Complete(context.Background(), req.Key, done); !errors.Is(err, storage.ErrSuperseded) {
		t.Fatalf("Complete(attempt 1 after takeover) = %v, want ErrSuperseded", err)
	}
	complete(t, s, req, second, sampleResult(t, "current"))
	// Once completed, even the current attempt cannot write again.
	if err := s.Complete(context.Background(), req.Key, done); !errors.Is(err, storage.ErrSuperseded) {
		t.Fatalf("Complete(attempt 1 after completion) = %v, want ErrSuperseded", err)
	}
	rec := claim(t, s, request("k", "body", t0.Add(2*lease)), storage.OutcomeReplay)
	sameResult(t, rec.Result, sampleResult(t, "current"))
}

func testRenew(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	rec := claim(t, s, req, storage.OutcomeFresh)
	renewed := *rec
	renewed.LeaseExpiry = t0.Add(3 * lease)
	if err := s.Renew(context.Background(), req.Key, &renewed); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	// Past the first lease, the renewed claim holds.
	got := claim(t, s, request("k", "body", t0.Add(2*lease)), storage.OutcomeInFlight)
	if !got.LeaseExpiry.Equal(renewed.LeaseExpiry) {
		t.Errorf("lease after renewal = %v, want %v", got.LeaseExpiry, renewed.LeaseExpiry)
	}
	claim(t, s, request("k", "body", t0.Add(3*lease)), storage.OutcomeTakeover)
}

func testRenewRefused(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	first := claim(t, s, req, storage.OutcomeFresh)
	claim(t, s, request("k", "body", t0.Add(lease)), storage.OutcomeTakeover)
	stale := *first
	stale.LeaseExpiry = t0.Add(5 * lease)
	if err := s.Renew(context.Background(), req.Key, &stale); !errors.Is(err, storage.ErrSuperseded) {
		t.Errorf("Renew(superseded attempt) = %v, want ErrSuperseded", err)
	}
	// The refused renewal changed nothing: the second attempt's lease, not
	// the stale one's, decides.
	claim(t, s, request("k", "body", t0.Add(2*lease)), storage.OutcomeTakeover)

	s2 := newStore(t, open)
	rec := claim(t, s2, req, storage.OutcomeFresh)
	complete(t, s2, req, rec, sampleResult(t, "done"))
	late := *rec
	late.LeaseExpiry = t0.Add(5 * lease)
	if err := s2.Renew(context.Background(), req.Key, &late); !errors.Is(err, storage.ErrSuperseded) {
		t.Errorf("Renew(completed claim) = %v, want ErrSuperseded", err)
	}
	sameResult(t, claim(t, s2, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "done"))
}

func testCompleteReplaced(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	old := claim(t, s, req, storage.OutcomeFresh)
	// The record expires and the key is claimed afresh, attempt 1 again.
	// The old worker must still be refused.
	claim(t, s, request("k", "body", t0.Add(ttl)), storage.OutcomeFresh)
	done := old.Completed(sampleResult(t, "stale"))
	if err := s.Complete(context.Background(), req.Key, done); !errors.Is(err, storage.ErrSuperseded) {
		t.Errorf("Complete(claim of an expired record) = %v, want ErrSuperseded", err)
	}
	other := request("never-claimed", "body", t0)
	if err := s.Complete(context.Background(), other.Key, done); !errors.Is(err, storage.ErrSuperseded) {
		t.Errorf("Complete(unknown key) = %v, want ErrSuperseded", err)
	}
}

func testExpiry(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	complete(t, s, req, claim(t, s, req, storage.OutcomeFresh), sampleResult(t, "one"))
	claim(t, s, request("k", "body", t0.Add(ttl-time.Nanosecond)), storage.OutcomeReplay)
	// An expired record counts as absent, whatever the fingerprint.
	rec := claim(t, s, request("k", "other body", t0.Add(ttl)), storage.OutcomeFresh)
	if rec.Attempt != 1 || !rec.Expiry.Equal(t0.Add(2*ttl)) {
		t.Errorf("claim after expiry: attempt %d expiry %v, want 1 and %v", rec.Attempt, rec.Expiry, t0.Add(2*ttl))
	}
}

func testConcurrent(t *testing.T, open Opener) {
	s := newStore(t, open)
	const n = 100
	var wg sync.WaitGroup
	outcomes := make(chan storage.Outcome, n)
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
	counts := map[storage.Outcome]int{}
	for o := range outcomes {
		counts[o]++
	}
	if counts[storage.OutcomeFresh] != 1 || counts[storage.OutcomeInFlight] != n-1 {
		t.Errorf("%d concurrent claims: %v, want 1 fresh and %d in flight", n, counts, n-1)
	}
}

func testScopes(t *testing.T, open Opener) {
	s := newStore(t, open)
	a := request("k", "body", t0)
	b := a
	b.Key.Scope = "scope-b"
	complete(t, s, a, claim(t, s, a, storage.OutcomeFresh), sampleResult(t, "a"))
	claim(t, s, b, storage.OutcomeFresh)
	// Scopes that would collide if their parts were simply concatenated.
	c := a
	c.Key = storage.RecordKey{Scope: "scope-ak", Key: ""}
	d := a
	d.Key = storage.RecordKey{Scope: "scope-a", Key: "k"}
	claim(t, s, c, storage.OutcomeFresh)
	sameResult(t, claim(t, s, d, storage.OutcomeReplay).Result, sampleResult(t, "a"))
}

func testSweep(t *testing.T, open Opener) {
	s := newStore(t, open)
	const expired, live = 25, 5
	for i := range expired {
		req := request(fmt.Sprintf("old-%d", i), "body", t0)
		rec := claim(t, s, req, storage.OutcomeFresh)
		if i%2 == 0 {
			complete(t, s, req, rec, sampleResult(t, "old"))
		}
	}
	later := t0.Add(time.Hour)
	for i := range live {
		req := request(fmt.Sprintf("new-%d", i), "body", later)
		complete(t, s, req, claim(t, s, req, storage.OutcomeFresh), sampleResult(t, "new"))
	}
	// A key that expired and was claimed again is live, not swept.
	claim(t, s, request("old-0", "body", t0.Add(ttl)), storage.OutcomeFresh)

	n, err := s.Sweep(context.Background(), t0.Add(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if n != expired-1 { // old-0 was replaced by its new claim, not swept
		t.Errorf("Sweep removed %d records, want %d", n, expired-1)
	}
	for i := range live {
		claim(t, s, request(fmt.Sprintf("new-%d", i), "body", t0.Add(ttl)), storage.OutcomeReplay)
	}
	claim(t, s, request("old-0", "body", t0.Add(ttl)), storage.OutcomeInFlight)
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
	complete(t, s, done, claim(t, s, done, storage.OutcomeFresh), sampleResult(t, "kept"))
	running := request("running", "body", t0)
	runningClaim := claim(t, s, running, storage.OutcomeFresh)
	if runningClaim.Owner != s.Claimant().ID {
		t.Errorf("claim owner %q, want the store's claimant %q", runningClaim.Owner, s.Claimant().ID)
	}
	old := s.Claimant()
	s = reopen(t, open, dir, s)
	if s.Claimant().ID == old.ID {
		t.Errorf("reopened store claims as %q again, want a new ID", old.ID)
	}
	sameResult(t, claim(t, s, request("done", "body", t0), storage.OutcomeReplay).Result, sampleResult(t, "kept"))
	if s.Claimant().Exclusive {
		// The earlier opening's claim is an orphan: taken over at once.
		rec := claim(t, s, request("running", "body", t0), storage.OutcomeTakeover)
		if rec.Attempt != 2 || rec.Owner != s.Claimant().ID {
			t.Errorf("orphan takeover: attempt %d owner %q, want 2 and %q", rec.Attempt, rec.Owner, s.Claimant().ID)
		}
		done := runningClaim.Completed(sampleResult(t, "orphan"))
		if err := s.Complete(context.Background(), running.Key, done); !errors.Is(err, storage.ErrSuperseded) {
			t.Errorf("Complete(orphaned claim) = %v, want ErrSuperseded", err)
		}
	} else {
		claim(t, s, request("running", "body", t0), storage.OutcomeInFlight)
	}
	if n, err := s.Sweep(context.Background(), t0.Add(ttl)); err != nil || n != 2 {
		t.Errorf("Sweep after reopen = %d, %v; want 2, nil (the expiry index must persist too)", n, err)
	}
}

func testClaimCanceled(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	if got, _, err := s.Claim(canceled(), req); err == nil {
		t.Fatalf("Claim(canceled context) = %v, nil; want an error", got)
	}
	if rec := claim(t, s, req, storage.OutcomeFresh); rec.Attempt != 1 {
		t.Errorf("claim after a canceled claim: attempt %d, want 1", rec.Attempt)
	}
	// A canceled claim that would take over takes nothing over either.
	if got, _, err := s.Claim(canceled(), request("k", "body", t0.Add(lease))); err == nil {
		t.Fatalf("Claim(canceled context, lease expired) = %v, nil; want an error", got)
	}
	if rec := claim(t, s, request("k", "body", t0.Add(lease)), storage.OutcomeTakeover); rec.Attempt != 2 {
		t.Errorf("takeover after a canceled takeover: attempt %d, want 2", rec.Attempt)
	}
}

func testRenewCanceled(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	rec := claim(t, s, req, storage.OutcomeFresh)
	renewed := *rec
	renewed.LeaseExpiry = t0.Add(3 * lease)
	if err := s.Renew(canceled(), req.Key, &renewed); err == nil {
		t.Fatal("Renew(canceled context) = nil, want an error")
	}
	// Between the old lease's expiry and the new one's, the old lease decides.
	got := claim(t, s, request("k", "body", t0.Add(2*lease)), storage.OutcomeTakeover)
	if got.Attempt != 2 {
		t.Errorf("takeover after a canceled renewal: attempt %d, want 2", got.Attempt)
	}
}

func testCompleteCanceled(t *testing.T, open Opener) {
	s := newStore(t, open)
	req := request("k", "body", t0)
	rec := claim(t, s, req, storage.OutcomeFresh)
	if err := s.Complete(canceled(), req.Key, rec.Completed(sampleResult(t, "lost"))); err == nil {
		t.Fatal("Complete(canceled context) = nil, want an error")
	}
	got := claim(t, s, request("k", "body", t0.Add(time.Second)), storage.OutcomeInFlight)
	if got.State != storage.StateInFlight || got.Result != nil {
		t.Errorf("after a canceled completion: state %v, result %v; want in flight, no result", got.State, got.Result)
	}
	// The claim still stands: a live completion stores its result.
	complete(t, s, req, rec, sampleResult(t, "kept"))
	sameResult(t, claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "kept"))
}

func testClaimTxCanceled(t *testing.T, open Opener) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%t", durable), func(t *testing.T) {
			s := newStore(t, open)
			ts := as[storage.TxStore](t, s)
			req := request("k", "body", t0)
			got, _, tx, err := ts.ClaimTx(canceled(), req, durability(durable))
			if tx != nil {
				t.Cleanup(tx.Rollback)
				t.Errorf("ClaimTx(canceled context) returned a Tx, want none")
			}
			if err == nil {
				t.Fatalf("ClaimTx(canceled context) = %v, nil; want an error", got)
			}
			// Neither a stored claim nor one held until a Tx ends.
			if rec := claim(t, s, req, storage.OutcomeFresh); rec.Attempt != 1 {
				t.Errorf("claim after a canceled ClaimTx: attempt %d, want 1", rec.Attempt)
			}
		})
	}
}

func testTxHoldsKey(t *testing.T, open Opener) {
	s := newStore(t, open)
	ts := as[storage.TxStore](t, s)
	req := request("k", "body", t0)
	first, tx := claimTx(t, ts, req, storage.Transactional, storage.OutcomeFresh)
	if first.Attempt != 1 || first.State != storage.StateInFlight {
		t.Errorf("ClaimTx: attempt %d state %v, want 1, in flight", first.Attempt, first.State)
	}
	// While the Tx is open, the key is held against every kind of claim.
	at := request("k", "body", t0.Add(time.Second))
	claim(t, s, at, storage.OutcomeInFlight)
	claimTx(t, ts, at, storage.Transactional, storage.OutcomeInFlight)
	claimTx(t, ts, at, storage.Durable, storage.OutcomeInFlight)
	other := request("k", "other body", t0.Add(time.Second))
	if rec := claim(t, s, other, storage.OutcomeMismatch); rec.Fingerprint != req.Fingerprint {
		t.Errorf("mismatch reports fingerprint %v, want the claimed %v", rec.Fingerprint, req.Fingerprint)
	}
	claimTx(t, ts, other, storage.Transactional, storage.OutcomeMismatch)

	commit(t, tx, first, sampleResult(t, "one"))
	rec := claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay)
	if rec.State != storage.StateCompleted || rec.Attempt != 1 || rec.Token != first.Token {
		t.Errorf("replayed record: state %v attempt %d same token %t, want completed, 1, true", rec.State, rec.Attempt, rec.Token == first.Token)
	}
	sameResult(t, rec.Result, sampleResult(t, "one"))
	rec, _ = claimTx(t, ts, request("k", "body", t0.Add(time.Hour)), storage.Transactional, storage.OutcomeReplay)
	sameResult(t, rec.Result, sampleResult(t, "one"))
}

func testTxConcurrent(t *testing.T, open Opener) {
	// Durable and pending claims of one key race each other too. Requests
	// of a transactional method and of another method can share a key.
	for _, tc := range []struct {
		name   string
		bodies int
	}{
		{"SameRequest", 1},
		{"TwoRequests", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := as[storage.TxStore](t, newStore(t, open))
			const rounds, n = 5, 100
			for round := range rounds {
				all := raceClaimTx(t, ts, fmt.Sprintf("k-%d", round), n, tc.bodies)
				fresh := map[string]bool{} // the bodies that claimed
				var winners []string
				for _, r := range all {
					if r.outcome == storage.OutcomeFresh {
						fresh[r.body] = true
						winners = append(winners, fmt.Sprintf("%s durable=%t", r.body, r.durable))
					}
				}
				counts := map[string]int{}
				wrong := 0
				for _, r := range all {
					counts[r.outcome.String()]++
					want := storage.OutcomeMismatch
					if fresh[r.body] {
						want = storage.OutcomeInFlight
					}
					// A store that finds the key locked by a claim it cannot
					// see (not yet committed, on another connection) may
					// answer in flight past its lock timeout, as if for the
					// same request: the safe answer, tried again later.
					if r.outcome != storage.OutcomeFresh && r.outcome != want && !(want == storage.OutcomeMismatch && r.unseen) {
						wrong++
					}
				}
				if counts["fresh"] != 1 || wrong != 0 {
					t.Errorf("round %d: %d concurrent ClaimTx of %d request(s), half durable: %v, fresh %v; want 1 fresh, the rest in flight for its request and mismatch for another", round, n, tc.bodies, counts, winners)
				}
			}
		})
	}
}

// txClaim is one ClaimTx of raceClaimTx.
type txClaim struct {
	body    string
	durable bool
	outcome storage.Outcome
	tx      storage.Tx
	unseen  bool // in flight, the record being the request's own: the holder was not seen
}

// raceClaimTx makes n concurrent ClaimTx of key, half of them durable,
// over the given number of distinct bodies. It returns what each was told
// once all have claimed. Only then does it roll back every Tx. A pending
// claim released early would let another claim the key.
func raceClaimTx(t *testing.T, ts storage.TxStore, key string, n, bodies int) []txClaim {
	var wg sync.WaitGroup
	results := make(chan txClaim, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf("body-%d", i%bodies)
			durable := i%2 == 0
			req := request(key, body, t0)
			got, rec, tx, err := ts.ClaimTx(context.Background(), req, durability(durable))
			if err != nil {
				t.Error(err)
			}
			unseen := got == storage.OutcomeInFlight && rec != nil && rec.Fingerprint == req.Fingerprint
			results <- txClaim{body, durable, got, tx, unseen}
		})
	}
	wg.Wait()
	close(results)
	var all []txClaim
	for r := range results {
		all = append(all, r)
		if r.tx != nil {
			r.tx.Rollback()
		}
	}
	return all
}

func testTxRollbackFrees(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := openStore(t, open, dir)
	ts := as[storage.TxStore](t, s)
	req := request("k", "body", t0)
	_, tx := claimTx(t, ts, req, storage.Transactional, storage.OutcomeFresh)
	tx.Rollback()
	rec, tx := claimTx(t, ts, req, storage.Transactional, storage.OutcomeFresh)
	if rec.Attempt != 1 {
		t.Errorf("ClaimTx after a rolled-back claim: attempt %d, want 1", rec.Attempt)
	}
	tx.Rollback()
	s = reopen(t, open, dir, s)
	if rec := claim(t, s, req, storage.OutcomeFresh); rec.Attempt != 1 {
		t.Errorf("claim after rollbacks and a reopen: attempt %d, want 1", rec.Attempt)
	}
}

func testTxStoredOnlyByCommit(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := openStore(t, open, dir)
	ts := as[storage.TxStore](t, s)
	committed := request("committed", "body", t0)
	rec, tx := claimTx(t, ts, committed, storage.Transactional, storage.OutcomeFresh)
	commit(t, tx, rec, sampleResult(t, "kept"))
	rolledBack := request("rolled-back", "body", t0)
	_, tx = claimTx(t, ts, rolledBack, storage.Transactional, storage.OutcomeFresh)
	tx.Rollback()
	s = reopen(t, open, dir, s)
	sameResult(t, claim(t, s, request("committed", "body", t0.Add(time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "kept"))
	if rec := claim(t, s, rolledBack, storage.OutcomeFresh); rec.Attempt != 1 {
		t.Errorf("claim of a rolled-back key after a reopen: attempt %d, want 1", rec.Attempt)
	}
	if n, err := s.Sweep(context.Background(), t0.Add(ttl)); err != nil || n != 2 {
		t.Errorf("Sweep after reopen = %d, %v; want 2, nil (a committed claim must be in the expiry index too)", n, err)
	}
}

func testTxDurableStored(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := openStore(t, open, dir)
	ts := as[storage.TxStore](t, s)
	req := request("k", "body", t0)
	first, _ := claimTx(t, ts, req, storage.Durable, storage.OutcomeFresh)
	// The Tx stays open: the claim is stored already, not by its end.
	s = reopen(t, open, dir, s)
	if s.Claimant().Exclusive {
		// The earlier opening's claim is an orphan: taken over at once.
		rec := claim(t, s, req, storage.OutcomeTakeover)
		if rec.Attempt != 2 {
			t.Errorf("takeover of the durable claim after reopen: attempt %d, want 2", rec.Attempt)
		}
	} else {
		rec := claim(t, s, req, storage.OutcomeInFlight)
		if rec.Attempt != 1 || rec.Token != first.Token {
			t.Errorf("durable claim after reopen: attempt %d same token %t, want 1, true", rec.Attempt, rec.Token == first.Token)
		}
	}
}

func testTxDurableCommit(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := openStore(t, open, dir)
	ts := as[storage.TxStore](t, s)
	req := request("k", "body", t0)
	rec, tx := claimTx(t, ts, req, storage.Durable, storage.OutcomeFresh)
	commit(t, tx, rec, sampleResult(t, "one"))
	sameResult(t, claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "one"))
	s = reopen(t, open, dir, s)
	got := claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay)
	if got.Attempt != 1 || got.Token != rec.Token {
		t.Errorf("replay after reopen: attempt %d same token %t, want 1, true", got.Attempt, got.Token == rec.Token)
	}
	sameResult(t, got.Result, sampleResult(t, "one"))
}

func testTxSuperseded(t *testing.T, open Opener) {
	s := newStore(t, open)
	ts := as[storage.TxStore](t, s)
	req := request("k", "body", t0)
	first, tx := claimTx(t, ts, req, storage.Durable, storage.OutcomeFresh)
	if s.Claimant().Exclusive {
		// The store is this process's alone, and this process still runs the
		// claim's Tx. Its worker is alive, however late its lease.
		claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeInFlight)
		if err := tx.Commit(context.Background(), first.Completed(sampleResult(t, "live"))); err != nil {
			t.Fatalf("Commit(live attempt past its lease) = %v, want it stored", err)
		}
		sameResult(t, claim(t, s, request("k", "body", t0.Add(2*time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "live"))
		return
	}
	second := claim(t, s, request("k", "body", t0.Add(lease)), storage.OutcomeTakeover)
	if err := tx.Commit(context.Background(), first.Completed(sampleResult(t, "stale"))); !errors.Is(err, storage.ErrSuperseded) {
		t.Fatalf("Commit(attempt 1 after takeover) = %v, want ErrSuperseded", err)
	}
	// Nothing of attempt 1 was stored. Attempt 2 is in flight, and its
	// result is the one that replays.
	rec := claim(t, s, request("k", "body", t0.Add(lease+time.Second)), storage.OutcomeInFlight)
	if rec.Attempt != 2 || rec.Token != second.Token || rec.Result != nil {
		t.Errorf("after a superseded Commit: attempt %d same token %t result %v, want 2, true, none", rec.Attempt, rec.Token == second.Token, rec.Result)
	}
	complete(t, s, req, second, sampleResult(t, "current"))
	sameResult(t, claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay).Result, sampleResult(t, "current"))
}

func testTxDurableRollback(t *testing.T, open Opener) {
	s := newStore(t, open)
	ts := as[storage.TxStore](t, s)
	first, tx := claimTx(t, ts, request("k", "body", t0), storage.Durable, storage.OutcomeFresh)
	tx.Rollback()
	rec := claim(t, s, request("k", "body", t0.Add(lease-time.Millisecond)), storage.OutcomeInFlight)
	if rec.Attempt != 1 || rec.Token != first.Token {
		t.Errorf("after Rollback: attempt %d same token %t, want the claim still in flight: 1, true", rec.Attempt, rec.Token == first.Token)
	}
	if rec := claim(t, s, request("k", "body", t0.Add(lease)), storage.OutcomeTakeover); rec.Attempt != 2 {
		t.Errorf("takeover after the lease: attempt %d, want 2", rec.Attempt)
	}
}

// testTxDurableRenewedRollback: renewals said the worker of a durable claim
// was alive until the renewed lease. A Tx may end without a result: its
// handler overran, or its result could not be stored. It then leaves the
// claim in flight until that lease ends. No retry runs the handler again
// meanwhile.
func testTxDurableRenewedRollback(t *testing.T, open Opener) {
	s := newStore(t, open)
	ts := as[storage.TxStore](t, s)
	req := request("k", "body", t0)
	first, tx := claimTx(t, ts, req, storage.Durable, storage.OutcomeFresh)
	renewed := *first
	renewed.LeaseExpiry = t0.Add(3 * lease)
	if err := s.Renew(context.Background(), req.Key, &renewed); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	tx.Rollback()
	for _, at := range []time.Duration{lease / 2, 2 * lease} { // before and after the first lease
		rec := claim(t, s, request("k", "body", t0.Add(at)), storage.OutcomeInFlight)
		if rec.Attempt != 1 || rec.Token != first.Token || !rec.LeaseExpiry.Equal(renewed.LeaseExpiry) {
			t.Errorf("at +%v after Rollback: attempt %d, same token %t, lease %v; want attempt 1 of the same token, lease %v",
				at, rec.Attempt, rec.Token == first.Token, rec.LeaseExpiry, renewed.LeaseExpiry)
		}
	}
	if rec := claim(t, s, request("k", "body", t0.Add(3*lease)), storage.OutcomeTakeover); rec.Attempt != 2 {
		t.Errorf("takeover after the renewed lease: attempt %d, want 2", rec.Attempt)
	}
}

func testTxEnded(t *testing.T, open Opener) {
	for _, durable := range []storage.Durability{storage.Transactional, storage.Durable} {
		t.Run(fmt.Sprintf("CommitTwice/durable=%t", durable == storage.Durable), func(t *testing.T) {
			s := newStore(t, open)
			ts := as[storage.TxStore](t, s)
			rec, tx := claimTx(t, ts, request("k", "body", t0), durable, storage.OutcomeFresh)
			commit(t, tx, rec, sampleResult(t, "one"))
			if err := tx.Commit(context.Background(), rec.Completed(sampleResult(t, "two"))); err == nil {
				t.Error("second Commit = nil, want an error")
			}
			tx.Rollback() // after Commit: does nothing
			got := claim(t, s, request("k", "body", t0.Add(time.Hour)), storage.OutcomeReplay)
			if got.Attempt != 1 {
				t.Errorf("replay: attempt %d, want 1", got.Attempt)
			}
			sameResult(t, got.Result, sampleResult(t, "one"))
		})
		t.Run(fmt.Sprintf("CommitAfterRollback/durable=%t", durable == storage.Durable), func(t *testing.T) {
			s := newStore(t, open)
			ts := as[storage.TxStore](t, s)
			rec, tx := claimTx(t, ts, request("k", "body", t0), durable, storage.OutcomeFresh)
			tx.Rollback()
			if err := tx.Commit(context.Background(), rec.Completed(sampleResult(t, "late"))); err == nil {
				t.Error("Commit after Rollback = nil, want an error")
			}
			if durable == storage.Durable {
				// The claim stays in flight, as Rollback left it.
				got := claim(t, s, request("k", "body", t0.Add(time.Second)), storage.OutcomeInFlight)
				if got.Attempt != 1 || got.Token != rec.Token || got.Result != nil {
					t.Errorf("after Commit after Rollback: attempt %d same token %t result %v, want 1, true, none", got.Attempt, got.Token == rec.Token, got.Result)
				}
				return
			}
			if got := claim(t, s, request("k", "body", t0.Add(time.Second)), storage.OutcomeFresh); got.Attempt != 1 {
				t.Errorf("claim after Commit after Rollback: attempt %d, want 1", got.Attempt)
			}
		})
	}
}
