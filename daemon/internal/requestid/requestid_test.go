package requestid_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/paymentsd/paymentsd/daemon/internal/requestid"
)

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"abc-123":                    true,
		"7f9c2ba4-e88f-4b3a-9d1e-0a": true,
		"a":                          true,
		strings.Repeat("x", 128):     true,
		"":                           false,
		strings.Repeat("x", 129):     false,
		"a b":                        false,
		"a,b":                        false,
		"a\nb":                       false,
		"a\x7f":                      false,
		"é":                          false,
	} {
		if got := requestid.Valid(id); got != want {
			t.Errorf("Valid(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestOf_KeepsAValidOneAndReplacesTheRest(t *testing.T) {
	if got := requestid.Of([]string{"req-1"}); got != "req-1" {
		t.Errorf("Of(req-1) = %q", got)
	}
	for _, vs := range [][]string{nil, {""}, {"a b"}, {"a", "b"}} {
		got := requestid.Of(vs)
		if !requestid.Valid(got) || len(got) != 36 {
			t.Errorf("Of(%q) = %q, want a new UUID", vs, got)
		}
	}
	if a, b := requestid.New(), requestid.New(); a == b {
		t.Error("two new ids are equal")
	}
}

func TestFromIncoming(t *testing.T) {
	for _, c := range []struct {
		md   metadata.MD
		want string
	}{
		{metadata.Pairs("x-request-id", "req-1"), "req-1"},
		{metadata.Pairs("x-request-id", "bad id"), ""},
		{metadata.Pairs("x-request-id", "a", "x-request-id", "b"), ""},
		{metadata.MD{}, ""},
	} {
		if got := requestid.FromIncoming(metadata.NewIncomingContext(context.Background(), c.md)); got != c.want {
			t.Errorf("FromIncoming(%v) = %q, want %q", c.md, got, c.want)
		}
	}
}
