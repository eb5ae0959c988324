package placement_test

import (
	"fmt"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/placement"
)

// TestChoose_SamePodForAPrincipal_WhateverTheMapsOrder: every replica
// proposes the same pod for a principal.
func TestChoose_SamePodForAPrincipal_WhateverTheMapsOrder(t *testing.T) {
	weights := map[string]int{"a": 1, "b": 1, "c": 2}
	for i := range 200 {
		principal := fmt.Sprintf("merchant-%d", i)
		first, ok := placement.Choose(principal, weights, nil)
		if !ok {
			t.Fatalf("Choose(%q) found no pod", principal)
		}
		for range 5 {
			if got, _ := placement.Choose(principal, map[string]int{"c": 2, "b": 1, "a": 1}, nil); got != first {
				t.Fatalf("Choose(%q) = %s, then %s", principal, first, got)
			}
		}
	}
}

// TestChoose_WeightZeroOrUnusable_NeverChosen: a closed pod (weight 0)
// and one usable rejects take no one; with none left, ok is false.
func TestChoose_WeightZeroOrUnusable_NeverChosen(t *testing.T) {
	for i := range 2000 {
		principal := fmt.Sprintf("p%d", i)
		if got, ok := placement.Choose(principal, map[string]int{"a": 0, "b": 1, "c": -1}, nil); !ok || got != "b" {
			t.Fatalf("Choose(%q) over a:0 b:1 c:-1 = %q, %v; want b", principal, got, ok)
		}
		notB := func(pod string) bool { return pod != "b" }
		if got, ok := placement.Choose(principal, map[string]int{"a": 1, "b": 5}, notB); !ok || got != "a" {
			t.Fatalf("Choose(%q) with b unusable = %q, %v; want a", principal, got, ok)
		}
	}
	if got, ok := placement.Choose("p", map[string]int{"a": 0}, nil); ok {
		t.Errorf("Choose over one pod of weight 0 = %q, true; want false", got)
	}
	if got, ok := placement.Choose("p", map[string]int{"a": 1}, func(string) bool { return false }); ok {
		t.Errorf("Choose with no usable pod = %q, true; want false", got)
	}
}

// TestChoose_SpreadsByWeight: 10,000 principals over pods of equal
// weight land within 5% of an even split; over weights 1:3, within 5% of
// a quarter and three quarters.
func TestChoose_SpreadsByWeight(t *testing.T) {
	for _, tc := range []struct {
		weights map[string]int
		want    map[string]int
	}{
		{map[string]int{"a": 1, "b": 1}, map[string]int{"a": 5000, "b": 5000}},
		{map[string]int{"a": 1, "b": 3}, map[string]int{"a": 2500, "b": 7500}},
	} {
		got := map[string]int{}
		for i := range 10000 {
			pod, _ := placement.Choose(fmt.Sprintf("principal-%d", i), tc.weights, nil)
			got[pod]++
		}
		for pod, want := range tc.want {
			if d := got[pod] - want; d < -want/20 || d > want/20 {
				t.Errorf("weights %v: pod %s took %d of 10000, want %d ± 5%%", tc.weights, pod, got[pod], want)
			}
		}
	}
}
