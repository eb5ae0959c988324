package storagetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// listInFlight reads every page of l's claims in flight, limit per page.
// It returns the keys in page order with their records. It fails the test
// when a page repeats a key or comes back out of order.
func listInFlight(t *testing.T, l storage.InFlightLister, limit int) ([]string, map[string]*storage.Record) {
	t.Helper()
	var (
		keys    []string
		records = map[string]*storage.Record{}
		after   storage.RecordKey
	)
	for page := 0; ; page++ {
		got, err := l.InFlight(context.Background(), after, limit)
		if err != nil {
			t.Fatalf("InFlight(after %v, %d): %v", after, limit, err)
		}
		if len(got) > limit {
			t.Fatalf("InFlight(after %v, %d) returned %d claims", after, limit, len(got))
		}
		for _, c := range got {
			name := c.Key.Scope + "/" + c.Key.Key
			if records[name] != nil {
				t.Fatalf("InFlight listed %s twice (page %d): %v", name, page, keys)
			}
			keys = append(keys, name)
			records[name] = c.Record
		}
		if len(got) < limit {
			return keys, records
		}
		after = got[len(got)-1].Key
	}
}

// testInFlightList: durable claims are listed, and so, on a TxStore, are
// claims held in a Tx. Each is listed once, across pages of any size, with
// its attempt, lease and claim time. Completed, released and swept records
// are not listed.
func testInFlightList(t *testing.T, open Opener) {
	s := newStore(t, open)
	l := as[storage.InFlightLister](t, s)
	want := []string{}
	for i := range 5 {
		for _, scope := range []string{"scope-a", "scope-b"} {
			req := request(fmt.Sprintf("key-%d", i), "body", t0.Add(time.Duration(i)*time.Second))
			req.Key.Scope = scope
			claim(t, s, req, storage.OutcomeFresh)
			want = append(want, scope+"/"+req.Key.Key)
		}
	}
	done := request("done", "body", t0)
	complete(t, s, done, claim(t, s, done, storage.OutcomeFresh), sampleResult(t, "done"))
	if ts, ok := s.(storage.TxStore); ok {
		held := request("held-in-tx", "body", t0.Add(time.Minute))
		claimTx(t, ts, held, storage.Transactional, storage.OutcomeFresh)
		want = append(want, "scope-a/held-in-tx")
	}
	slices.Sort(want)

	var first []string
	for _, limit := range []int{1, 2, 3, 100} {
		keys, records := listInFlight(t, l, limit)
		got := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Fatalf("InFlight with pages of %d listed %v, want %v", limit, got, want)
		}
		if first == nil {
			first = keys
		} else if !slices.Equal(keys, first) {
			t.Errorf("InFlight with pages of %d listed in the order %v, with pages of 1 %v: want one order", limit, keys, first)
		}
		rec := records["scope-b/key-3"]
		at := t0.Add(3 * time.Second)
		if rec.State != storage.StateInFlight || rec.Attempt != 1 || !rec.ClaimTime.Equal(at) || !rec.LeaseExpiry.Equal(at.Add(lease)) {
			t.Errorf("listed claim: state %v attempt %d claimed %v lease %v; want in flight, 1, %v, %v",
				rec.State, rec.Attempt, rec.ClaimTime, rec.LeaseExpiry, at, at.Add(lease))
		}
	}
}

// testInFlightChanges: a claim leaves the list when it completes, or when
// its record expires and is swept. One taken over stays, with its new
// attempt and claim time.
func testInFlightChanges(t *testing.T, open Opener) {
	s := newStore(t, open)
	l := as[storage.InFlightLister](t, s)
	completed, taken, swept := request("completed", "body", t0), request("taken-over", "body", t0), request("swept", "body", t0)
	swept.TTL = time.Hour
	c := claim(t, s, completed, storage.OutcomeFresh)
	claim(t, s, taken, storage.OutcomeFresh)
	claim(t, s, swept, storage.OutcomeFresh)
	complete(t, s, completed, c, sampleResult(t, "done"))

	later := t0.Add(2 * lease)
	retry := request("taken-over", "body", later)
	claim(t, s, retry, storage.OutcomeTakeover)
	if n, err := s.Sweep(context.Background(), t0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 (the expired claim)", n, err)
	}
	keys, records := listInFlight(t, l, 10)
	if !slices.Equal(keys, []string{"scope-a/taken-over"}) {
		t.Fatalf("InFlight after a completion, a takeover and a sweep listed %v, want only the claim taken over", keys)
	}
	if rec := records["scope-a/taken-over"]; rec.Attempt != 2 || !rec.ClaimTime.Equal(later) {
		t.Errorf("claim taken over: attempt %d claimed %v, want 2 and %v", rec.Attempt, rec.ClaimTime, later)
	}
}

// testInFlightReopen: a durable claim outlives its process. It is an
// orphan, for an operator to see until it is taken over. A claim held in a
// Tx that ended without a commit is gone.
func testInFlightReopen(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir)
	as[storage.InFlightLister](t, s) // fails at once on a store that cannot list
	claim(t, s, request("orphan", "body", t0), storage.OutcomeFresh)
	if ts, ok := s.(storage.TxStore); ok {
		_, tx := claimTx(t, ts, request("rolled-back", "body", t0), storage.Transactional, storage.OutcomeFresh)
		tx.Rollback()
	}
	s = reopen(t, open, dir, s)
	l := as[storage.InFlightLister](t, s)
	if keys, _ := listInFlight(t, l, 10); !slices.Equal(keys, []string{"scope-a/orphan"}) {
		t.Fatalf("InFlight after reopening listed %v, want the orphaned claim alone", keys)
	}
}

// testInFlightTakenOverInTx: a claim in flight (an orphan, say) taken over
// by a transactional claim leaves the list once that claim commits.
func testInFlightTakenOverInTx(t *testing.T, open Opener) {
	s := newStore(t, open)
	ts, l := as[storage.TxStore](t, s), as[storage.InFlightLister](t, s)
	claim(t, s, request("orphan", "body", t0), storage.OutcomeFresh)
	rec, tx := claimTx(t, ts, request("orphan", "body", t0.Add(2*lease)), storage.Transactional, storage.OutcomeTakeover)
	commit(t, tx, rec, sampleResult(t, "done"))
	if keys, _ := listInFlight(t, l, 10); len(keys) != 0 {
		t.Fatalf("InFlight after a transactional takeover committed listed %v, want none", keys)
	}
}
