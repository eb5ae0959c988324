package interceptor_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/wire"
)

// headerRefused is a call's stream that can no longer set a header, as
// when an outer interceptor has sent it already.
type headerRefused struct{ transport }

func (headerRefused) SetHeader(metadata.MD) error { return errors.New("header already sent") }

// The expiry header is set before the handler runs: a call that cannot
// carry it is refused before anything is done, never after a payment.
func TestExpiryHeaderRefused_HandlerNeverRuns(t *testing.T) {
	i := interceptor.MustUnaryServerInterceptor(memstore.New())
	ctx := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("authorization", "Bearer token", wire.KeyHeader, "k"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, headerRefused{})
	runs := 0
	_, err := i(ctx, &testgrpc.SimpleRequest{}, &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName},
		func(context.Context, any) (any, error) { runs++; return &testgrpc.SimpleResponse{}, nil })
	if status.Code(err) != codes.Internal || runs != 0 {
		t.Fatalf("call whose header cannot be set: %v after %d runs, want INTERNAL after none", err, runs)
	}
}
