package interceptor_test

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/internal/testkit/testclock"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// testService is grpc.testing.TestService whose UnaryCall runs a test's
// handler and counts the runs.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	calls   atomic.Int64
	handler func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error)
}

func (s *testService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.calls.Add(1)
	return s.handler(ctx, req)
}

// blockFirstAttempt makes the handler's first attempt close running and
// wait for release before it answers; later attempts answer at once.
func (s *testService) blockFirstAttempt() (running, release chan struct{}) {
	running, release = make(chan struct{}), make(chan struct{})
	s.handler = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if attempt, _ := once.AttemptFrom(ctx); attempt == 1 {
			close(running)
			<-release
		}
		return echo(ctx, req)
	}
	return running, release
}

// echo answers with the request's payload.
func echo(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: req.Payload, Username: "attempt"}, nil
}

type harness struct {
	addr    string
	client  testgrpc.TestServiceClient
	service *testService
	db      *boltstore.DB
	clock   *testclock.Clock
}

// start serves a testService behind the interceptor, with a bbolt store in
// a temporary directory, on a loopback port.
func start(t *testing.T, opts ...interceptor.Option) *harness {
	t.Helper()
	return startWith(t, func(db *boltstore.DB) storage.Store { return db }, opts...)
}

// startWith is start with the store that wrap makes of the bbolt store.
func startWith(t *testing.T, wrap func(*boltstore.DB) storage.Store, opts ...interceptor.Option) *harness {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "idempotency.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{service: &testService{handler: echo}, db: db, clock: testclock.New()}
	opts = append([]interceptor.Option{
		interceptor.WithClock(h.clock.Now),
		interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired),
	}, opts...)
	srv := grpc.NewServer(grpc.UnaryInterceptor(interceptor.MustUnaryServerInterceptor(wrap(db), opts...)))
	testgrpc.RegisterTestServiceServer(srv, h.service)
	var conn *grpc.ClientConn
	h.addr, conn = serveAndDial(t, srv, db)
	h.client = testgrpc.NewTestServiceClient(conn)
	return h
}

// serveAndDial serves srv on a loopback port and dials it with dialOpts.
// The connection, the server and then db are closed when t ends.
func serveAndDial(t *testing.T, srv *grpc.Server, db *boltstore.DB, dialOpts ...grpc.DialOption) (string, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		db.Close()
	})
	return lis.Addr().String(), conn
}

// call is one answer, with its metadata.
type call struct {
	resp    *testgrpc.SimpleResponse
	err     error
	header  metadata.MD
	trailer metadata.MD
}

// call sends req with the given metadata pairs.
func (h *harness) call(req *testgrpc.SimpleRequest, kv ...string) call {
	var c call
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
	c.resp, c.err = h.client.UnaryCall(ctx, req, grpc.Header(&c.header), grpc.Trailer(&c.trailer))
	return c
}

// send calls with a credential and key.
func (h *harness) send(token, key string, req *testgrpc.SimpleRequest) call {
	return h.call(req, "authorization", "Bearer "+token, wire.KeyHeader, key)
}

func (c call) replayed() bool { return len(c.header.Get(wire.ReplayedHeader)) > 0 }

// withKey returns ctx sending a credential and key.
func withKey(ctx context.Context, token, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, wire.KeyHeader, key)
}

func payload(s string) *testgrpc.SimpleRequest {
	return &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(s)}}
}

func (h *harness) wantCalls(t *testing.T, want int64) {
	t.Helper()
	if got := h.service.calls.Load(); got != want {
		t.Errorf("handler ran %d times, want %d", got, want)
	}
}

// wantReason checks err's code and ErrorInfo reason and returns its status.
func wantReason(t *testing.T, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("code = %v (%q), want %v", st.Code(), st.Message(), code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.Reason != reason || info.Domain != wire.ErrorDomain {
				t.Fatalf("ErrorInfo = %s/%s, want %s/%s", info.Domain, info.Reason, wire.ErrorDomain, reason)
			}
			return st
		}
	}
	t.Fatalf("no ErrorInfo in %v", st.Details())
	return nil
}

// newRetryingClient is a client of h's server through the client
// interceptor, for UnaryCall.
func newRetryingClient(t *testing.T, h *harness, opts ...retry.Option) testgrpc.TestServiceClient {
	t.Helper()
	opts = append([]retry.Option{retry.WithMethods(testgrpc.TestService_UnaryCall_FullMethodName)}, opts...)
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(retry.MustUnaryClientInterceptor(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}
