package retry_test

import (
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/interceptor/retry"
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
