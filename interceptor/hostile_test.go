package interceptor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// slowTx delays every store write of a claim (its claim, renewals and
// commit) by delay, as a slow disk would.
type slowBolt struct {
	*boltstore.DB
	delay time.Duration
}

func (s *slowBolt) ClaimTx(ctx context.Context, req storage.ClaimRequest, durable storage.Durability) (storage.Outcome, *storage.Record, storage.Tx, error) {
	outcome, rec, tx, err := s.DB.ClaimTx(ctx, req, durable)
	if outcome.Claimed() {
		time.Sleep(s.delay)
	}
	if tx != nil {
		tx = &slowCommit{Tx: tx, delay: s.delay}
	}
	return outcome, rec, tx, err
}

func (s *slowBolt) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	time.Sleep(s.delay)
	return s.DB.Renew(ctx, key, claim)
}

type slowCommit struct {
	storage.Tx
	delay time.Duration
}

func (t *slowCommit) Commit(ctx context.Context, done *storage.Record) error {
	time.Sleep(t.delay)
	return t.Tx.Commit(ctx, done)
}

// slowShared is a store shared by processes (the lease rule alone decides)
// whose renewals take delay to commit.
type slowShared struct {
	*memstore.Store
	delay    time.Duration
	renewals atomic.Int64
}

func (s *slowShared) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	time.Sleep(s.delay)
	s.renewals.Add(1)
	return s.Store.Renew(ctx, key, claim)
}

// A worker whose every store write takes more than a third of the lease,
// running for three leases, is never taken over: on the exclusive store
// because this process knows it is alive, on a shared store because its
// renewals keep its lease ahead of the clock.
func TestSlowStore_LiveWorkerKeepsItsClaim(t *testing.T) {
	const lease = 600 * time.Millisecond
	for _, tc := range []struct {
		name  string
		store func(*boltstore.DB) storage.Store
	}{
		{"exclusive bbolt", func(db *boltstore.DB) storage.Store { return &slowBolt{DB: db, delay: lease * 2 / 5} }},
		{"shared", func(*boltstore.DB) storage.Store { return &slowShared{Store: memstore.New(), delay: lease * 2 / 5} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startWith(t, tc.store, interceptor.WithLease(lease), interceptor.WithClock(time.Now))
			h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
				if attempt, _ := once.AttemptFrom(ctx); attempt == 1 {
					time.Sleep(3 * lease)
				}
				return echo(ctx, req)
			}
			first := make(chan call, 1)
			go func() { first <- h.send("tok", "k", payload("x")) }()
			for h.service.calls.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 10) {
				if a := h.send("tok", "k", payload("x")); a.err == nil && !a.replayed() {
					t.Fatal("a duplicate ran while the live worker held the key")
				}
			}
			if a := <-first; a.err != nil {
				t.Fatalf("the slow worker: %v, want its result", a.err)
			}
			h.wantCalls(t, 1)
		})
	}
}

// A client that walks away while its handler runs does not lock its key for
// a lease: the handler runs to its end, its result is stored, and the retry
// gets it.
func TestImpatientClient_HandlerFinishesRetryReplays(t *testing.T) {
	for _, transactional := range []bool{true, false} {
		opts := []interceptor.Option{interceptor.WithLease(time.Hour), interceptor.WithInFlightWait(10 * time.Second)}
		if transactional {
			opts = append(opts, interceptor.WithTransactional(unaryCall))
		}
		h := start(t, opts...)
		started := make(chan struct{})
		var canceled atomic.Bool
		h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
			close(started)
			time.Sleep(100 * time.Millisecond)
			canceled.Store(ctx.Err() != nil)
			return echo(ctx, req)
		}
		ctx, cancel := context.WithCancel(withKey(context.Background(), "tok", "k"))
		gone := make(chan error, 1)
		go func() {
			_, err := h.client.UnaryCall(ctx, payload("x"))
			gone <- err
		}()
		<-started
		cancel()
		if err := <-gone; status.Code(err) != codes.Canceled {
			t.Fatalf("transactional %t: the call that walked away: %v, want CANCELED", transactional, err)
		}
		a := h.send("tok", "k", payload("x")) // waits for the run in flight
		if a.err != nil || !a.replayed() {
			t.Fatalf("transactional %t: retry: replayed %t, %v; want the abandoned call's result", transactional, a.replayed(), a.err)
		}
		if canceled.Load() {
			t.Errorf("transactional %t: the handler's context was canceled with its caller's", transactional)
		}
		h.wantCalls(t, 1)
	}
}

// A client whose deadline is 2ms: whether its request was claimed before it
// gave up or not, the retry gets one result, from one run.
func TestImpatientClient_TwoMillisecondDeadline_RetryGetsOneResult(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall), interceptor.WithInFlightWait(10*time.Second))
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		time.Sleep(20 * time.Millisecond)
		return echo(ctx, req)
	}
	ctx, cancel := context.WithTimeout(withKey(context.Background(), "tok", "k"), 2*time.Millisecond)
	_, err := h.client.UnaryCall(ctx, payload("x"))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("impatient call: %v, want DEADLINE_EXCEEDED", err)
	}
	if a := h.send("tok", "k", payload("x")); a.err != nil {
		t.Fatalf("retry: %v, want the result", a.err)
	}
	h.wantCalls(t, 1)
}

func TestHandlerTimeout_BoundsAHandlerWhoseCallerLeft(t *testing.T) {
	h := start(t, interceptor.WithHandlerTimeout(50*time.Millisecond))
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		<-ctx.Done() // a handler that would run forever
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	a := h.send("tok", "k", payload("x"))
	if status.Code(a.err) != codes.DeadlineExceeded {
		t.Fatalf("handler past the server's limit: %v, want DEADLINE_EXCEEDED", a.err)
	}
	if again := h.send("tok", "k", payload("x")); status.Code(again.err) != codes.DeadlineExceeded || !again.replayed() {
		t.Errorf("retry: %v replayed %t, want the stored DEADLINE_EXCEEDED", again.err, again.replayed())
	}
}

func TestClient_AttemptTimeoutAgainstASlowServer_EndsWithTheResult(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall))
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		time.Sleep(150 * time.Millisecond)
		return echo(ctx, req)
	}
	// Attempts far shorter than the handler; enough of them that a loaded
	// machine, on which a replay itself may take longer than one attempt,
	// still lets one through once the result is stored.
	client := newRetryingClient(t, h, retry.WithAttemptTimeout(10*time.Millisecond),
		retry.WithMaxAttempts(100), retry.WithBackoff(20*time.Millisecond, 100*time.Millisecond))
	resp, err := client.UnaryCall(withKey(context.Background(), "tok", "order-1"), payload("x"))
	if err != nil {
		t.Fatalf("with 10ms attempts against a 150ms handler: %v, want the result", err)
	}
	if string(resp.GetPayload().GetBody()) != "x" {
		t.Errorf("response %v", resp)
	}
	h.wantCalls(t, 1)
}

// A handler that ignores its context and never returns must not hold its
// key for good: past the server's limit its claim is released, and a
// retry runs afresh.
func TestHandlerTimeout_HandlerThatNeverReturns_ReleasesItsKey(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall), interceptor.WithHandlerTimeout(100*time.Millisecond))
	hang := make(chan struct{})
	defer close(hang)
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if attempt, _ := once.AttemptFrom(ctx); h.service.calls.Load() == 1 && attempt == 1 {
			<-hang // deaf to its context
		}
		return echo(ctx, req)
	}
	go h.send("tok", "k", payload("x"))
	for h.service.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var a call
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if a = h.send("tok", "k", payload("x")); status.Code(a.err) != codes.Aborted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key is still in flight a minute after the handler's limit")
		}
	}
	if a.err != nil || a.replayed() {
		t.Fatalf("retry past the limit: %v (replayed %t), want a fresh run", a.err, a.replayed())
	}
	h.wantCalls(t, 2)
}
