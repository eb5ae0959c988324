package recordview

import (
	"context"
	"log/slog"
	"time"

	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// LookupBolt returns k's record in the bbolt data file at path, or nil
// when there is none. It reads the file itself when no server holds it.
// Otherwise it asks the server through its admin socket.
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
// nil when there is none. It never changes the schema under the servers.
// A database not at this binary's version is refused, and the error names
// both versions.
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

// ReleaseBolt releases k in the bbolt data file at path on operator's
// behalf (see storage.Releaser). When no server holds the file, it
// releases k in the file and logs to log. Otherwise it goes through the
// server, which logs it. The result via says which.
func ReleaseBolt(ctx context.Context, path string, k storage.RecordKey, operator string, log *slog.Logger) (rec *storage.Record, via string, err error) {
	return boltadmin.Release(ctx, path, k, operator, log)
}

// ReleasePostgres releases k in the PostgreSQL database at url on
// operator's behalf, logging to log. It waits, as pgstore's Release does,
// until no replica answers from the released record.
func ReleasePostgres(ctx context.Context, url string, k storage.RecordKey, operator string, log *slog.Logger) (rec *storage.Record, via string, err error) {
	ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
	defer cancel()
	pg, err := pgstore.Open(ctx, url, &pgstore.Options{MaxConns: 2, NoMigrate: true})
	if err != nil {
		return nil, "", err
	}
	defer pg.Close()
	rec, err = pg.Release(ctx, k, time.Now(), operator, storage.Seen{})
	boltadmin.LogRelease(ctx, log, operator, k, rec, err)
	return rec, "in the database; logged here", err
}
