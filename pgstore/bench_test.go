package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// BenchmarkCreate is a create as the interceptor makes one for a
// transactional method: a fresh key claimed, the handler's row written
// through the claim's Tx, and the result committed with it. Its
// allocations per create are pgstore's part of paymentsd's work for one;
// its time is mostly PostgreSQL's, three round trips.
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	db := open(b, fresh("bench"), nil)
	if _, err := db.Pool().Exec(ctx, `CREATE TABLE bench_writes (id bigint PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	res := result(b, "done")
	b.ReportAllocs()
	for i := range b.N {
		req := request(fmt.Sprintf("create-%d", i), time.Now())
		outcome, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
		if err != nil || outcome != storage.OutcomeFresh {
			b.Fatalf("ClaimTx = %v, %v", outcome, err)
		}
		err = db.Run(tx.Context(ctx), func(q pgstore.Querier) error {
			_, err := q.Exec(ctx, `INSERT INTO bench_writes (id) VALUES ($1)`, int64(i))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx, rec.Completed(res)); err != nil {
			b.Fatal(err)
		}
	}
}
