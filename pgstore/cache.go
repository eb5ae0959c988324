package pgstore

import "time"

// completedTrust is how long a completed record kept in memory answers for
// the database, from a moment before it was read or written there. A
// completed record changes only when it expires, or when an operator
// releases it (Release): a process may then answer a hot key's replays and
// mismatches from memory, costing the database nothing and taking no lock,
// but only for this long, and Release waits as long after its delete
// commits before it returns. Every entry any process kept of the record was
// read before the delete, so by then none is trusted, and no replica
// replays a released result. A bound waited out needs nothing of the other
// replicas (no registry of listeners, no acknowledgements that a replica
// which went away would never send), at the cost of a second per release,
// an operator's rare act, and one read per hot key per second.
const completedTrust = time.Second

// sawClock records the database's clock as read just now, so that records
// in memory expire on it too.
func (db *DB) sawClock(now time.Time) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.clockOffset = time.Until(now)
}
