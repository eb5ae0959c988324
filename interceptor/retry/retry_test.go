package retry_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/wire"
)

// Options that cannot work are refused when the interceptor is built, not
// discovered as a silent no-op later. (The retries themselves are tested
// against the real server interceptor, in package interceptor's tests.)
func TestUnaryClientInterceptor_BadOptions_AreErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []retry.Option
		want string
	}{
		{"no methods", nil, "WithMethods"},
		{"malformed method", []retry.Option{retry.WithMethods("PlaceOrder")}, `"PlaceOrder"`},
		{"no attempts", []retry.Option{retry.WithMethods("/s.S/M"), retry.WithMaxAttempts(0)}, "WithMaxAttempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if i, err := retry.UnaryClientInterceptor(tc.opts...); err == nil || i != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UnaryClientInterceptor = %v, %v; want an error naming %q", i != nil, err, tc.want)
			}
		})
	}
}

// A bare io.EOF, which grpc-go can return for a unary call whose stream
// closed before its request was sent, is the connection's failure: the
// call is tried again, with the same key.
func TestUnaryClientInterceptor_BareEOF_RetriedWithTheSameKey(t *testing.T) {
	const method = "/shop.v1.Orders/Place"
	i := retry.MustUnaryClientInterceptor(retry.WithMethods(method), retry.WithBackoff(time.Millisecond, time.Millisecond))
	var keys []string
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		keys = append(keys, md.Get(wire.KeyHeader)...)
		if len(keys) == 1 {
			return io.EOF
		}
		return nil
	}
	if err := i(context.Background(), method, nil, nil, nil, invoker); err != nil {
		t.Fatalf("call after a bare EOF: %v, want the second attempt's nil", err)
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("attempts carried keys %q, want two of one key", keys)
	}
}
