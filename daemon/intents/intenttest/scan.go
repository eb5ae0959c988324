package intenttest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/server"
)

// scanned is the ids, and keys, ScanIntents gives of owner from from,
// before before, until it has stop of them (0: all).
func scanned(t *testing.T, s server.IntentScanner, owner string, from time.Time, before server.Position, stop int) (ids, keys []string) {
	t.Helper()
	err := s.ScanIntents(context.Background(), owner, from, before, func(f server.FoundIntent) (bool, error) {
		if f.Owner != owner {
			t.Errorf("scanning %s: intent %s of %s", owner, f.Intent.GetId(), f.Owner)
		}
		ids, keys = append(ids, f.Intent.GetId()), append(keys, f.Key)
		return stop == 0 || len(ids) < stop, nil
	})
	if err != nil {
		t.Fatalf("ScanIntents(%s, %v, %v): %v", owner, from, before, err)
	}
	return ids, keys
}

func testScan(t *testing.T, open Opener) {
	b := newBackend(t, open)
	s, ok := b.Intents.(server.IntentScanner)
	if !ok {
		t.Fatalf("%T is no server.IntentScanner", b.Intents)
	}
	order := createScrambled(t, b, "alice", 25) // created 2 s apart from t0
	createScrambled(t, b, "bob", 12)            // interleaved in time, never scanned for alice
	keyed := intent("pi_alice_keyed", t0.Add(48*time.Second))
	if err := b.Intents.CreateIntent(context.Background(), "alice", "order-100", keyed); err != nil {
		t.Fatal(err)
	}
	order = append(order, keyed.Id) // at the same time as the last, after it by id
	newest := slices.Clone(order)
	slices.Reverse(newest)

	all, keys := scanned(t, s, "alice", time.Time{}, server.Position{}, 0)
	if !slices.Equal(all, newest) {
		t.Fatalf("scan of every intent = %v, want newest first %v", all, newest)
	}
	if keys[0] != "order-100" || keys[1] != "" {
		t.Errorf("keys %v, want order-100 for the keyed intent, none for the others", keys[:2])
	}
	// From the 6th intent's time (10 s) on, before the 21st's position.
	before := server.Position{CreateTime: t0.Add(40 * time.Second), ID: order[20]}
	if got, want := first(scanned(t, s, "alice", t0.Add(10*time.Second), before, 0)), newest[len(newest)-20:len(newest)-5]; !slices.Equal(got, want) {
		t.Errorf("scan of [10 s, the 21st) = %v, want %v", got, want)
	}
	if got := first(scanned(t, s, "alice", time.Time{}, server.Position{CreateTime: t0.Add(48 * time.Second)}, 0)); !slices.Equal(got, newest[2:]) {
		t.Errorf("scan before 48 s = %v, want %v", got, newest[2:])
	}
	if got := first(scanned(t, s, "alice", time.Time{}, server.Position{}, 3)); !slices.Equal(got, newest[:3]) {
		t.Errorf("scan stopped after 3 = %v, want %v", got, newest[:3])
	}
	if got := first(scanned(t, s, "carol", time.Time{}, server.Position{}, 0)); len(got) != 0 {
		t.Errorf("scan of an owner with none = %v", got)
	}
}

func first(ids, _ []string) []string { return ids }
