package interceptor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/wire"
)

// Options that cannot work are refused when the interceptor is built, not
// discovered as a silent no-op later.
func TestUnaryServerInterceptor_BadOptions_AreErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  interceptor.Option
		want string
	}{
		{"policy without leading slash", interceptor.WithKeyPolicy("shop.v1.Orders/PlaceOrder", interceptor.KeyRequired), "shop.v1.Orders/PlaceOrder"},
		{"policy with a dot for a slash", interceptor.WithKeyPolicy("/shop.v1.Orders.PlaceOrder", interceptor.KeyRequired), "/shop.v1.Orders.PlaceOrder"},
		{"policy without method", interceptor.WithKeyPolicy("/shop.v1.Orders/", interceptor.KeyRequired), "/shop.v1.Orders/"},
		{"transactional method with a space", interceptor.WithTransactional("/shop.v1.Orders/Place Order"), "Place Order"},
		{"lease not under ttl", interceptor.WithLease(48 * time.Hour), "lease"},
		{"ttl past the stores' times", interceptor.WithTTL(250 * 365 * 24 * time.Hour), "ttl <="},
		{"negative handler limit", interceptor.WithHandlerTimeout(-time.Second), "handler timeout"},
		{"negative result size", interceptor.WithMaxResultSize(-1), "max result size"},
		{"a success unstored", interceptor.WithoutStoring(codes.OK), "a success is always stored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, err := interceptor.UnaryServerInterceptor(memstore.New(), tc.opt)
			if err == nil || i != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UnaryServerInterceptor = %v, %v; want an error naming %q", i != nil, err, tc.want)
			}
			defer func() {
				if recover() == nil {
					t.Error("MustUnaryServerInterceptor did not panic")
				}
			}()
			interceptor.MustUnaryServerInterceptor(memstore.New(), tc.opt)
		})
	}
	if _, err := interceptor.UnaryServerInterceptor(memstore.New(),
		interceptor.WithKeyPolicy(testgrpc.TestService_UnaryCall_FullMethodName, interceptor.KeyRequired),
		interceptor.WithKeyPolicy("/NoPackage/Method", interceptor.KeyIgnored),
		interceptor.WithHandlerTimeout(0), interceptor.WithMaxResultSize(0)); err != nil { // zero takes the default
		t.Errorf("valid options: %v", err)
	}
}

// ChosenKey reports the key a call carried: the one the interceptor chose,
// as the server saw it, or the caller's own.
func TestChosenKey_ReportsTheKeyTheServerSaw(t *testing.T) {
	retrying := retry.MustUnaryClientInterceptor(retry.WithMethods(testgrpc.TestService_UnaryCall_FullMethodName))
	var sent string
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		sent = md.Get(wire.KeyHeader)[0]
		return nil
	}
	for _, own := range []string{"", "order-77"} {
		ctx := context.Background()
		if own != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, wire.KeyHeader, own)
		}
		var key string
		if err := retrying(ctx, testgrpc.TestService_UnaryCall_FullMethodName, nil, nil, nil, invoker, retry.ChosenKey(&key)); err != nil {
			t.Fatal(err)
		}
		if key == "" || key != sent || (own != "" && key != own) {
			t.Errorf("caller's key %q: ChosenKey = %q, the server got %q", own, key, sent)
		}
	}
}
