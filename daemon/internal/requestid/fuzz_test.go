package requestid_test

import (
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/internal/requestid"
)

// FuzzOf: whatever a client sends, the id used is valid, and it is the
// one sent exactly when that one is valid; a kept id never holds what
// could split a header or a log line.
func FuzzOf(f *testing.F) {
	for _, s := range []string{"", "req-1", "a b", "a,b", "a\r\nX-Evil: 1", strings.Repeat("x", 129), "\xff\xfe", "é"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, twice bool) {
		values := []string{s}
		if twice {
			values = append(values, s)
		}
		got := requestid.Of(values)
		if !requestid.Valid(got) {
			t.Fatalf("Of(%q) = %q, not valid", values, got)
		}
		if kept := got == s; kept != (!twice && requestid.Valid(s)) {
			t.Fatalf("Of(%q) = %q: kept %v, valid %v", values, got, kept, requestid.Valid(s))
		}
		if strings.ContainsAny(got, " ,\r\n\t\x00") || len(got) > requestid.MaxLen {
			t.Fatalf("Of(%q) = %q", values, got)
		}
	})
}
