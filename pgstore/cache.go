package pgstore

import (
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// maxCompleted bounds the completed records a DB keeps in memory.
const maxCompleted = 4096

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

// completedRecord is a completed record kept in memory, and since when it
// is trusted.
type completedRecord struct {
	rec   *storage.Record
	since time.Time // with its monotonic reading: immune to clock steps
}

// decideCompleted decides req on the completed record of its key kept in
// memory, if any, still trusted (completedTrust) and still live on the
// database's clock as last seen: a replay or a mismatch. It returns 0 when
// there is none.
func (db *DB) decideCompleted(req storage.ClaimRequest) (storage.Outcome, *storage.Record) {
	db.mu.Lock()
	defer db.mu.Unlock()
	e, ok := db.completed[req.Key]
	if !ok {
		return 0, nil
	}
	if !db.opts.CallerClock {
		req.Now = time.Now().Add(db.clockOffset)
	}
	if !req.Now.Before(e.rec.Expiry) || time.Since(e.since) >= completedTrust {
		delete(db.completed, req.Key)
		return 0, nil
	}
	return storage.Decide(e.rec, req, db.claimant)
}

// remember keeps rec, the record of k, in memory if it is completed. since
// is a time taken before the statement that read or wrote it was sent.
func (db *DB) remember(k storage.RecordKey, rec *storage.Record, since time.Time) {
	if rec.State != storage.StateCompleted {
		return
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(db.completed) >= maxCompleted {
		for old := range db.completed { // any one: map order is random
			delete(db.completed, old)
			break
		}
	}
	db.completed[k] = completedRecord{rec: rec, since: since}
}

// forget drops what is kept of k's record.
func (db *DB) forget(k storage.RecordKey) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.completed, k)
}

// sawClock records the database's clock as read just now, so that records
// in memory expire on it too.
func (db *DB) sawClock(now time.Time) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.clockOffset = time.Until(now)
}
