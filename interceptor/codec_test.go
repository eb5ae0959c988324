package interceptor_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/storage"
)

// wireCapture is a client codec that keeps the bytes of each response it
// decodes, as they came off the wire.
type wireCapture struct {
	encoding.CodecV2
	mu    sync.Mutex
	bytes [][]byte
}

func (c *wireCapture) Unmarshal(data mem.BufferSlice, v any) error {
	c.mu.Lock()
	c.bytes = append(c.bytes, data.Materialize())
	c.mu.Unlock()
	return c.CodecV2.Unmarshal(data, v)
}

func (c *wireCapture) last() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes[len(c.bytes)-1]
}

// storedBytesServer serves a testService behind an outer interceptor and
// the idempotency interceptor WithStoredBytes, on a bbolt store, with
// serverOpts. It returns a client whose responses wire records.
func storedBytesServer(t *testing.T, outer grpc.UnaryServerInterceptor, wire *wireCapture, serverOpts ...grpc.ServerOption) (testgrpc.TestServiceClient, *boltstore.DB, *testService) {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "idempotency.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := &testService{handler: func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if string(req.GetPayload().GetBody()) == "refuse" {
			return nil, status.Error(codes.FailedPrecondition, "refused")
		}
		return echo(ctx, req)
	}}
	idem := interceptor.MustUnaryServerInterceptor(db, interceptor.WithStoredBytes(),
		interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired),
		interceptor.WithScope(func(context.Context) (string, error) { return "tenant", nil }))
	srv := grpc.NewServer(append(serverOpts, grpc.ChainUnaryInterceptor(outer, idem))...)
	testgrpc.RegisterTestServiceServer(srv, svc)
	_, conn := serveAndDial(t, srv, db, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire)))
	return testgrpc.NewTestServiceClient(conn), db, svc
}

// With Codec and WithStoredBytes, the first answer and its replays are
// the very bytes the record holds. An interceptor outside sees a
// *StoredResponse, which decodes to the handler's response. A stored
// error is still an error.
func TestCodec_StoredBytes_SentAsStored(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []any
	)
	outer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		mu.Lock()
		seen = append(seen, resp)
		mu.Unlock()
		return resp, err
	}
	wire := &wireCapture{CodecV2: encoding.GetCodecV2("proto")}
	client, db, svc := storedBytesServer(t, outer, wire,
		grpc.ForceServerCodecV2(interceptor.Codec(encoding.GetCodecV2("proto"))))

	ctx := withKey(context.Background(), "alice", "k-1")
	var answers [][]byte
	for range 3 {
		resp, err := client.UnaryCall(ctx, payload("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if want := (&testgrpc.SimpleResponse{Payload: payload("hello").Payload, Username: "attempt"}); !proto.Equal(resp, want) {
			t.Fatalf("response %v, want %v", resp, want)
		}
		answers = append(answers, wire.last())
	}
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	rec, err := db.Get(context.Background(), storage.RecordKey{Scope: "tenant", Key: "k-1"})
	if err != nil || rec == nil || rec.Result == nil || rec.Result.Response == nil {
		t.Fatalf("record %v, %v", rec, err)
	}
	for i, b := range answers {
		if string(b) != string(rec.Result.Response.Value) {
			t.Errorf("answer %d sent %x; the record holds %x", i, b, rec.Result.Response.Value)
		}
	}
	for i, v := range seen {
		sr, ok := v.(*interceptor.StoredResponse)
		if !ok {
			t.Fatalf("the outer interceptor saw %T, want *interceptor.StoredResponse", v)
		}
		m, err := sr.Message()
		if err != nil || !proto.Equal(m.(proto.Message), &testgrpc.SimpleResponse{Payload: payload("hello").Payload, Username: "attempt"}) {
			t.Errorf("answer %d decodes to %v, %v", i, m, err)
		}
	}

	// A stored error is answered as its status, fresh and replayed.
	ctx = withKey(context.Background(), "alice", "k-2")
	for range 2 {
		if _, err := client.UnaryCall(ctx, payload("refuse")); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("got %v, want FailedPrecondition", err)
		}
	}
}

// WithStoredBytes without Codec cannot send its answers: grpc-go's own
// codec refuses a *StoredResponse, and the call fails INTERNAL rather
// than answer anything else.
func TestCodec_StoredBytesWithoutCodec_Internal(t *testing.T) {
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(ctx, req)
	}
	client, _, _ := storedBytesServer(t, pass, &wireCapture{CodecV2: encoding.GetCodecV2("proto")})
	_, err := client.UnaryCall(withKey(context.Background(), "alice", "k-1"), payload("hello"))
	if status.Code(err) != codes.Internal {
		t.Fatalf("got %v, want Internal", err)
	}
}
