package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/pgstore"
)

// openStore opens the records and intents: PostgreSQL with --postgres,
// else the bbolt file of --db.
func openStore(ctx context.Context, c config, log *slog.Logger) (intents.Backend, error) {
	if c.postgres == "" {
		b, err := boltintents.Open(ctx, c.db)
		if err != nil {
			return nil, err // not a nil *Backend in the interface
		}
		return b, nil
	}
	url, err := readURL(c.postgres)
	if err != nil {
		return nil, err
	}
	// MaxConns covers every worker, and the notices' listener.
	b, err := pgintents.Open(ctx, url, &pgstore.Options{MaxConns: int32(c.workers + 2), Logger: log})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// readURL reads a PostgreSQL URL from a file, or from env:NAME. The URL
// holds a password, so no error quotes it.
func readURL(from string) (string, error) {
	if name, ok := strings.CutPrefix(from, "env:"); ok {
		url := os.Getenv(name)
		if url == "" {
			return "", fmt.Errorf("--postgres: $%s is empty", name)
		}
		return url, nil
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return "", fmt.Errorf("--postgres: %w", err)
	}
	url := strings.TrimSpace(string(b))
	if url == "" {
		return "", errors.New("--postgres: the file is empty")
	}
	return url, nil
}
