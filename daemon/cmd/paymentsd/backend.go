package main

import (
	"context"
	"log/slog"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pods"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/pgstore"
)

// openBackend opens the database that --db names. It returns a nil
// Backend with its error, never a nil pointer in one.
func openBackend(ctx context.Context, c config.Config, log *slog.Logger) (intents.Backend, error) {
	if c.PodsPath != "" {
		return openPods(ctx, c, log)
	}
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

// openPods opens the databases that --pods lists, placing principals
// among them with --placement-etcd's directory.
func openPods(ctx context.Context, c config.Config, log *slog.Logger) (intents.Backend, error) {
	list, err := config.ReadPods(c.PodsPath)
	if err != nil {
		return nil, err
	}
	dir := placement.Config{Endpoints: c.Etcd(), Prefix: c.PlacementPrefix, Logger: log}
	claimant := pgstore.NewClaimantID() // one process, whichever pod
	r, err := pods.Open(ctx, list, dir, func(ctx context.Context, p config.Pod) (intents.Backend, error) {
		return pgintents.Open(ctx, p.URL, &pgstore.Options{MaxConns: int32(c.DBPool), Logger: log.With("pod", p.Name), ClaimantID: claimant})
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}
