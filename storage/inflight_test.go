package storage_test

import (
	"slices"
	"testing"

	"github.com/paymentsd/paymentsd/storage"
)

// MergeInFlight keeps the order, lists a key held in both lists once with
// the first list's record, and stops at the limit.
func TestMergeInFlight(t *testing.T) {
	claim := func(scope, key string, attempt uint64) storage.KeyedRecord {
		return storage.KeyedRecord{Key: storage.RecordKey{Scope: scope, Key: key}, Record: &storage.Record{Attempt: attempt}}
	}
	memory := []storage.KeyedRecord{claim("a", "2", 1), claim("b", "1", 1)}
	stored := []storage.KeyedRecord{claim("a", "1", 2), claim("a", "2", 2), claim("b", "0", 2), claim("c", "0", 2)}
	for limit, want := range map[int][]string{
		10: {"a/1@2", "a/2@1", "b/0@2", "b/1@1", "c/0@2"},
		3:  {"a/1@2", "a/2@1", "b/0@2"},
		0:  {},
	} {
		var got []string
		for _, c := range storage.MergeInFlight(memory, stored, limit, storage.CompareKeys) {
			got = append(got, c.Key.Scope+"/"+c.Key.Key+"@"+string(rune('0'+c.Record.Attempt)))
		}
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("MergeInFlight(limit %d) = %v, want %v", limit, got, want)
		}
	}
}
