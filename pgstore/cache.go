package pgstore

import "time"

// completedTrust is how long a completed record kept in memory answers for
// the database. It counts from a moment before the record was read or
// written there. A completed record changes only when it expires or when an
// operator releases it (Release). So a process may answer a hot key's
// replays and mismatches from memory, but only for this long. That costs
// the database nothing and takes no lock.
//
// Release waits as long after its delete commits before it returns. Every
// entry any process kept of the record was read before the delete. So by
// then none is trusted, and no replica replays a released result. A bound
// waited out needs nothing of the other replicas: no registry of
// listeners, no acknowledgements. It costs a second per release, an
// operator's rare act, and one read per hot key per second. See
// docs/design/trust-windows.md.
const completedTrust = time.Second

// sawClock records the database's clock as read just now. Records in
// memory then expire on it too.
func (db *DB) sawClock(now time.Time) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.clockOffset = time.Until(now)
}
