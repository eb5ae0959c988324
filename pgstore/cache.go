package pgstore

import (
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// maxCompleted bounds the completed records a DB keeps in memory.
const maxCompleted = 4096

// A completed record never changes until it expires (only the sweeper,
// after its expiry, deletes it), so a process may answer its replays and
// mismatches from memory: a hot key's retries then cost the database
// nothing, and take no lock.

// decideCompleted decides req on the completed record of its key kept in
// memory, if any and still live on the database's clock as last seen: a
// replay or a mismatch. It returns 0 when there is none.
func (db *DB) decideCompleted(req storage.ClaimRequest) (storage.Outcome, *storage.Record) {
	db.mu.Lock()
	defer db.mu.Unlock()
	rec := db.completed[req.Key]
	if rec == nil {
		return 0, nil
	}
	if !db.opts.CallerClock {
		req.Now = time.Now().Add(db.clockOffset)
	}
	if !req.Now.Before(rec.Expiry) {
		delete(db.completed, req.Key)
		return 0, nil
	}
	return storage.Decide(rec, req, db.claimant)
}

// remember keeps rec, the record of k, in memory if it is completed.
func (db *DB) remember(k storage.RecordKey, rec *storage.Record) {
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
	db.completed[k] = rec
}

// sawClock records the database's clock as read just now, so that records
// in memory expire on it too.
func (db *DB) sawClock(now time.Time) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.clockOffset = time.Until(now)
}
