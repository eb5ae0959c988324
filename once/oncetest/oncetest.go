// Package oncetest tests the rules of package once on a store: a function
// runs once per key, its answer is stored and replayed, and every refusal
// is the one the rules name. A store's tests run it beside the storage
// conformance suite, and a store kept outside its process runs the crash
// tests too:
//
//	func TestOnce(t *testing.T)      { oncetest.RunTests(t, opener) }
//	func TestOnceCrash(t *testing.T) { oncetest.RunCrashTests(t, opener) }
package oncetest

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/storage/storagetest"
	"github.com/paymentsd/paymentsd/wire"
)

const operation = "/shop.v1.Orders/Place"

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Opener opens the store kept in dir; see storagetest.Opener.
type Opener = storagetest.Opener

// RunTests runs the tests of the rules against the stores open returns.
func RunTests(t *testing.T, open Opener) {
	tests := []struct {
		name string
		run  func(*testing.T, Opener)
	}{
		{"Do_RunsOnceAndReplaysTheStoredResponse", testOnceReplays},
		{"Do_StoredErrorReplayed_OtherRequestRefused", testOnceErrorsAndMismatch},
		{"Do_WhileRunning_InFlightOrWaits", testOnceInFlight},
		{"Do_AfterLease_TakenOverAsNextAttempt", testOnceTakeover},
		{"Do_Transactional_ClaimCommitsWithTheResult", testOnceTransactional},
		{"Do_BadKeyOrNoMessage_RefusedBeforeAClaim", testOnceBadRequest},
		{"DoValue_RunsOnce_FirstCallAndReplaysGetTheStoredValue", testValueReplays},
		{"DoValue_StoredErrorsApartFromRefusals_ReuseRefused", testValueRefusalsAndStoredErrors},
		{"DoValue_StatusErrors_KeepCodeAndDetails", testValueStatusErrors},
		{"DoValue_50Concurrent_OneRun", testValueConcurrent},
		{"DoValue_Transactional_NotStoredLeavesTheKeyFree", testValueTransactional},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

// RunCrashTests runs the tests that kill a process holding a claim, for a
// store that outlives its process: open must reach the same data from a
// copy of the test binary, which the tests run and kill with SIGKILL.
func RunCrashTests(t *testing.T, open Opener) {
	t.Run("DoValue_TakenOverAfterSIGKILL", func(t *testing.T) { testValueTakeoverAfterKill(t, open) })
}

func openStore(t *testing.T, open Opener, dir string) storagetest.Store {
	t.Helper()
	s := open(t, dir)
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T, open Opener) storagetest.Store { return openStore(t, open, t.TempDir()) }

// reopen closes s, the store kept in dir, and opens it again.
func reopen(t *testing.T, open Opener, dir string, s storagetest.Store) storagetest.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openStore(t, open, dir)
}

// onceRequest is a Do request of key for body, in scope-a.
func onceRequest(key, body string) once.Request {
	return once.Request{Scope: "scope-a", Key: key, Operation: operation, Message: wrapperspb.String(body)}
}

// guard is a Guard over s whose clock reads *now.
func guard(t *testing.T, s storage.Store, now *atomic.Pointer[time.Time], opts once.Options) *once.Guard {
	t.Helper()
	opts.Lease, opts.TTL = lease, ttl
	opts.Now = func() time.Time { return *now.Load() }
	g, err := once.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func clockAt(at time.Time) *atomic.Pointer[time.Time] {
	var p atomic.Pointer[time.Time]
	p.Store(&at)
	return &p
}

// counted returns a function that counts its runs and answers with reply.
func counted(runs *atomic.Int32, reply string, err error) func(context.Context) (*wrapperspb.StringValue, error) {
	return func(context.Context) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		if err != nil {
			return nil, err
		}
		return wrapperspb.String(reply), nil
	}
}

// refusedAs fails unless err is a *once.Refusal of kind, code c and
// reason.
func refusedAs(t *testing.T, err, kind error, c code.Code, reason string) *once.Refusal {
	t.Helper()
	var r *once.Refusal
	if !errors.As(err, &r) || !errors.Is(err, kind) || r.Code() != c || r.Reason() != reason {
		t.Fatalf("Do: %v, want a refusal %v, %v with reason %q", err, kind, c, reason)
	}
	return r
}

// testOnceReplays: a response is made once, and every later call, on a
// reopened store too, gets the stored one.
func testOnceReplays(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := openStore(t, open, dir)
	now := clockAt(t0)
	var runs atomic.Int32
	ctx := context.Background()
	for i := range 2 {
		got, answered, err := once.Do(ctx, guard(t, s, now, once.Options{}), onceRequest("k", "pay 10"), counted(&runs, "paid", nil))
		if err != nil || got.GetValue() != "paid" || answered != (once.Answered{Replayed: i > 0, Attempt: 1}) {
			t.Fatalf("Do #%d = %v, %+v, %v; want paid, replayed %t, attempt 1", i+1, got, answered, err, i > 0)
		}
	}
	s = reopen(t, open, dir, s)
	got, answered, err := once.Do(ctx, guard(t, s, now, once.Options{}), onceRequest("k", "pay 10"), counted(&runs, "paid again", nil))
	if err != nil || got.GetValue() != "paid" || runs.Load() != 1 || !answered.Replayed {
		t.Fatalf("Do after reopening = %v, %v after %d runs; want the stored paid, 1 run", got, err, runs.Load())
	}
}

// testOnceErrorsAndMismatch: a function's error is stored and replayed as
// it was; another request under the key is refused and never run.
func testOnceErrorsAndMismatch(t *testing.T, open Opener) {
	s := newStore(t, open)
	g := guard(t, s, clockAt(t0), once.Options{})
	var runs atomic.Int32
	failed := once.Errorf(code.Code_INVALID_ARGUMENT, "amount must be positive")
	for i := range 2 {
		_, answered, err := once.Do(context.Background(), g, onceRequest("k", "pay 0"), counted(&runs, "", failed))
		var e *once.StoredError
		if !errors.As(err, &e) || !proto.Equal(e.Status, failed.Status) || answered.Replayed != (i > 0) {
			t.Fatalf("Do #%d: %v, %+v; want the stored %v, replayed %t", i+1, err, answered, failed, i > 0)
		}
		if errors.As(err, new(*once.Refusal)) || once.Retryable(err) {
			t.Fatalf("Do #%d: the function's own error %v is taken for a refusal", i+1, err)
		}
	}
	_, _, err := once.Do(context.Background(), g, onceRequest("k", "pay 10"), counted(&runs, "paid", nil))
	refusedAs(t, err, once.ErrKeyReused, code.Code_FAILED_PRECONDITION, wire.ReasonKeyReused)
	if runs.Load() != 1 {
		t.Errorf("the function ran %d times, want 1", runs.Load())
	}
}

// testOnceInFlight: a call that meets the first one running is answered
// in flight, or, with InFlightWait, waits and gets its result.
func testOnceInFlight(t *testing.T, open Opener) {
	s := newStore(t, open)
	now := clockAt(t0)
	running, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, _, err := once.Do(context.Background(), guard(t, s, now, once.Options{}), onceRequest("k", "pay 10"),
			func(context.Context) (*wrapperspb.StringValue, error) {
				close(running)
				<-release
				return wrapperspb.String("paid"), nil
			})
		first <- err
	}()
	<-running
	var runs atomic.Int32
	_, _, err := once.Do(context.Background(), guard(t, s, now, once.Options{}), onceRequest("k", "pay 10"), counted(&runs, "twice", nil))
	if e := refusedAs(t, err, once.ErrInFlight, code.Code_ABORTED, wire.ReasonKeyInUse); e.RetryDelay() <= 0 || !once.Retryable(err) {
		t.Errorf("in flight with retry delay %v, retryable %t; want a delay, retryable", e.RetryDelay(), once.Retryable(err))
	}
	waited := make(chan *wrapperspb.StringValue, 1)
	go func() {
		got, _, _ := once.Do(context.Background(), guard(t, s, now, once.Options{InFlightWait: time.Minute}),
			onceRequest("k", "pay 10"), counted(&runs, "twice", nil))
		waited <- got
	}()
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first Do: %v", err)
	}
	if got := <-waited; got.GetValue() != "paid" || runs.Load() != 0 {
		t.Fatalf("the waiting Do = %v after %d runs of its own, want the first's paid", got, runs.Load())
	}
}

// testOnceTakeover: a claim whose worker died is taken over once its lease
// ends, as the next attempt; the dead worker's late result is refused.
func testOnceTakeover(t *testing.T, open Opener) {
	s := newStore(t, open)
	msg := wrapperspb.String("pay 10")
	fp, err := once.NewFingerprint(operation, msg)
	if err != nil {
		t.Fatal(err)
	}
	dead := storage.ClaimRequest{Key: storage.RecordKey{Scope: "scope-a", Key: "k"}, Fingerprint: fp,
		Scheme: storage.FingerprintScheme, Now: t0, Lease: lease, TTL: ttl}
	orphan := claim(t, s, dead, storage.OutcomeFresh)

	var attempt uint64
	got, answered, err := once.Do(context.Background(), guard(t, s, clockAt(t0.Add(2*lease)), once.Options{}), onceRequest("k", "pay 10"),
		func(ctx context.Context) (*wrapperspb.StringValue, error) {
			attempt, _ = once.AttemptFrom(ctx)
			return wrapperspb.String("paid"), nil
		})
	if err != nil || got.GetValue() != "paid" || attempt != 2 || answered != (once.Answered{Attempt: 2}) {
		t.Fatalf("Do after the lease = %v, %v as attempt %d; want paid as attempt 2", got, err, attempt)
	}
	late := orphan.Completed(result(t, "late"))
	if err := s.Complete(context.Background(), dead.Key, late); !errors.Is(err, storage.ErrSuperseded) {
		t.Fatalf("the dead worker's Complete: %v, want ErrSuperseded", err)
	}
}

// testOnceTransactional: on a TxStore, a transactional call's claim is
// Transactional, and its stored error may therefore be released.
func testOnceTransactional(t *testing.T, open Opener) {
	s := newStore(t, open)
	as[storage.TxStore](t, s)
	req := onceRequest("k", "pay 0")
	req.Transactional = true
	var runs atomic.Int32
	_, _, err := once.Do(context.Background(), guard(t, s, clockAt(t0), once.Options{}), req,
		counted(&runs, "", once.Errorf(code.Code_INVALID_ARGUMENT, "amount must be positive")))
	if err == nil {
		t.Fatal("Do = nil error, want the function's")
	}
	rec, err := s.Get(context.Background(), storage.RecordKey{Scope: "scope-a", Key: "k"})
	if err != nil || rec == nil || rec.Durability != storage.Transactional || rec.State != storage.StateCompleted {
		t.Fatalf("record after a transactional Do: %+v, %v; want completed, Transactional", rec, err)
	}
}

// testOnceBadRequest: an invalid key or a request without a message is
// refused before anything is claimed or run.
func testOnceBadRequest(t *testing.T, open Opener) {
	s := newStore(t, open)
	g := guard(t, s, clockAt(t0), once.Options{})
	var runs atomic.Int32
	_, _, err := once.Do(context.Background(), g, onceRequest(" padded", "pay 10"), counted(&runs, "paid", nil))
	refusedAs(t, err, once.ErrInvalidKey, code.Code_INVALID_ARGUMENT, wire.ReasonKeyInvalid)
	noMessage := onceRequest("k", "pay 10")
	noMessage.Message = nil
	if _, _, err := once.Do(context.Background(), g, noMessage, counted(&runs, "paid", nil)); !errors.Is(err, once.ErrMisuse) {
		t.Errorf("Do without a message: %v, want a refusal for misuse", err)
	}
	if runs.Load() != 0 {
		t.Errorf("the function ran %d times, want 0", runs.Load())
	}
	if rec, err := s.Get(context.Background(), storage.RecordKey{Scope: "scope-a", Key: "k"}); err != nil || rec != nil {
		t.Errorf("record after refusals: %+v, %v; want none", rec, err)
	}
}

// claim claims req on s directly, as a worker that then dies would, and
// checks the outcome.
func claim(t *testing.T, s storage.Store, req storage.ClaimRequest, want storage.Outcome) *storage.Record {
	t.Helper()
	got, rec, err := s.Claim(context.Background(), req)
	if err != nil || got != want || rec == nil {
		t.Fatalf("Claim(%q at %v) = %v, %+v, %v; want %v", req.Key.Key, req.Now, got, rec, err, want)
	}
	return rec
}

// as returns s as a T, the optional part of a store that a test is about.
// It skips the test when s is not one.
func as[T any](t *testing.T, s storage.Store) T {
	t.Helper()
	v, ok := s.(T)
	if !ok {
		t.Skipf("store is not an %v", reflect.TypeFor[T]())
	}
	return v
}

// result is a stored response of text.
func result(t *testing.T, text string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Response: resp}
}
