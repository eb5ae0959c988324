package console

import (
	"testing"

	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// For idempotency keys a and b of one scope, a comes before justBefore(b)
// exactly when it comes before b. So a list of claims in flight that
// starts after justBefore(b) starts with b, when b is listed. Every key of
// up to 3 bytes of the lowest, highest and some middle characters is
// tried against every other.
func TestJustBefore_NoKeyComesBetween(t *testing.T) {
	var keys []string
	var grow func(prefix string)
	grow = func(prefix string) {
		if wire.ValidateKey(prefix) == nil {
			keys = append(keys, prefix)
		}
		if len(prefix) < 3 {
			for _, c := range " !0`a}~" {
				grow(prefix + string(c))
			}
		}
	}
	grow("")
	for _, b := range keys {
		before := justBefore(storage.RecordKey{Scope: "alice", Key: b})
		if before.Scope != "alice" || before.Key >= b {
			t.Fatalf("justBefore(%q) = %+v, not before it in its scope", b, before)
		}
		for _, a := range keys {
			if (a < b) != (a < before.Key) {
				t.Fatalf("%q before %q: %v; before justBefore's %q: %v", a, b, a < b, before.Key, a < before.Key)
			}
		}
	}
	if len(keys) < 200 {
		t.Fatalf("only %d keys tried", len(keys))
	}
}
