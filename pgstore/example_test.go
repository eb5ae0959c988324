package pgstore_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsd/paymentsd/pgstore"
)

// Open the store in a pool of your own, so that its tracer, TLS roots,
// hooks and size are yours. The body is the code of docs/embedding.md,
// section "Your writes in the same transaction": a test at the
// repository's root holds the two alike. It is compiled, not run: it
// needs a database.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://shop@db.internal/shop") // then your tracer, TLS, AfterConnect
	if err != nil {
		log.Fatal(err)
	}
	pgstore.ConfigurePool(cfg)                   // never cancel a commit that waits for a standby
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // your pool
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db, err := pgstore.New(ctx, pool, &pgstore.Options{}) // Close leaves the pool open
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
}
