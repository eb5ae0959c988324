package robustness

import (
	"testing"
	"time"
)

// TestRobustness_BrokenRuleIsReported runs the suite, without faults, on
// a binary built with the robustness_broken tag, which replays a key's
// stored result to a different request (interceptor/rules_broken.go): the
// suite must report it, or it is blind.
func TestRobustness_BrokenRuleIsReported(t *testing.T) {
	s := readSettings(t)
	r := run{backend: "bbolt", bin: binary(t, "robustness_broken"), seed: s.seed, duration: 4 * time.Second, clients: s.clients}
	o := r.do(t)
	if len(o.violations) == 0 {
		t.Fatalf("seed %d: %d operations on a binary that replays mismatched requests, and no violation reported", r.seed, len(o.ops))
	}
	t.Logf("the broken build is reported: %d violations in %d operations, the first: %s", len(o.violations), len(o.ops), o.violations[0])
}
