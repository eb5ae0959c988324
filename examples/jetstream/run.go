package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// run opens the store, connects, and consumes until ctx ends.
func run(ctx context.Context, c config, log *slog.Logger) error {
	db, err := openStore(ctx, c, log)
	if err != nil {
		return err
	}
	defer func() {
		err := db.Close()
		log.LogAttrs(ctx, slog.LevelInfo, "store closed", append(db.ClosedAttrs(), slog.Any("err", err))...)
	}()
	guard, err := once.New(db.Records(), once.Options{Lease: c.lease, TTL: c.ttl, InFlightWait: c.wait,
		NotStored: notStored, Logger: log, Statuses: interceptor.StatusErrors})
	if err != nil {
		return err
	}
	// Without the sweeper, expired records would stay in the store for ever.
	sweepCtx, stopSweeping := context.WithCancel(ctx)
	var sweeping sync.WaitGroup
	defer func() { stopSweeping(); sweeping.Wait() }() // before the store closes
	sweeping.Go(func() { storage.RunSweeper(sweepCtx, db.Records(), c.sweep, swept(log)) })
	nc, err := connect(c, log)
	if err != nil {
		return err
	}
	defer func() {
		nc.Flush() // the last replies and acks
		nc.Close()
	}()
	cons, err := bind(ctx, nc, c)
	if err != nil {
		return err
	}
	h := &handler{nc: nc, log: log,
		creator: &creator{guard: guard, server: server.New(db.Intents(), nil), plain: c.plain, retry: c.retry, log: log}}
	log.Info("consuming", "stream", c.stream, "durable", c.durable, "db", db.String(), "plain", c.plain, "workers", c.workers)
	err = consume(ctx, cons, h, c.workers, c.fetch, log)
	log.Info("stopped consuming", "err", err)
	return err
}

// swept logs a sweep of expired records that deleted some or failed.
func swept(log *slog.Logger) func(int, error) {
	return func(n int, err error) {
		if err != nil {
			log.Error("sweep expired records", "err", err)
		}
		if n > 0 {
			log.Info("swept expired records", "count", n)
		}
	}
}
