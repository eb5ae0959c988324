package pgintents

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/pgstore"
)

// Timeout bounds connecting and migrating in Open, and each health probe
// and count of Backend. A database that does not answer must not hang the
// start or the health watcher.
const Timeout = 10 * time.Second

// Backend is a backend.Backend in PostgreSQL: the records of a pgstore.DB
// and the intents beside them.
type Backend struct {
	db      *pgstore.DB
	intents *Store
}

var _ intents.Backend = (*Backend)(nil)

// Open connects to the database at url and brings its schema up to date,
// within Timeout.
func Open(ctx context.Context, url string, opts *pgstore.Options) (*Backend, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	db, err := pgstore.Open(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	intents, err := New(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Backend{db: db, intents: intents}, nil
}

func (b *Backend) Records() intents.Records    { return b.db }
func (b *Backend) Intents() server.IntentStore { return b.intents }
func (b *Backend) String() string              { return b.db.String() }
func (b *Backend) Close() error                { return b.db.Close() }

// Pool is the connection pool, for the metrics.
func (b *Backend) Pool() *pgxpool.Pool { return b.db.Pool() }

// Replication is what the store saw of its server's replication.
func (b *Backend) Replication() pgstore.Replication { return b.db.Replication() }

// ClosedAttrs is nothing: the database keeps its own statistics.
func (b *Backend) ClosedAttrs() []slog.Attr { return nil }

// Check probes the database and the tables of both stores.
func (b *Backend) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return b.db.Probe(ctx, "payment_intents")
}

func (b *Backend) CountRecords() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	n, err := b.db.CountRecords(ctx)
	return float64(n), err
}
