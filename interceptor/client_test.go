package interceptor_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/wire"
)

// flaky is a server interceptor in front of the idempotency layer that
// records the key of every attempt and can fail attempts before they reach
// it, as a lossy network or a restarting load balancer would.
type flaky struct {
	mu   sync.Mutex
	keys []string
	fail func(attempt int, ctx context.Context) error // nil passes the attempt on
	// lose, when it says so of an attempt, loses its answer after its
	// header went out, as a connection cut between the header and the
	// status does: the client sees the header, then UNAVAILABLE.
	lose func(attempt int) bool
}

func (f *flaky) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	f.mu.Lock()
	f.keys = append(f.keys, strings.Join(metadata.ValueFromIncomingContext(ctx, wire.KeyHeader), ","))
	n := len(f.keys)
	f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(n, ctx); err != nil {
			return nil, err
		}
	}
	resp, err := handler(ctx, req)
	if f.lose != nil && f.lose(n) {
		grpc.SendHeader(ctx, nil) // what the handler set, the replayed marker included
		return nil, status.Error(codes.Unavailable, "connection lost after the header")
	}
	return resp, err
}

func (f *flaky) attempts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

type clientHarness struct {
	client  testgrpc.TestServiceClient // with the client interceptor
	plain   testgrpc.TestServiceClient // without
	service *testService
	flaky   *flaky
}

func startClient(t *testing.T, copts ...retry.Option) *clientHarness {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "idempotency.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &clientHarness{service: &testService{handler: echo}, flaky: &flaky{}}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(h.flaky.intercept,
		interceptor.MustUnaryServerInterceptor(db, interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))))
	testgrpc.RegisterTestServiceServer(srv, h.service)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	copts = append([]retry.Option{
		retry.WithMethods(testgrpc.TestService_UnaryCall_FullMethodName),
		retry.WithBackoff(time.Millisecond, 10*time.Millisecond),
	}, copts...)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(retry.MustUnaryClientInterceptor(copts...)))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); plain.Close(); srv.Stop(); db.Close() })
	h.client, h.plain = testgrpc.NewTestServiceClient(conn), testgrpc.NewTestServiceClient(plain)
	return h
}

func authed() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok")
}

func unavailable(int, context.Context) error {
	return status.Error(codes.Unavailable, "connection lost")
}

func TestClient_AttachesOneKeyAcrossRetries(t *testing.T) {
	h := startClient(t)
	h.flaky.fail = func(n int, ctx context.Context) error {
		if n <= 2 {
			return unavailable(n, ctx)
		}
		return nil
	}
	resp, err := h.client.UnaryCall(authed(), payload("x"))
	if err != nil || string(resp.Payload.Body) != "x" {
		t.Fatalf("call: %v, %v", resp, err)
	}
	keys := h.flaky.attempts()
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("keys of the attempts %q, want one key three times", keys)
	}
	if id, err := uuid.Parse(keys[0]); err != nil || id.Version() != 4 {
		t.Errorf("key %q is not a UUID v4", keys[0])
	}
	h.client.UnaryCall(authed(), payload("x"))
	if next := h.flaky.attempts(); next[len(next)-1] == keys[0] {
		t.Errorf("a second call reused the first call's key")
	}
}

func TestClient_KeepsTheCallersKey(t *testing.T) {
	h := startClient(t)
	ctx := metadata.AppendToOutgoingContext(authed(), wire.KeyHeader, "my-key")
	if _, err := h.client.UnaryCall(ctx, payload("x")); err != nil {
		t.Fatal(err)
	}
	if keys := h.flaky.attempts(); len(keys) != 1 || keys[0] != "my-key" {
		t.Errorf("keys %q, want [my-key]", keys)
	}
}

func TestClient_NeverRetriesAStoredResultOrMismatch(t *testing.T) {
	h := startClient(t)
	h.service.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		return nil, status.Error(codes.Unavailable, "downstream said no")
	}
	// The handler's UNAVAILABLE is stored: the retry gets it replayed, and
	// a replay is never retried.
	if _, err := h.client.UnaryCall(authed(), payload("x")); status.Code(err) != codes.Unavailable {
		t.Fatalf("stored UNAVAILABLE: %v", err)
	}
	if n := len(h.flaky.attempts()); n != 2 {
		t.Errorf("%d attempts, want 2: the first and the one that saw the replay", n)
	}
	h.service.handler = echo
	ctx := metadata.AppendToOutgoingContext(authed(), wire.KeyHeader, "k")
	h.client.UnaryCall(ctx, payload("x"))
	before := len(h.flaky.attempts())
	if _, err := h.client.UnaryCall(ctx, payload("y")); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("mismatch: %v", err)
	}
	if n := len(h.flaky.attempts()) - before; n != 1 {
		t.Errorf("a mismatch was tried %d times, want 1", n)
	}
}

// A replay whose header arrived but whose status did not (the connection
// was cut between them) is retried, and the next attempt gets the answer:
// only a stored error, whose marker comes with its status, is final.
func TestClient_RetriesAReplayCutBeforeItsStatus(t *testing.T) {
	h := startClient(t)
	h.flaky.lose = func(n int) bool { return n == 2 }
	ctx := metadata.AppendToOutgoingContext(authed(), wire.KeyHeader, "cut")
	if _, err := h.plain.UnaryCall(ctx, payload("x")); err != nil {
		t.Fatal(err)
	}
	resp, err := h.client.UnaryCall(ctx, payload("x"))
	if err != nil || string(resp.Payload.Body) != "x" {
		t.Fatalf("a replay cut before its status: %v, %v; want it retried and answered", resp, err)
	}
	if n := len(h.flaky.attempts()); n != 3 {
		t.Errorf("%d attempts, want 3: the first, the replay cut, the replay", n)
	}
	h.wantCallsOf(t, 1)
}

func TestClient_WaitsOutKeyInUseThenGetsTheResult(t *testing.T) {
	h := startClient(t)
	running, release := h.service.blockFirstAttempt()
	ctx := metadata.AppendToOutgoingContext(authed(), wire.KeyHeader, "busy")
	go h.plain.UnaryCall(ctx, payload("x"))
	<-running
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	resp, err := h.client.UnaryCall(ctx, payload("x"))
	if err != nil || string(resp.Payload.Body) != "x" {
		t.Fatalf("retrying through IN_USE: %v, %v", resp, err)
	}
	h.wantCallsOf(t, 1)
}

// An UNAVAILABLE that carries a RetryInfo, as a scope's records away for
// now do, is retried no sooner than its delay.
func TestClient_UnavailableWaitsOutItsRetryDelay(t *testing.T) {
	h := startClient(t)
	firstAt := make(chan time.Time, 1)
	h.flaky.fail = func(attempt int, _ context.Context) error {
		if attempt > 1 {
			return nil
		}
		firstAt <- time.Now()
		st, _ := status.New(codes.Unavailable, "scope away").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(200 * time.Millisecond)})
		return st.Err()
	}
	if _, err := h.client.UnaryCall(authed(), payload("x")); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
	if waited := time.Since(<-firstAt); waited < 200*time.Millisecond {
		t.Errorf("retried after %v, want no sooner than the 200ms asked", waited)
	}
	h.wantCallsOf(t, 1)
}

func TestClient_BoundedAttemptsAndDeadline(t *testing.T) {
	h := startClient(t, retry.WithMaxAttempts(4))
	h.flaky.fail = unavailable
	if _, err := h.client.UnaryCall(authed(), payload("x")); status.Code(err) != codes.Unavailable {
		t.Fatalf("always unavailable: %v", err)
	}
	if n := len(h.flaky.attempts()); n != 4 {
		t.Errorf("%d attempts, want 4", n)
	}

	slow := startClient(t, retry.WithMaxAttempts(1000), retry.WithBackoff(50*time.Millisecond, time.Second))
	slow.flaky.fail = unavailable
	ctx, cancel := context.WithTimeout(authed(), 300*time.Millisecond)
	defer cancel()
	_, err := slow.client.UnaryCall(ctx, payload("x"))
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("past the deadline: %v", err)
	}
	if n := len(slow.flaky.attempts()); n >= 1000 {
		t.Errorf("%d attempts: the deadline did not stop the retries", n)
	}
}

func TestClient_RetriesAnAttemptsOwnTimeout(t *testing.T) {
	h := startClient(t, retry.WithAttemptTimeout(50*time.Millisecond))
	h.flaky.fail = func(n int, ctx context.Context) error {
		if n == 1 { // the first attempt hangs before reaching the server's layer
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	}
	if _, err := h.client.UnaryCall(authed(), payload("x")); err != nil {
		t.Fatalf("after a timed-out attempt: %v", err)
	}
	if n := len(h.flaky.attempts()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
}

func TestClient_OtherMethodsUntouched(t *testing.T) {
	h := startClient(t) // UnaryCall is configured; EmptyCall is not
	h.flaky.fail = unavailable
	_, err := h.client.EmptyCall(authed(), &testgrpc.Empty{})
	if keys := h.flaky.attempts(); status.Code(err) != codes.Unavailable || len(keys) != 1 || keys[0] != "" {
		t.Errorf("EmptyCall: %v, keys %q; want one attempt with no key", err, keys)
	}
}

func (h *clientHarness) wantCallsOf(t *testing.T, want int64) {
	t.Helper()
	if got := h.service.calls.Load(); got != want {
		t.Errorf("handler ran %d times, want %d", got, want)
	}
}
