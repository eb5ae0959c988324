package interceptor_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/wire"
	"github.com/paymentsd/paymentsd/memstore"
)

// transport stands in for the call's grpc transport stream, which a
// benchmark without a network does not have: it takes the metadata the
// interceptor sets and drops it.
type transport struct{}

func (transport) Method() string                  { return testgrpc.TestService_UnaryCall_FullMethodName }
func (transport) SetHeader(md metadata.MD) error  { return nil }
func (transport) SendHeader(md metadata.MD) error { return nil }
func (transport) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkInterceptor measures the interceptor's own cost per call, on the
// in-memory store, against the bare handler:
//
//	go test -run '^$' -bench BenchmarkInterceptor -benchmem ./interceptor
func BenchmarkInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	req := &testgrpc.SimpleRequest{ResponseSize: 300, Payload: &testgrpc.Payload{Body: make([]byte, 100)}}
	resp := &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, 300)}, Username: "pi_0123"}
	handler := func(ctx context.Context, req any) (any, error) { return resp, nil }
	ctxWith := func(key string) context.Context {
		ctx := metadata.NewIncomingContext(context.Background(),
			metadata.Pairs("authorization", "Bearer bench-token", wire.KeyHeader, key))
		return grpc.NewContextWithServerTransportStream(ctx, transport{})
	}
	intercept := interceptor.MustUnaryServerInterceptor(memstore.New(), interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))

	b.Run("BareHandler", func(b *testing.B) {
		ctx := ctxWith("k")
		for b.Loop() {
			handler(ctx, req)
		}
	})
	b.Run("Fresh", func(b *testing.B) {
		ctxs := make([]context.Context, b.N)
		for i := range ctxs {
			ctxs[i] = ctxWith(fmt.Sprint("fresh-", i))
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := intercept(ctxs[i], req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		ctx := ctxWith("replay")
		if _, err := intercept(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := intercept(ctx, req, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}
