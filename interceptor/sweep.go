package interceptor

import (
	"context"
	"time"
)

// Sweeper deletes expired records: every store in this module is one.
type Sweeper interface {
	// Sweep deletes the records expired at now and returns how many.
	Sweep(ctx context.Context, now time.Time) (int, error)
}

// RunSweeper sweeps s every interval until ctx ends, and then returns.
// After each sweep that deleted something or failed, report (if not nil)
// is told how many records went and the error; a failed sweep is tried
// again at the next tick. Run it in a goroutine of its own:
//
//	go interceptor.RunSweeper(ctx, store, time.Minute, nil)
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
