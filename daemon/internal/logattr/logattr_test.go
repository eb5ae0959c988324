package logattr_test

import (
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/internal/logattr"
)

// A valid key is logged as it is; anything else quoted, and cut, so that
// a line stays one line of bounded size.
func TestKey(t *testing.T) {
	long := strings.Repeat("k", 300)
	for _, c := range []struct{ sent, want string }{
		{"order-100", "order-100"},
		{"a b,c", "a b,c"},
		{"", `""`},
		{"line\nbreak", `"line\nbreak"`},
		{"caf\u00e9", `"caf\u00e9"`},
		{long[:255], long[:255]},
		{long, `"` + long[:255] + `"...`},
	} {
		if got := logattr.Key(c.sent); got != c.want {
			t.Errorf("Key(%q) = %q; want %q", c.sent, got, c.want)
		}
	}
}

// A status's reason is its ErrorInfo's; none without one.
func TestReason(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "reused").WithDetails(&errdetails.ErrorInfo{Reason: "IDEMPOTENCY_KEY_REUSED"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		st   *status.Status
		want string
	}{
		{st, "IDEMPOTENCY_KEY_REUSED"},
		{status.New(codes.NotFound, "no intent"), ""},
		{nil, ""},
	} {
		if got := logattr.Reason(c.st); got != c.want {
			t.Errorf("Reason(%v) = %q; want %q", c.st, got, c.want)
		}
	}
}
