package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// Duplicates waiting for a key's lock hold no pool connection while they
// wait: with a pool of 2 and 50 duplicates waiting up to 5 s for a key
// another session holds, fresh claims on other keys are each served
// within 2 s (waiting duplicates that held a connection each would hold
// both for the whole 5 s), and the duplicates answer in flight once the
// lock timeout has passed.
func TestClaim_WaitersHoldNoConnection(t *testing.T) {
	db := open(t, fresh("waiters"), &pgstore.Options{MaxConns: 2, LockTimeout: 5 * time.Second})
	ctx := context.Background()
	held := request("held", time.Now())
	holder, err := pgx.ConnectConfig(ctx, db.Pool().Config().ConnConfig.Copy()) // another process's claim, say
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, pgstore.KeyLock(held.Key)); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	outcomes := make(chan storage.Outcome, 50)
	for range 50 {
		wg.Go(func() {
			o, _, err := db.Claim(ctx, request("held", time.Now()))
			if err != nil {
				t.Errorf("a waiting duplicate: %v", err)
			}
			outcomes <- o
		})
	}
	time.Sleep(200 * time.Millisecond) // the duplicates are waiting
	for i := range 10 {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, rec, tx, err := db.ClaimTx(fctx, request(fmt.Sprintf("fresh-%d", i), time.Now()), storage.Transactional)
		if err == nil {
			err = tx.Commit(fctx, rec.Completed(result(t, "done")))
		}
		cancel()
		if err != nil {
			t.Fatalf("fresh claim %d while 50 duplicates wait, on a pool of 2: %v", i, err)
		}
	}
	wg.Wait()
	close(outcomes)
	for o := range outcomes {
		if o != storage.OutcomeInFlight {
			t.Errorf("a duplicate of a key locked past the lock timeout: %v, want in flight", o)
		}
	}
}
