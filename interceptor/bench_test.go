package interceptor_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/wire"
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
// in-memory store, against the bare handler. Each call's response is
// encoded for the wire too, as the server's codec would. So the variants
// WithStoredBytes, which send the record's bytes through Codec, compare
// with the default, which answers decoded messages:
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
	codec := interceptor.Codec(encoding.GetCodecV2("proto"))
	call := func(b *testing.B, intercept grpc.UnaryServerInterceptor, ctx context.Context) {
		out, err := intercept(ctx, req, info, handler)
		if err != nil {
			b.Fatal(err)
		}
		data, err := codec.Marshal(out)
		if err != nil {
			b.Fatal(err)
		}
		data.Free()
	}

	b.Run("BareHandler", func(b *testing.B) {
		ctx := ctxWith("k")
		for b.Loop() {
			out, _ := handler(ctx, req)
			data, _ := codec.Marshal(out)
			data.Free()
		}
	})
	for _, mode := range []struct {
		name string
		opts []interceptor.Option
	}{
		{"", nil},
		{"StoredBytes", []interceptor.Option{interceptor.WithStoredBytes()}},
	} {
		intercept := interceptor.MustUnaryServerInterceptor(memstore.New(),
			append(mode.opts, interceptor.WithDefaultKeyPolicy(interceptor.KeyRequired))...)
		rounds := 0 // the testing package runs a benchmark more than once: each round's keys are new
		b.Run("Fresh"+mode.name, func(b *testing.B) {
			rounds++
			ctxs := make([]context.Context, b.N)
			for i := range ctxs {
				ctxs[i] = ctxWith(fmt.Sprint("fresh-", rounds, "-", i))
			}
			b.ResetTimer()
			for i := range b.N {
				call(b, intercept, ctxs[i])
			}
		})
		b.Run("Replay"+mode.name, func(b *testing.B) {
			ctx := ctxWith("replay")
			call(b, intercept, ctx)
			for b.Loop() {
				call(b, intercept, ctx)
			}
		})
	}
}
