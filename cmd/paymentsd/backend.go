package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/paymentsd/paymentsd/boltintents"
	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/pgintents"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/server"
)

// records is what paymentsd needs of an idempotency store: the
// interceptor's TxStore, sweeping, and a health check.
type records interface {
	storage.TxStore
	Sweep(ctx context.Context, now time.Time) (int, error)
	Close() error
}

// backend is where paymentsd keeps its data: the idempotency records and
// the intents, in one database, so that an intent and its record commit
// together.
type backend struct {
	records records
	intents server.IntentStore
	// desc names the database for the log, never with a password.
	desc string
	// check reports the database's health, probing it when that is how
	// to know: nil while it serves.
	check func(ctx context.Context) error
	// closedAttrs are logged when it closes: its commits, for bbolt.
	closedAttrs func() []slog.Attr
	// countRecords counts the idempotency records stored, for the metrics.
	countRecords func() (float64, error)
}

// badDB is the error of a --db that reads as a connection string
// paymentsd does not take. It never repeats the value, which may hold a
// password.
const badDB = "--db must be a bbolt file's path, or a PostgreSQL URL starting postgres:// or postgresql://; " +
	"other connection strings (key=value, other URL schemes) are not taken, rather than made a file of that name"

// parseDB classifies --db. A URL whose scheme is postgres or postgresql,
// in any case, is PostgreSQL: it is returned with its scheme lower-cased,
// as pgx matches it. A value that reads as another connection string
// (with "://", "postgres:" or "=" in it) is refused: taken as a file, it
// would start an empty store of its own, its name holding the password.
// Anything else is a bbolt file's path, and pgURL is "".
func parseDB(db string) (pgURL string, err error) {
	lower := strings.ToLower(db)
	scheme, rest, isURL := strings.Cut(db, "://")
	switch s := strings.ToLower(scheme); {
	case isURL && (s == "postgres" || s == "postgresql"):
		return s + "://" + rest, nil
	case isURL || strings.HasPrefix(lower, "postgres:") || strings.HasPrefix(lower, "postgresql:") || strings.Contains(db, "="):
		return "", errors.New(badDB)
	}
	return "", nil
}

func openBackend(ctx context.Context, c Config, log *slog.Logger) (*backend, error) {
	pgURL, err := parseDB(c.DB)
	switch {
	case err != nil:
		return nil, err
	case pgURL != "":
		c.DB = pgURL
		return openPostgres(ctx, c, log)
	}
	return openBolt(ctx, c)
}

func openBolt(ctx context.Context, c Config) (*backend, error) {
	db, err := boltstore.Open(c.DB, nil)
	if err != nil {
		return nil, err
	}
	intents, err := boltintents.New(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &backend{
		records: db,
		intents: intents,
		desc:    db.Path(),
		// A file found damaged stays so; one whose commits failed (a full
		// disk, an I/O error) is probed with a commit.
		check: func(ctx context.Context) error {
			err := db.Health()
			if err != nil && !errors.Is(err, boltstore.ErrDamaged) {
				err = db.Probe(ctx)
			}
			return err
		},
		closedAttrs:  func() []slog.Attr { return []slog.Attr{slog.Uint64("commits", db.Commits())} },
		countRecords: func() (float64, error) { n, err := db.CountRecords(context.Background()); return float64(n), err },
	}, nil
}

// postgresTimeout bounds connecting and migrating at start, and each
// health probe.
const postgresTimeout = 10 * time.Second

func openPostgres(ctx context.Context, c Config, log *slog.Logger) (*backend, error) {
	ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
	defer cancel()
	db, err := pgstore.Open(ctx, c.DB, &pgstore.Options{MaxConns: int32(c.DBPool), Logger: log})
	if err != nil {
		return nil, err
	}
	intents, err := pgintents.New(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &backend{
		records: db,
		intents: intents,
		desc:    db.String(),
		check: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
			defer cancel()
			return db.Probe(ctx)
		},
		closedAttrs: func() []slog.Attr { return nil },
		countRecords: func() (float64, error) {
			ctx, cancel := context.WithTimeout(context.Background(), postgresTimeout)
			defer cancel()
			n, err := db.CountRecords(ctx)
			return float64(n), err
		},
	}, nil
}
