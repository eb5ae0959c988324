package interceptor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/wire"
)

// retryDelay returns the RetryInfo delay of an in-flight answer.
func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.Aborted {
		t.Fatalf("duplicate = %v, want ABORTED", err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration()
		}
	}
	t.Fatalf("ABORTED without RetryInfo: %v", err)
	return 0
}

// A duplicate of a request in flight is told to retry after about the
// method's usual handler time: a 300 ms handler's duplicate does not wait
// the full second it is told before the method has ever run.
func TestInFlight_RetryDelay_FollowsObservedHandlerTime(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	var intercept grpc.UnaryServerInterceptor
	call := func(key string, handler grpc.UnaryHandler) error {
		ctx := metadata.NewIncomingContext(context.Background(),
			metadata.Pairs("authorization", "Bearer token", wire.KeyHeader, key))
		_, err := intercept(grpc.NewContextWithServerTransportStream(ctx, transport{}), payload("x"), info, handler)
		return err
	}
	const took = 300 * time.Millisecond
	slow := func(ctx context.Context, req any) (any, error) {
		time.Sleep(took)
		return &testgrpc.SimpleResponse{}, nil
	}
	// hold runs the handler until release is closed, and reports when it runs.
	hold := func(running, release chan struct{}) grpc.UnaryHandler {
		return func(ctx context.Context, req any) (any, error) {
			close(running)
			<-release
			return &testgrpc.SimpleResponse{}, nil
		}
	}
	duplicateDelay := func(key string) time.Duration {
		running, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- call(key, hold(running, release)) }()
		<-running
		d := retryDelay(t, call(key, slow))
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return d
	}

	intercept = interceptor.MustUnaryServerInterceptor(memstore.New())
	if d := duplicateDelay("before"); d != time.Second {
		t.Errorf("retry delay before the method ever ran = %v, want 1s", d)
	}

	intercept = interceptor.MustUnaryServerInterceptor(memstore.New())
	for i := range 3 {
		if err := call(fmt.Sprint("run-", i), slow); err != nil {
			t.Fatal(err)
		}
	}
	if d := duplicateDelay("after"); d < took || d >= time.Second {
		t.Errorf("retry delay after runs of %v = %v, want about %v, under 1s", took, d, took)
	}
}
