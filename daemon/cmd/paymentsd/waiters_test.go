package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// Duplicates waiting for a create in flight on another replica hold no
// database connection: with --db-pool 2 and 50 duplicates waiting
// (--in-flight-wait 10s) for a key whose lock another session holds, fresh
// creates are each served within 2 s; once the lock is released, one
// duplicate runs the create and the 49 others replay its answer.
func TestPostgres_Waiters_LeaveThePoolToFreshCreates(t *testing.T) {
	url := postgresURL(t)
	d := start(t, spec{db: url, args: []string{"--db-pool", "2", "--in-flight-wait", "10s"}})
	const token = "waiters-token"
	ctx := context.Background()
	holder := pgtest.Connect(t, url) // another replica's create, in flight
	held := storage.RecordKey{Scope: devPrincipal(token), Key: "held"}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, pgstore.KeyLock(held)); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	ids := make(chan string, 50)
	for range 50 {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(withCreds(token, "held"), 30*time.Second)
			defer cancel()
			a := d.create(cctx, seedRequest("100000000"))
			if a.err != nil {
				t.Errorf("a waiting duplicate: %v", a.err)
				return
			}
			ids <- a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
		})
	}
	time.Sleep(500 * time.Millisecond) // the duplicates are waiting
	for i := range 10 {
		cctx, cancel := context.WithTimeout(withCreds(token, fmt.Sprintf("fresh-%d", i)), 2*time.Second)
		a := d.create(cctx, seedRequest("100000000"))
		cancel()
		if a.err != nil {
			t.Fatalf("fresh create %d while 50 duplicates wait, on --db-pool 2: %v", i, a.err)
		}
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(ids)
	seen := map[string]int{}
	for id := range ids {
		seen[id]++
	}
	if len(seen) != 1 {
		t.Errorf("the 50 duplicates were answered with intents %v, want one", seen)
	}
	if got := len(d.list(t, token)); got != 11 {
		t.Errorf("%d intents, want 11 (10 fresh, 1 of the duplicates)", got)
	}
}
