package storage_test

import (
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// A Seen matches the record of its attempt and claim time alone; the zero
// Seen matches any, and one of attempt 0 with a claim time none.
func TestSeen_Matches(t *testing.T) {
	began := time.Date(2026, 12, 3, 11, 41, 57, 123456789, time.UTC)
	rec := &storage.Record{Attempt: 2, ClaimTime: began}
	old := &storage.Record{Attempt: 1} // of a build that kept no claim time
	for _, tc := range []struct {
		name string
		seen storage.Seen
		rec  *storage.Record
		want bool
	}{
		{"the zero Seen", storage.Seen{}, rec, true},
		{"the record seen", storage.Seen{Attempt: 2, ClaimTime: began}, rec, true},
		{"the same instant elsewhere", storage.Seen{Attempt: 2, ClaimTime: began.In(time.FixedZone("", 3600))}, rec, true},
		{"another attempt", storage.Seen{Attempt: 1, ClaimTime: began}, rec, false},
		{"another claim time", storage.Seen{Attempt: 2, ClaimTime: began.Add(time.Nanosecond)}, rec, false},
		{"no claim time seen", storage.Seen{Attempt: 2}, rec, false},
		{"attempt 0 with a claim time", storage.Seen{ClaimTime: began}, rec, false},
		{"a record without a claim time, by its attempt", storage.Seen{Attempt: 1}, old, true},
		{"a record without a claim time, another attempt", storage.Seen{Attempt: 2}, old, false},
	} {
		if got := tc.seen.Matches(tc.rec); got != tc.want {
			t.Errorf("%s: Matches = %t, want %t", tc.name, got, tc.want)
		}
	}
}
