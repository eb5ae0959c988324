package interceptor_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// faultyStore is the real bbolt store with failures switched on by the test,
// standing in for a full disk or a lost database connection.
type faultyStore struct {
	*boltstore.DB
	failClaim, failRenew, failComplete atomic.Bool
	outcomeUnknown                     atomic.Bool // completions fail not knowing if they were kept
	damaged                            atomic.Bool // failures say the data is damaged
	scopeAway                          atomic.Bool // claims fail for the scope alone, as a pod down does
	renewals                           atomic.Int64
}

// completeFault is the error of a completion that fails.
func (s *faultyStore) completeFault() error {
	if s.outcomeUnknown.Load() {
		return fmt.Errorf("fdatasync after the meta page: %w: %w", storage.ErrOutcomeUnknown, errInjected)
	}
	return s.fault()
}

// fault is the error of a claim that fails.
func (s *faultyStore) fault() error {
	if s.damaged.Load() {
		return fmt.Errorf("page 7: %w: %w", storage.ErrDamaged, errInjected)
	}
	return errInjected
}

var errInjected = errors.New("injected storage fault")

// scopeFault is the error of a claim whose scope is away.
func scopeFault(scope string) error {
	return &storage.ScopeUnavailableError{Scope: scope, Why: "moving", RetryAfter: 300 * time.Millisecond, Err: errInjected}
}

func (s *faultyStore) Claim(ctx context.Context, req storage.ClaimRequest) (storage.Outcome, *storage.Record, error) {
	if s.scopeAway.Load() {
		return 0, nil, scopeFault(req.Key.Scope)
	}
	if s.failClaim.Load() {
		return 0, nil, s.fault()
	}
	return s.DB.Claim(ctx, req)
}

func (s *faultyStore) ClaimTx(ctx context.Context, req storage.ClaimRequest, durable storage.Durability) (storage.Outcome, *storage.Record, storage.Tx, error) {
	if s.scopeAway.Load() {
		return 0, nil, nil, scopeFault(req.Key.Scope)
	}
	if s.failClaim.Load() {
		return 0, nil, nil, s.fault()
	}
	outcome, rec, tx, err := s.DB.ClaimTx(ctx, req, durable)
	if tx != nil {
		tx = &faultyTx{Tx: tx, store: s}
	}
	return outcome, rec, tx, err
}

// faultyTx fails its commit when the store's completions fail.
type faultyTx struct {
	storage.Tx
	store *faultyStore
}

func (t *faultyTx) Commit(ctx context.Context, done *storage.Record) error {
	if t.store.failComplete.Load() {
		t.Tx.Rollback()
		return t.store.completeFault()
	}
	return t.Tx.Commit(ctx, done)
}

func (s *faultyStore) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	s.renewals.Add(1)
	if s.failRenew.Load() {
		return errInjected
	}
	return s.DB.Renew(ctx, key, claim)
}

func (s *faultyStore) Complete(ctx context.Context, key storage.RecordKey, done *storage.Record) error {
	if s.failComplete.Load() {
		return s.completeFault()
	}
	return s.DB.Complete(ctx, key, done)
}

// startFaulty is start with a faultyStore in front of the bbolt store.
func startFaulty(t *testing.T, opts ...interceptor.Option) (*harness, *faultyStore) {
	t.Helper()
	var fs *faultyStore
	h := startWith(t, func(db *boltstore.DB) storage.Store {
		fs = &faultyStore{DB: db}
		return fs
	}, opts...)
	return h, fs
}

func TestFault_ClaimFails_UnavailableHandlerNotRun(t *testing.T) {
	h, fs := startFaulty(t)
	fs.failClaim.Store(true)
	if a := h.send("tok", "k", payload("x")); status.Code(a.err) != codes.Unavailable {
		t.Errorf("claim failure: %v, want UNAVAILABLE", a.err)
	}
	h.wantCalls(t, 0)
	fs.failClaim.Store(false)
	if a := h.send("tok", "k", payload("x")); a.err != nil {
		t.Errorf("after the fault: %v, want the key to run fresh", a.err)
	}
	h.wantCalls(t, 1)
}

// A scope the store cannot serve for now is UNAVAILABLE with its reason,
// why and retry delay; its cause stays in the log, and the request is not
// run. The same key runs once the scope is back.
func TestFault_ScopeUnavailable_RetryDelayHandlerNotRun(t *testing.T) {
	h, fs := startFaulty(t)
	fs.scopeAway.Store(true)
	a := h.send("tok", "k", payload("x"))
	st := wantReason(t, a.err, codes.Unavailable, wire.ReasonScopeUnavailable)
	if !strings.Contains(st.Message(), "moving") || strings.Contains(st.Message(), errInjected.Error()) {
		t.Errorf("message %q: want why (moving), not the cause", st.Message())
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.RetryDelay.AsDuration()
		}
	}
	if delay != 300*time.Millisecond {
		t.Errorf("RetryInfo delay %v, want the store's 300ms", delay)
	}
	h.wantCalls(t, 0)
	fs.scopeAway.Store(false)
	if a := h.send("tok", "k", payload("x")); a.err != nil {
		t.Errorf("scope back: %v, want the key to run fresh", a.err)
	}
	h.wantCalls(t, 1)
}

// A store's ErrDamaged, however wrapped, is DATA_LOSS for the caller, on a
// claim (the handler does not run) and on a completion (its result was
// not stored); the cause reaches the observer, never the caller.
func TestFault_StoreDamaged_DataLoss(t *testing.T) {
	obs := &recordingObserver{}
	h, fs := startFaulty(t, interceptor.WithObserver(obs))
	fs.damaged.Store(true)
	fs.failClaim.Store(true)
	a := h.send("tok", "k", payload("x"))
	if st := status.Convert(a.err); st.Code() != codes.DataLoss || !strings.Contains(st.Message(), "not run") || strings.Contains(st.Message(), "page 7") {
		t.Errorf("damaged claim: %v, want DATA_LOSS saying the request was not run, without the cause", a.err)
	}
	h.wantCalls(t, 0)
	fs.failClaim.Store(false)
	fs.failComplete.Store(true)
	a = h.send("tok", "k2", payload("x"))
	if st := status.Convert(a.err); st.Code() != codes.DataLoss || !strings.Contains(st.Message(), "attempt 1 was not stored") {
		t.Errorf("damaged completion: %v, want DATA_LOSS saying the result of attempt 1 was not stored", a.err)
	}
	h.wantCalls(t, 1)
	obs.mu.Lock()
	got := obs.finished
	obs.mu.Unlock()
	if len(got) != 2 || !errors.Is(got[0].Err, storage.ErrDamaged) || !errors.Is(got[1].Err, storage.ErrDamaged) {
		t.Errorf("observed %+v, want both failures with their ErrDamaged cause", got)
	}
}

func TestFault_CompleteFails_RecordStaysInFlightUntilTakeover(t *testing.T) {
	h, fs := startFaulty(t, interceptor.WithLease(time.Minute))
	fs.failComplete.Store(true)
	if a := h.send("tok", "k", payload("x")); status.Code(a.err) != codes.Unavailable {
		t.Fatalf("completion failure: %v, want UNAVAILABLE", a.err)
	}
	fs.failComplete.Store(false)
	// The call happened: its record is in flight, not gone.
	wantReason(t, h.send("tok", "k", payload("x")).err, codes.Aborted, wire.ReasonKeyInUse)
	h.clock.Advance(time.Minute)
	a := h.send("tok", "k", payload("x"))
	if a.err != nil {
		t.Fatalf("after the lease: %v, want a takeover that succeeds", a.err)
	}
	if again := h.send("tok", "k", payload("x")); again.err != nil || !again.replayed() {
		t.Errorf("retry: %v, want the takeover's result replayed", again.err)
	}
	h.wantCalls(t, 2)
}

// A commit whose outcome the store cannot tell is never answered as one
// that stored nothing: the caller is told it is unknown, and to retry with
// the same key; the observer gets the cause.
func TestFault_OutcomeUnknown_CallerToldSoRetryWithTheSameKey(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []interceptor.Option
		retry string // what the message says a retry does if nothing was kept
	}{
		{"transactional", []interceptor.Option{interceptor.WithTransactional(unaryCall)}, "runs the request if it was not"},
		{"durable claim", nil, "takes the request over once its lease ends"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, fs := startFaulty(t, tc.opts...)
			fs.failComplete.Store(true)
			fs.outcomeUnknown.Store(true)
			a := h.send("tok", "k", payload("x"))
			st := wantReason(t, a.err, codes.Unavailable, wire.ReasonOutcomeUnknown)
			if msg := st.Message(); !strings.Contains(msg, "cannot tell whether") || !strings.Contains(msg, "same key") ||
				!strings.Contains(msg, tc.retry) || strings.Contains(msg, "not kept") {
				t.Errorf("message %q: want it to say the outcome is unknown, to retry with the same key, and that the retry %s", msg, tc.retry)
			}
		})
	}
}

// renewFailing is a store shared by processes (memstore: the lease rule
// alone decides) whose renewals fail.
type renewFailing struct {
	*memstore.Store
	renewals atomic.Int64
}

func (s *renewFailing) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	s.renewals.Add(1)
	return errInjected
}

func TestFault_SharedStoreRenewFails_LeaseRunsOutAndAttemptIsSuperseded(t *testing.T) {
	const lease = 150 * time.Millisecond
	fs := &renewFailing{Store: memstore.New()}
	h := startWith(t, func(*boltstore.DB) storage.Store { return fs },
		interceptor.WithLease(lease), interceptor.WithClock(time.Now))
	running, release := h.service.blockFirstAttempt()
	first := make(chan call, 1)
	go func() { first <- h.send("tok", "k", payload("x")) }()
	<-running
	// Retry until the unrenewed lease runs out and a retry takes over.
	var second call
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(lease / 10) {
		if second = h.send("tok", "k", payload("x")); status.Code(second.err) != codes.Aborted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no takeover within a minute although renewals fail")
		}
	}
	if second.err != nil {
		t.Fatalf("takeover: %v", second.err)
	}
	if fs.renewals.Load() == 0 {
		t.Error("no renewal was attempted")
	}
	close(release)
	wantReason(t, (<-first).err, codes.Aborted, wire.ReasonAttemptSuperseded)
	h.wantCalls(t, 2)
}

func TestRenewal_SlowLiveWorkerIsNeverTakenOver(t *testing.T) {
	const lease = 300 * time.Millisecond
	h, fs := startFaulty(t, interceptor.WithLease(lease), interceptor.WithClock(time.Now))
	running, release := h.service.blockFirstAttempt()
	first := make(chan call, 1)
	defer close(release)
	go func() { first <- h.send("tok", "k", payload("x")) }()
	<-running
	// Retry for three leases; renewals happen every third of one.
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 10) {
		wantReason(t, h.send("tok", "k", payload("x")).err, codes.Aborted, wire.ReasonKeyInUse)
	}
	release <- struct{}{}
	if a := <-first; a.err != nil {
		t.Fatalf("slow worker: %v, want its result", a.err)
	}
	h.wantCalls(t, 1)
	if fs.renewals.Load() < 3 {
		t.Errorf("%d renewals in three leases, want at least 3", fs.renewals.Load())
	}
	// Renewal stopped with the handler: nothing renews a completed record.
	n := fs.renewals.Load()
	time.Sleep(lease)
	if fs.renewals.Load() != n {
		t.Errorf("renewals went on after the handler returned")
	}
}

// countingRenewals is memstore, a store shared by processes (claims are
// durable and renewed), counting its renewals.
type countingRenewals struct {
	*memstore.Store
	renewals atomic.Int64
}

func (s *countingRenewals) Renew(ctx context.Context, key storage.RecordKey, claim *storage.Record) error {
	s.renewals.Add(1)
	return s.Store.Renew(ctx, key, claim)
}

// A handler that panics under a server that recovers panics must not leave
// its claim renewed for good: renewals stop with it, so that a retry takes
// the claim over once its lease ends, as it would a dead worker's.
func TestRenewal_StopsWhenTheHandlerPanics(t *testing.T) {
	const lease = 30 * time.Millisecond
	store := &countingRenewals{Store: memstore.New()}
	intercept := interceptor.MustUnaryServerInterceptor(store, interceptor.WithLease(lease),
		interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))
	ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("authorization", "Bearer tok", wire.KeyHeader, "k")), transport{})
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic did not reach the server")
			}
		}()
		intercept(ctx, payload("x"), info, func(context.Context, any) (any, error) {
			for store.renewals.Load() < 2 { // its claim is being renewed
				time.Sleep(lease / 10)
			}
			panic("handler bug")
		})
	}()
	n := store.renewals.Load()
	time.Sleep(5 * lease)
	if more := store.renewals.Load() - n; more != 0 {
		t.Errorf("%d renewals after the handler panicked, want none", more)
	}
	resp, err := intercept(ctx, payload("x"), info, func(ctx context.Context, req any) (any, error) {
		return echo(ctx, req.(*testgrpc.SimpleRequest))
	})
	if err != nil || resp == nil {
		t.Errorf("retry past the lease: %v, want a takeover that runs", err)
	}
}

func TestRestart_OrphanedClaimTakenOverAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idempotency.db")
	// serve runs a "process": a store on path and a server; stop closes the
	// connection and the store, as a crash would let go of them.
	serve := func(handler func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error)) (h *harness, crash func()) {
		db, err := boltstore.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		h = &harness{service: &testService{handler: handler}, db: db}
		srv := grpc.NewServer(grpc.UnaryInterceptor(interceptor.MustUnaryServerInterceptor(db,
			interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))))
		testgrpc.RegisterTestServiceServer(srv, h.service)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		t.Cleanup(srv.Stop) // after the hung handler is released below
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		h.client = testgrpc.NewTestServiceClient(conn)
		return h, func() { conn.Close(); lis.Close(); db.Close() }
	}

	// The first process claims the key, then dies with its handler hung.
	running, hung := make(chan struct{}), make(chan struct{})
	first, crash := serve(func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		close(running)
		<-hung
		return echo(ctx, req)
	})
	t.Cleanup(func() { close(hung) })
	go first.client.UnaryCall(withKey(context.Background(), "tok", "k"), payload("x"))
	<-running
	crash()

	// Within the 30s default lease, the restarted process takes it over.
	second, stop := serve(echo)
	defer stop()
	a := second.send("tok", "k", payload("x"))
	if a.err != nil || a.replayed() {
		t.Fatalf("retry after restart: %v (replayed %t), want a takeover run", a.err, a.replayed())
	}
	second.wantCalls(t, 1)
}

func TestResult_4MiBResponseStoredAndReplayed(t *testing.T) {
	h := start(t)
	body := make([]byte, 4<<20)
	rand.Read(body)
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: body}}, nil
	}
	big := grpc.MaxCallRecvMsgSize(8 << 20)
	first, err := h.client.UnaryCall(withKey(context.Background(), "tok", "k"), payload("x"), big)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.client.UnaryCall(withKey(context.Background(), "tok", "k"), payload("x"), big)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marshal(t, again), marshal(t, first); string(got) != string(want) || len(again.Payload.Body) != 4<<20 {
		t.Errorf("replayed %d bytes, want the original %d", len(got), len(want))
	}
	h.wantCalls(t, 1)
}

func TestResult_OverLimitReplacedByStoredError(t *testing.T) {
	h := start(t, interceptor.WithMaxResultSize(1<<10))
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, 2<<10)}}, nil
	}
	first := h.send("tok", "k", payload("x"))
	again := h.send("tok", "k", payload("x"))
	if status.Code(first.err) != codes.Internal || !again.replayed() ||
		status.Convert(again.err).Message() != status.Convert(first.err).Message() {
		t.Errorf("over the limit: %v, then %v (replayed %t); want INTERNAL, replayed", first.err, again.err, again.replayed())
	}
	h.wantCalls(t, 1)
}
