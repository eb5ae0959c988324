package recordview

import (
	"context"
	"time"

	"github.com/paymentsd/paymentsd/boltstore/boltadmin"
	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/pgstore"
)

// LookupBolt returns k's record in the bbolt data file at path, or nil
// when there is none. It reads the file itself when no server holds it,
// otherwise it asks the server through its admin socket.
func LookupBolt(ctx context.Context, path string, k storage.RecordKey) (*storage.Record, error) {
	src, err := boltadmin.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return src.Get(ctx, k)
}

// postgresTimeout bounds a lookup in PostgreSQL, connecting included.
const postgresTimeout = 10 * time.Second

// LookupPostgres returns k's record in the PostgreSQL database at url, or
// nil when there is none. It never changes the schema under the servers:
// a database not at this binary's version is refused, naming both.
func LookupPostgres(ctx context.Context, url string, k storage.RecordKey) (*storage.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
	defer cancel()
	pg, err := pgstore.Open(ctx, url, &pgstore.Options{MaxConns: 2, NoMigrate: true})
	if err != nil {
		return nil, err
	}
	defer pg.Close()
	return pg.Get(ctx, k)
}
