package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// probeTimeout is what paymentsd gives each probe (pgintents.Timeout).
const probeTimeout = 10 * time.Second

// A primary that goes silent (SIGSTOP: a hung machine, a partition) is
// replaced by its promoted standby. DBs on a URL naming both hosts, the
// silent one first and no connect_timeout, find the new primary once a
// probe has failed: the next probe succeeds, a claim commits there, and
// the listener for ended claims listens there, woken by a claim that ends
// in another process. Before, connections to the silent host, and new
// ones stuck on it, kept every probe failing and the listener deaf.
func TestFailover_SilentPrimary_ProbesClaimsAndNoticesMove(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Synchronous)
	url := p.NewDatabase(t, "failover") + "&application_name=pgstore_failover_test"
	var dbs []*pgstore.DB
	for range 2 {
		db, err := pgstore.Open(context.Background(), url, nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	for i, err := range probeAll(dbs) {
		if err != nil {
			t.Fatalf("DB %d: probe before the failover: %v", i, err)
		}
	}

	p.Primary().Freeze(t)
	for i, err := range probeAll(dbs) {
		if err == nil {
			t.Fatalf("DB %d: a probe succeeded with the primary silent", i)
		}
	}
	p.Promote(t)
	for i, err := range probeAll(dbs) {
		if err != nil {
			t.Errorf("DB %d: probe after the promotion: %v", i, err)
		}
	}

	waitForFailoverListeners(t, p, len(dbs))
	endedClaimWakesOtherDB(t, dbs[0], dbs[1])
}

// probeAll probes every DB at once, as their processes would.
func probeAll(dbs []*pgstore.DB) []error {
	errs := make([]error, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			errs[i] = db.Probe(ctx)
		})
	}
	wg.Wait()
	return errs
}

// waitForFailoverListeners waits, 20 s at most, until n listeners for
// ended claims of the failover test listen on p's promoted primary.
func waitForFailoverListeners(t *testing.T, p *pgtest.Pair, n int) {
	t.Helper()
	conn := pgtest.Connect(t, p.Primary().URL("failover"))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var listening int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'pgstore_failover_test' AND query LIKE 'LISTEN %'`).Scan(&listening); err != nil {
			t.Fatal(err)
		}
		if listening == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d listeners for ended claims on the promoted primary 20 s after the probes", listening, n)
		}
	}
}

// endedClaimWakesOtherDB claims and commits a key through a, on the
// promoted primary, and checks that b's watch of that key is woken by the
// notice, and its watch of another key is not.
func endedClaimWakesOtherDB(t *testing.T, a, b *pgstore.DB) {
	t.Helper()
	req := request("after-failover", time.Now())
	_, rec, tx, err := a.ClaimTx(context.Background(), req, storage.Durable)
	if err != nil {
		t.Fatalf("claim on the promoted primary: %v", err)
	}
	ended, stop := b.Watch(req.Key)
	defer stop()
	other, stopOther := b.Watch(storage.RecordKey{Scope: "alice", Key: "other"})
	defer stopOther()
	if err := tx.Commit(context.Background(), rec.Completed(result(t, "done"))); err != nil {
		t.Fatalf("commit on the promoted primary: %v", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("no notice within 10s of the commit on the promoted primary")
	}
	select {
	case <-other:
		t.Error("the watch of another key was woken too: a reconnection, not the notice")
	default:
	}
}
