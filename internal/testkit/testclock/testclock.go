// Package testclock is a clock that tests move by hand. Leases, expiry and
// record lifetimes are then tested without sleeping.
package testclock

import (
	"sync"
	"time"
)

// Clock is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock standing at a fixed instant.
func New() *Clock { return &Clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)} }

// Now is the clock's time; pass it where a func() time.Time is wanted.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
