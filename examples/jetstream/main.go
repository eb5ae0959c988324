// Command jetstream consumes create-payment commands from a NATS JetStream
// stream and creates each intent exactly once, however often it comes.
//
// A command's subject is payments.create.<principal>. The broker binds that
// token to the publishing user, so the token is the key's scope. Its
// Idempotency-Key header is the key, and its body a CreatePaymentIntentRequest
// in protojson. The result goes to payments.replies.<principal>. See
// docs/jetstream.md.
//
// Usage:
//
//	jetstream --nats nats://127.0.0.1:4222 --user creator --password ... --db payments.db
//	jetstream --setup --user admin ...        # create the streams and the consumer, then exit
//	jetstream --publish KEY --user alice ...  # publish a command from stdin, print its reply
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jetstream:", err)
		os.Exit(2)
	}
	log := newLogger(cfg.verbose)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case cfg.setup:
		err = runSetup(ctx, cfg, log, os.Stdout)
	case cfg.publish != "":
		err = runPublish(ctx, cfg, log, os.Stdin, os.Stdout)
	default:
		err = run(ctx, cfg, log)
	}
	if err != nil {
		log.Error("jetstream: stopped", "err", err)
		os.Exit(1)
	}
}

// newLogger logs JSON lines to standard error.
func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
