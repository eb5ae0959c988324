package boltstore

import (
	"sync"
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// overlay is what this process knows of its records beyond the file, and
// decides claims on: the completed records kept decoded, which answer a
// retry without a read (see decoded); the claims whose Tx this process
// runs, pending until it ends (see ClaimTx); and the leases renewed of
// those claims, which Renew does not write (see renewal). decide is the
// one place that applies the claim rule, so that each of them changes the
// record decided on, never the rule.
type overlay struct {
	claimant storage.Claimant
	decoded  decoded

	// mu guards pending and renewed.
	mu      sync.Mutex
	pending map[string]*storage.Record
	// released counts the claims that left pending: a transactional claim
	// that read its record without mu reads it again only if a claim of its
	// key's slot was released since.
	released keyCounts
	renewed  map[string]renewal
}

func newOverlay(claimant storage.Claimant) *overlay {
	return &overlay{claimant: claimant, pending: map[string]*storage.Record{}, renewed: map[string]renewal{}}
}

// A renewal is the lease that a renewal asked for of a durable claim held
// in memory. Renew writes nothing for such a claim (a live worker needs no
// lease on disk), so if its Tx ends without a result (the handler overran,
// or its result could not be stored), the stored lease is older than the
// last one its worker was known alive for, and a retry could take over at
// once. Decisions use the renewed lease instead; the entry goes once a
// claim supersedes it, its result commits or its record is swept.
type renewal struct {
	attempt uint64
	token   storage.ClaimToken
	lease   time.Time
}

// decide is storage.Decide on rec, a record as this process knows it.
// A pending claim (pending) is run by this live process: never taken over,
// so in flight for every request that matches it.
func (o *overlay) decide(rec *storage.Record, pending bool, req storage.ClaimRequest) (storage.Outcome, *storage.Record) {
	outcome, got := storage.Decide(rec, req, o.claimant)
	if pending && outcome != storage.OutcomeMismatch {
		return storage.OutcomeInFlight, rec
	}
	return outcome, got
}

// cached decides req on the completed record kept for key, if one is kept
// and has not expired; it returns 0 when that cannot answer req.
func (o *overlay) cached(key []byte, req storage.ClaimRequest) (storage.Outcome, *storage.Record) {
	rec := o.decoded.unexpired(key, req.Now)
	if rec == nil {
		return 0, nil
	}
	if outcome, rec := o.decide(rec, false, req); !outcome.Claimed() {
		return outcome, rec
	}
	return 0, nil
}

// decideRead decides req on stored, key's record read without mu. Only a
// claim in flight can have been renewed, so only then does it take mu.
// A claim it decides is not held: hold decides again.
func (o *overlay) decideRead(key []byte, stored *storage.Record, req storage.ClaimRequest) (storage.Outcome, *storage.Record) {
	if stored == nil || stored.State != storage.StateInFlight {
		return o.decide(stored, false, req)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.decide(o.renewedLocked(key, stored), false, req)
}

// hold is holdLocked under mu.
func (o *overlay) hold(key []byte, req storage.ClaimRequest, stored, mine *storage.Record) (storage.Outcome, *storage.Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holdLocked(key, req, stored, mine)
}

// holdLocked decides req on key's pending claim, if there is one other than
// mine, else on stored with its renewed lease. A claim it makes is pending
// until its Tx ends, and supersedes the renewal. mine is the caller's own
// claim from an earlier run of its write, forgotten unless made again.
func (o *overlay) holdLocked(key []byte, req storage.ClaimRequest, stored, mine *storage.Record) (storage.Outcome, *storage.Record) {
	rec, pending := o.pending[string(key)], true
	if rec == nil || rec == mine {
		rec, pending = o.renewedLocked(key, stored), false
	}
	outcome, rec := o.decide(rec, pending, req)
	switch {
	case outcome.Claimed():
		o.pending[string(key)] = rec
		delete(o.renewed, string(key))
	case mine != nil && !pending:
		o.forgetLocked(key)
	}
	return outcome, rec
}

// staleLocked reports whether key's record, read after released was taken
// from key's slot, must be read again before holdLocked: no claim of key
// is pending, and one of its slot's left pending since. A record changes
// only as a claim of it ends and leaves pending.
func (o *overlay) staleLocked(key []byte, released uint64) bool {
	return o.pending[string(key)] == nil && o.released.of(key) != released
}

// renewedLocked is stored with the lease renewed in memory when stored is
// the claim renewed.
func (o *overlay) renewedLocked(key []byte, stored *storage.Record) *storage.Record {
	r, ok := o.renewed[string(key)]
	if !ok || stored == nil || stored.State != storage.StateInFlight ||
		stored.Attempt != r.attempt || stored.Token != r.token || !r.lease.After(stored.LeaseExpiry) {
		return stored
	}
	renewed := *stored // stored may be shared: change a copy
	renewed.LeaseExpiry = r.lease
	return &renewed
}

// renew keeps claim's lease in memory and reports true if claim is the
// one pending for key; otherwise the caller stores it.
func (o *overlay) renew(key []byte, claim *storage.Record) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.pending[string(key)]
	if p == nil || p.Attempt != claim.Attempt || p.Token != claim.Token {
		return false
	}
	o.renewed[string(key)] = renewal{attempt: claim.Attempt, token: claim.Token, lease: claim.LeaseExpiry}
	return true
}

// forgetRenewals drops the renewals of keys whose claims ended with a result
// or whose records were swept.
func (o *overlay) forgetRenewals(keys ...[]byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, key := range keys {
		delete(o.renewed, string(key))
	}
}

// release forgets the pending claim of key, if it is still claim.
func (o *overlay) release(key []byte, claim *storage.Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending[string(key)] == claim {
		o.forgetLocked(key)
	}
}

// forgetLocked removes key's pending claim and counts it released.
func (o *overlay) forgetLocked(key []byte) {
	delete(o.pending, string(key))
	o.released.add(key)
}
