package interceptor_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

const unaryCall = "/grpc.testing.TestService/UnaryCall"

var bucketOrders = []byte("orders")

// writeOrder makes the handler write its payload through the store, as a
// repository would, and then answer with err if not nil.
func (h *harness) writeOrder(t *testing.T, err error) {
	t.Helper()
	if uerr := h.db.Update(context.Background(), func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketOrders)
		return err
	}); uerr != nil {
		t.Fatal(uerr)
	}
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		body := req.GetPayload().GetBody()
		if werr := h.db.Update(ctx, func(tx *bolt.Tx) error { return tx.Bucket(bucketOrders).Put(body, body) }); werr != nil {
			return nil, werr
		}
		if err != nil {
			return nil, err
		}
		return echo(ctx, req)
	}
}

// hasOrder reports whether the order named body was stored.
func (h *harness) hasOrder(body string) bool {
	found := false
	h.db.View(context.Background(), func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketOrders).Get([]byte(body)) != nil
		return nil
	})
	return found
}

func TestTransactional_FreshRequestIsOneCommit_OtherMethodsTwo(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []interceptor.Option
		want uint64
	}{
		{"transactional", []interceptor.Option{interceptor.WithTransactional(unaryCall)}, 1},
		{"durable claim", nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.opts...)
			h.writeOrder(t, nil)
			for i := range 5 {
				before := h.db.Commits()
				body := string(rune('a' + i))
				if a := h.send("tok", body, payload(body)); a.err != nil {
					t.Fatal(a.err)
				}
				if got := h.db.Commits() - before; got != tc.want {
					t.Errorf("request %d: %d commits, want %d", i, got, tc.want)
				}
				if !h.hasOrder(body) {
					t.Errorf("order %s was not stored with its answer", body)
				}
			}
		})
	}
}

func TestTransactional_DuplicateWhileRunning_InUseThenReplay(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall))
	running, release := h.service.blockFirstAttempt()
	first := make(chan call, 1)
	go func() { first <- h.send("tok", "k", payload("x")) }()
	<-running
	wantReason(t, h.send("tok", "k", payload("x")).err, codes.Aborted, wire.ReasonKeyInUse)
	wantReason(t, h.send("tok", "k", payload("other")).err, codes.FailedPrecondition, wire.ReasonKeyReused)
	close(release)
	if a := <-first; a.err != nil {
		t.Fatal(a.err)
	}
	if a := h.send("tok", "k", payload("x")); a.err != nil || !a.replayed() {
		t.Errorf("after the first finished: replayed %t, %v; want the replay", a.replayed(), a.err)
	}
	h.wantCalls(t, 1)
}

func TestTransactional_WaitingDuplicatesGetTheReplay(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall), interceptor.WithInFlightWait(time.Minute))
	running, release := h.service.blockFirstAttempt()
	first := make(chan call, 1)
	go func() { first <- h.send("tok", "k", payload("x")) }()
	<-running
	var wg sync.WaitGroup
	waiters := make(chan call, 8)
	for range cap(waiters) {
		wg.Go(func() { waiters <- h.send("tok", "k", payload("x")) })
	}
	time.Sleep(50 * time.Millisecond) // let them start waiting; they are fine either way
	close(release)
	wg.Wait()
	close(waiters)
	for a := range waiters {
		if a.err != nil || !a.replayed() {
			t.Errorf("waiter: replayed %t, %v; want the replay", a.replayed(), a.err)
		}
	}
	if a := <-first; a.err != nil {
		t.Fatal(a.err)
	}
	h.wantCalls(t, 1)
}

func TestTransactional_HandlerError_StoredAndReplayedItsWritesDiscarded(t *testing.T) {
	for _, transactional := range []bool{true, false} {
		var opts []interceptor.Option
		if transactional {
			opts = append(opts, interceptor.WithTransactional(unaryCall))
		}
		h := start(t, opts...)
		h.writeOrder(t, status.Error(codes.InvalidArgument, "bad order"))
		for range 2 {
			if a := h.send("tok", "k", payload("o1")); status.Code(a.err) != codes.InvalidArgument {
				t.Fatalf("transactional %t: %v, want the handler's INVALID_ARGUMENT", transactional, a.err)
			}
		}
		h.wantCalls(t, 1)
		if h.hasOrder("o1") {
			t.Errorf("transactional %t: the order of an answer that is an error was stored", transactional)
		}
	}
}

func TestTransactional_FailedWrite_UnavailableNothingStoredKeyRunsFresh(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall))
	h.writeOrder(t, nil)
	fail := true
	inner := h.service.handler
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if fail {
			h.db.Update(ctx, func(tx *bolt.Tx) error { return errInjected })
		}
		return inner(ctx, req)
	}
	a := h.send("tok", "k", payload("o1"))
	if status.Code(a.err) != codes.Unavailable || a.replayed() {
		t.Fatalf("failed write: %v, want UNAVAILABLE", a.err)
	}
	if h.hasOrder("o1") {
		t.Error("the order of a failed commit was stored")
	}
	fail = false
	if a := h.send("tok", "k", payload("o1")); a.err != nil || a.replayed() {
		t.Fatalf("retry: replayed %t, %v; want a fresh run that succeeds", a.replayed(), a.err)
	}
	if !h.hasOrder("o1") {
		t.Error("the retry's order was not stored")
	}
	h.wantCalls(t, 2)
}

// countOrders makes the handler add one to a stored count as a repository
// would, with a compare-and-set staged through the store: read the count,
// then write count+1 if it is unchanged, else fail with ErrConflict. It
// answers with the count it wrote.
func (h *harness) countOrders(t *testing.T) {
	t.Helper()
	count := []byte("count")
	if err := h.db.Update(context.Background(), func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketOrders)
		if err != nil {
			return err
		}
		return b.Put(count, []byte("0"))
	}); err != nil {
		t.Fatal(err)
	}
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		var read []byte
		h.db.View(ctx, func(tx *bolt.Tx) error {
			read = bytes.Clone(tx.Bucket(bucketOrders).Get(count))
			return nil
		})
		n, err := strconv.Atoi(string(read))
		if err != nil {
			return nil, err
		}
		next := []byte(strconv.Itoa(n + 1))
		err = h.db.Update(ctx, func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketOrders)
			if !bytes.Equal(b.Get(count), read) {
				return fmt.Errorf("count changed: %w", boltstore.ErrConflict)
			}
			return b.Put(count, next)
		})
		if err != nil {
			return nil, err
		}
		return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: next}}, nil
	}
}

// Requests under different keys that change the same data race: all but
// one of each race lose their compare-and-set at commit. A transactional
// method is run again on the data as it now stands, so each is answered as
// if they had come one after another, and no change is lost.
func TestTransactional_ConflictingWrites_RunAgainNoChangeLost(t *testing.T) {
	h := start(t, interceptor.WithTransactional(unaryCall))
	h.countOrders(t)
	const n = 6
	answers := make([]call, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = h.send("tok", fmt.Sprintf("k%d", i), payload("+1"))
		})
	}
	close(start)
	wg.Wait()
	counts := map[string]bool{}
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("request %d: %v", i, a.err)
		}
		if got := a.header.Get(wire.ExpiresAtHeader); len(got) != 1 {
			t.Errorf("request %d: %s %q, want one value", i, wire.ExpiresAtHeader, got)
		}
		counts[string(a.resp.Payload.Body)] = true
	}
	for c := 1; c <= n; c++ {
		if !counts[strconv.Itoa(c)] {
			t.Errorf("answers wrote counts %v, want each of 1..%d once", counts, n)
		}
	}
	for i, a := range answers { // the answer that was stored is the one given
		if again := h.send("tok", fmt.Sprintf("k%d", i), payload("+1")); again.err != nil || !again.replayed() ||
			!bytes.Equal(again.resp.Payload.Body, a.resp.Payload.Body) {
			t.Errorf("retry of request %d: replayed %t, %v, %v; want the replay of %s", i, again.replayed(), again.resp, again.err, a.resp.Payload.Body)
		}
	}
}

// recordingObserver keeps what the observer was told.
type recordingObserver struct {
	mu       sync.Mutex
	claimed  int
	finished []once.Observation
}

func (o *recordingObserver) Claimed(context.Context, once.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed++
}

func (o *recordingObserver) Finished(_ context.Context, obs once.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished = append(o.finished, obs)
}

// A request that runs again is one claim to the observer, with the runs
// counted, so that an observer's gauge of claims in flight (Claimed up,
// Finished down) returns to zero.
func TestTransactional_RunAgain_ObservedAsOneClaim(t *testing.T) {
	rec := &recordingObserver{}
	h := start(t, interceptor.WithTransactional(unaryCall), interceptor.WithObserver(rec))
	h.writeOrder(t, nil)
	inner := h.service.handler
	losses := 2
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if losses > 0 {
			losses--
			h.db.Update(ctx, func(tx *bolt.Tx) error { return fmt.Errorf("lost: %w", boltstore.ErrConflict) })
		}
		return inner(ctx, req)
	}
	if a := h.send("tok", "k", payload("o1")); a.err != nil {
		t.Fatal(a.err)
	}
	if rec.claimed != 1 || len(rec.finished) != 1 {
		t.Fatalf("observer told of %d claims and %d ends, want 1 and 1", rec.claimed, len(rec.finished))
	}
	if got := rec.finished[0]; got.Runs != 3 || got.Outcome != storage.OutcomeFresh || got.Attempt != 1 {
		t.Errorf("observed %d runs, outcome %v, attempt %d; want 3 runs of the fresh claim of attempt 1", got.Runs, got.Outcome, got.Attempt)
	}
}

// A write that loses every time ends, after a bounded number of runs, in
// ABORTED with nothing stored; the same key then runs afresh. A method
// that is not transactional may have acted outside the store, so it is
// never run again: its claim stays in flight, as after any failed commit.
func TestConflict_EveryRunLoses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []interceptor.Option
		wantCode codes.Code
		wantRuns int64
	}{
		{"transactional", []interceptor.Option{interceptor.WithTransactional(unaryCall)}, codes.Aborted, 8},
		{"durable claim", nil, codes.Unavailable, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.opts...)
			h.writeOrder(t, nil)
			inner := h.service.handler
			lose := true
			h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
				if lose {
					h.db.Update(ctx, func(tx *bolt.Tx) error { return fmt.Errorf("lost: %w", boltstore.ErrConflict) })
				}
				return inner(ctx, req)
			}
			a := h.send("tok", "k", payload("o1"))
			if status.Code(a.err) != tc.wantCode {
				t.Fatalf("answer %v, want %v", a.err, tc.wantCode)
			}
			if tc.wantCode == codes.Aborted {
				wantReason(t, a.err, codes.Aborted, wire.ReasonWriteConflict)
			}
			h.wantCalls(t, tc.wantRuns)
			if h.hasOrder("o1") {
				t.Error("an order was stored")
			}
			if tc.wantCode != codes.Aborted {
				return
			}
			lose = false
			if a := h.send("tok", "k", payload("o1")); a.err != nil || a.replayed() {
				t.Fatalf("retry: replayed %t, %v; want a fresh run that succeeds", a.replayed(), a.err)
			}
			if !h.hasOrder("o1") {
				t.Error("the retry's order was not stored")
			}
		})
	}
}

func TestRenewal_FailureIsLogged(t *testing.T) {
	const lease = 90 * time.Millisecond
	var mu sync.Mutex
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&lockedBuffer{mu: &mu, b: &buf}, nil))
	h, fs := startFaulty(t, interceptor.WithLease(lease), interceptor.WithClock(time.Now), interceptor.WithLogger(logger))
	fs.failRenew.Store(true)
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		time.Sleep(2 * lease)
		return echo(ctx, req)
	}
	h.send("tok", "k", payload("x")) // superseded or not: the log is what counts
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Contains(buf.Bytes(), []byte("lease renewal failed")) || !bytes.Contains(buf.Bytes(), []byte(errInjected.Error())) {
		t.Errorf("log = %q, want the failed renewal and its cause", buf.String())
	}
}

type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
