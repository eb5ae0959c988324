package placement

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// FuzzApply feeds any key and value under the prefix to the cache, as a
// watch or a load brings them from etcd, where operators write too (a
// pod's weight): it must never panic, keep only placements naming a pod
// and weights of 0 or more, and leave a key it cannot read as it was.
func FuzzApply(f *testing.F) {
	for _, seed := range [][2]string{
		{"placement/acme", `{"pod":"a"}`},
		{"placement/m%2F1", `{"pod":"b","move":{"id":"m-1","to":"a","step":"fence","by":"op","since":"2026-12-05T00:00:00Z"}}`},
		{"placement/x", `{"pod":"b","cleanup":"a"}`},
		{"placement/%zz", `{"pod":"a"}`},
		{"pods/a", `{"weight":0}`},
		{"pods/b", `{"weight":-3}`},
		{"pods/c", `{}`},
		{"placement/y", `{"pod":""}`},
		{"other", `x`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		c := &cache{placed: map[string]Placement{}, weights: map[string]weighted{}}
		kv := &mvccpb.KeyValue{Key: []byte(DefaultPrefix + key), Value: []byte(value), ModRevision: 7}
		err := c.apply(DefaultPrefix, kv, false, 7)
		for p, pl := range c.placed {
			if err != nil || pl.Pod == "" || pl.Principal != p || pl.Revision != 7 {
				t.Fatalf("apply(%q, %q) = %v kept %+v", key, value, err, pl)
			}
		}
		for pod, w := range c.weights {
			if err != nil || w.weight < 0 {
				t.Fatalf("apply(%q, %q) = %v kept weight %d for %q", key, value, err, w.weight, pod)
			}
		}
		if err := c.apply(DefaultPrefix, kv, true, 8); err != nil && len(c.placed)+len(c.weights) > 0 {
			t.Fatalf("deleting %q: %v", key, err)
		}
	})
}
