package main

import (
	"context"
	"log/slog"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/pgstore"
)

// openBackend opens the database that --db names. It returns a nil
// Backend with its error, never a nil pointer in one.
func openBackend(ctx context.Context, c config.Config, log *slog.Logger) (intents.Backend, error) {
	pgURL, err := config.ParseDB(c.DB)
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
