package storage

import (
	"context"
	"time"
)

// Sweeper deletes expired records. Every store in this module is one.
type Sweeper interface {
	// Sweep deletes the records expired at now and returns how many. A
	// ReleaseHistory deletes its entries expired at now too, uncounted.
	Sweep(ctx context.Context, now time.Time) (int, error)
}

// Upkeep is what an operator's tools and a server's housekeeping need of a
// store beside the claim rules. It reads one record for a question about a
// key. It sweeps expired records, counts the records for the metrics, and
// closes the store. Every store in this module is one.
type Upkeep interface {
	Sweeper
	// Get returns the record stored for k, live or expired. It returns nil
	// when there is none. It only reads.
	Get(ctx context.Context, k RecordKey) (*Record, error)
	// CountRecords returns how many records are stored, for a gauge. That
	// counts the live ones and the expired ones not yet swept. A store
	// whose count would scan them all may return its database's estimate
	// instead.
	CountRecords(ctx context.Context) (int64, error)
	// Close releases the store. Nothing may be called after it.
	Close() error
}

// RunSweeper sweeps s every interval until ctx ends, and then returns.
// After a sweep that deleted something or failed, report (if not nil) is
// told how many records went and the error. A failed sweep is tried again
// at the next tick. Run it in a goroutine of its own:
//
//	go storage.RunSweeper(ctx, store, time.Minute, nil)
func RunSweeper(ctx context.Context, s Sweeper, interval time.Duration, report func(deleted int, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.Sweep(ctx, time.Now())
		if ctx.Err() != nil {
			err = nil // stopped, not failed
		}
		if report != nil && (n > 0 || err != nil) {
			report(n, err)
		}
	}
}
