package boltintents

import (
	"context"
	"errors"
	"log/slog"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/server"
)

// Backend is a backend.Backend in a bbolt file. It holds the records of a
// boltstore.DB and the intents beside them.
type Backend struct {
	db      *boltstore.DB
	intents *Store
}

var _ intents.Backend = (*Backend)(nil)

// Open opens the bbolt file at path, with its intents' buckets. It creates
// the file if needed.
func Open(ctx context.Context, path string) (*Backend, error) {
	db, err := boltstore.Open(path, nil)
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

// Records returns the *boltstore.DB, which the admin socket serves too.
func (b *Backend) Records() intents.Records    { return b.db }
func (b *Backend) Intents() server.IntentStore { return b.intents }
func (b *Backend) String() string              { return b.db.Path() }
func (b *Backend) Close() error                { return b.db.Close() }

// Check reports the file's health. A file found damaged stays so. A file
// whose commits failed, as on a full disk or an I/O error, is probed with a
// commit. Once a probe succeeds, the file is reported healthy again.
func (b *Backend) Check(ctx context.Context) error {
	err := b.db.Health()
	if err != nil && !errors.Is(err, boltstore.ErrDamaged) {
		err = b.db.Probe(ctx)
	}
	return err
}

func (b *Backend) CountRecords() (float64, error) {
	n, err := b.db.CountRecords(context.Background())
	return float64(n), err
}

// CommitCounts are the group commit's commits, and the writes they
// carried, for the metrics.
func (b *Backend) CommitCounts() (commits, writes uint64) {
	return b.db.Commits(), b.db.CommittedWrites()
}

// ClosedAttrs are the commits made, for the log.
func (b *Backend) ClosedAttrs() []slog.Attr {
	return []slog.Attr{slog.Uint64("commits", b.db.Commits())}
}
