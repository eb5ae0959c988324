package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/paymentsd/paymentsd/backend"
	"github.com/paymentsd/paymentsd/boltintents"
	"github.com/paymentsd/paymentsd/pgintents"
	"github.com/paymentsd/paymentsd/pgstore"
)

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

// openBackend opens the database that --db names. It returns a nil
// Backend with its error, never a nil pointer in one.
func openBackend(ctx context.Context, c Config, log *slog.Logger) (backend.Backend, error) {
	pgURL, err := parseDB(c.DB)
	if err != nil {
		return nil, err
	}
	if pgURL != "" {
		pg, err := pgintents.Open(ctx, pgURL, &pgstore.Options{MaxConns: int32(c.DBPool), Logger: log})
		if err != nil {
			return nil, err
		}
		return pg, nil
	}
	bolt, err := boltintents.Open(ctx, c.DB)
	if err != nil {
		return nil, err
	}
	return bolt, nil
}
