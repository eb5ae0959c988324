// Package ledger keeps what one process knows of its idempotency records
// beyond its store. A store decides claims on it as well as on what it
// reads, so that storage.Decide stays the only rule.
//
// The ledger knows three things. Held claims are those whose Tx this
// process still runs. Their worker is alive, so they are in flight however
// late their lease. Renewed leases are those a store kept in memory rather
// than wrote. Trusted completed records answer a retry without a read.
// They do so for as long as the store says they cannot change. The page
// docs/design/trust-windows.md says why each is safe.
package ledger

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// Bounds of the completed records kept: how many, and how large an
// encoding may be. Results can be megabytes. Those are read each time.
const (
	maxCompleted     = 4096
	maxCompletedSize = 16 << 10
)

// Ledger is what one process knows of its records beyond its store. It is
// safe for concurrent use.
type Ledger struct {
	who   storage.Claimant
	trust time.Duration

	// mu guards held and renewed.
	mu      sync.Mutex
	held    map[storage.RecordKey]*storage.Record
	renewed map[storage.RecordKey]renewal

	completed sync.Map // storage.RecordKey → *completed
	n         atomic.Int64

	// gens counts, by key slot, the times a key's record changed or may
	// have: a claim that ended, a completed record forgotten.
	gens counts
}

// New returns an empty ledger for claims by who. A completed record is
// trusted for trust after it was seen. When trust is 0, it is trusted
// until it expires.
func New(who storage.Claimant, trust time.Duration) *Ledger {
	return &Ledger{who: who, trust: trust,
		held: map[storage.RecordKey]*storage.Record{}, renewed: map[storage.RecordKey]renewal{}}
}

// Claimant is who the ledger's claims are made by.
func (l *Ledger) Claimant() storage.Claimant { return l.who }

// A renewal is a lease renewed in memory, for a claim the store did not
// write it for. It outlives the claim's Tx. If that Tx ends without a
// result, the stored lease is older than the last one its worker was known
// alive for.
type renewal struct {
	attempt uint64
	token   storage.ClaimToken
	lease   time.Time
}

// Lookup answers req when that takes no claim: a replay, a mismatch, or a
// request in flight. It never claims. It decides on a claim held here, or
// else on stored, the record the store read (with a lease renewed here).
// Before any read, stored is nil, and a trusted completed record answers.
// When nothing answers, ok is false: the store must read, or claim.
func (l *Ledger) Lookup(req storage.ClaimRequest, stored *storage.Record) (outcome storage.Outcome, rec *storage.Record, ok bool) {
	known, held := l.known(req, stored)
	if known == nil {
		return 0, nil, false
	}
	if outcome, rec = storage.Decide(known, held, req, storage.Durable, l.who); outcome.Claimed() {
		return 0, nil, false // a claim is the store's to decide, and hold
	}
	return outcome, rec, true
}

// known is the record Lookup decides req on, and whether it is a claim
// held here. A trusted record needs no lock.
func (l *Ledger) known(req storage.ClaimRequest, stored *storage.Record) (rec *storage.Record, held bool) {
	if stored == nil {
		if rec := l.trusted(req.Key, req.Now); rec != nil {
			return rec, false
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.knownLocked(req.Key, stored)
}

// knownLocked is what a request for k is decided on: the claim held here,
// or else stored, with a lease renewed here.
func (l *Ledger) knownLocked(k storage.RecordKey, stored *storage.Record) (rec *storage.Record, held bool) {
	if h := l.held[k]; h != nil {
		return h, true
	}
	return l.renewedLocked(k, stored), false
}

// Decide decides req, a claim of durability d, on stored, the record as
// the store read it, or on the claim held here in its place. It holds
// nothing.
func (l *Ledger) Decide(req storage.ClaimRequest, d storage.Durability, stored *storage.Record) (storage.Outcome, *storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decideLocked(req, d, stored)
}

// DecideAndHold is Decide, and holds the claim it makes until Unhold. The
// record stored must have been read at generation g of req.Key. If the
// key's generation has moved since, ok is false, nothing is decided, and
// the store must read again. A read under the store's write lock passes
// UnderLock: no claim's end goes unseen there.
func (l *Ledger) DecideAndHold(req storage.ClaimRequest, d storage.Durability, stored *storage.Record, g Generation) (outcome storage.Outcome, rec *storage.Record, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[req.Key] == nil && !g.underLock && l.gens.of(req.Key) != g.n {
		return 0, nil, false
	}
	outcome, rec = l.decideLocked(req, d, stored)
	if outcome.Claimed() {
		l.held[req.Key] = rec
		delete(l.renewed, req.Key)
	}
	return outcome, rec, true
}

// decideLocked is the ledger's one use of storage.Decide for a claim.
func (l *Ledger) decideLocked(req storage.ClaimRequest, d storage.Durability, stored *storage.Record) (storage.Outcome, *storage.Record) {
	rec, held := l.knownLocked(req.Key, stored)
	return storage.Decide(rec, held, req, d, l.who)
}

// Hold holds claim, decided under the store's own lock, until Unhold.
func (l *Ledger) Hold(k storage.RecordKey, claim *storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[k] = claim
	delete(l.renewed, k)
}

// Unhold stops holding claim, if it is still the one held for k. The
// key's generation moves: its record may have changed as the claim ended.
func (l *Ledger) Unhold(k storage.RecordKey, claim *storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if claim != nil && l.held[k] == claim {
		delete(l.held, k)
		l.gens.add(k)
	}
}

// Holds reports whether a claim of k is held here.
func (l *Ledger) Holds(k storage.RecordKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[k] != nil
}

// RenewHeld keeps claim's later lease in memory and reports true if claim
// is the one held for k. Otherwise the store must write it.
func (l *Ledger) RenewHeld(k storage.RecordKey, claim *storage.Record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[k]
	if h == nil || h.Attempt != claim.Attempt || h.Token != claim.Token {
		return false
	}
	l.renewed[k] = renewal{attempt: claim.Attempt, token: claim.Token, lease: claim.LeaseExpiry}
	return true
}

// DropRenewals drops the renewals of keys whose records now hold a result
// or are gone.
func (l *Ledger) DropRenewals(keys ...storage.RecordKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.renewed, k)
	}
}

// renewedLocked is stored with the lease renewed in memory, when stored is
// the claim that was renewed.
func (l *Ledger) renewedLocked(k storage.RecordKey, stored *storage.Record) *storage.Record {
	r, ok := l.renewed[k]
	if !ok || stored == nil || stored.State != storage.StateInFlight ||
		stored.Attempt != r.attempt || stored.Token != r.token || !r.lease.After(stored.LeaseExpiry) {
		return stored
	}
	renewed := *stored // stored may be shared: change a copy
	renewed.LeaseExpiry = r.lease
	return &renewed
}

// counts counts events by key in 1024 slots that keys hash to. That is
// enough to tell that nothing happened to a key since its count was read.
// The price is a false alarm now and then from another key of its slot: a
// read done again, or a record not kept.
type counts [1024]atomic.Uint64

var countSeed = maphash.MakeSeed()

func (c *counts) slot(k storage.RecordKey) *atomic.Uint64 {
	return &c[maphash.Comparable(countSeed, k)%uint64(len(c))]
}

func (c *counts) of(k storage.RecordKey) uint64 { return c.slot(k).Load() }

func (c *counts) add(k storage.RecordKey) { c.slot(k).Add(1) }

// completed is a completed record kept in memory, and when it was first
// trusted.
type completed struct {
	rec  *storage.Record
	seen time.Time // with its monotonic reading: immune to clock steps
}

// A Generation is a key's count of changes, as taken before its record is
// read or written. It is given to DecideAndHold or Remember with what was
// found. A record changes only as a claim of it ends, or is forgotten
// (replaced, released, swept). So what was read is current while the
// generation stands.
type Generation struct {
	n         uint64
	at        time.Time
	underLock bool
}

// UnderLock is the Generation of a read made under the store's write
// lock, where what is read is current.
var UnderLock = Generation{underLock: true}

// Generation is to be taken before k's record is read, or before a write
// of it is sent.
func (l *Ledger) Generation(k storage.RecordKey) Generation {
	g := Generation{n: l.gens.of(k)}
	if l.trust > 0 {
		g.at = time.Now()
	}
	return g
}

// trusted returns a copy of the completed record kept for k if it is
// live at now and still trusted.
func (l *Ledger) trusted(k storage.RecordKey, now time.Time) *storage.Record {
	v, ok := l.completed.Load(k)
	if !ok {
		return nil
	}
	e := v.(*completed)
	if !now.Before(e.rec.Expiry) || l.trust > 0 && time.Since(e.seen) >= l.trust {
		return nil
	}
	r := *e.rec
	return &r
}

// Remember keeps rec, k's record as read or written at generation g. Its
// encoding is size bytes long (0 if the store has none). A record in
// flight is not kept, and drops what was: claims change, results do not.
// Nothing is kept if k's generation moved since g. Remember never moves
// it: a read changes no record, and a store reading again after its own
// read would never see the generation stand.
func (l *Ledger) Remember(k storage.RecordKey, rec *storage.Record, size int, g Generation) {
	if rec.State != storage.StateCompleted || size > maxCompletedSize {
		l.drop(k)
		return
	}
	if l.gens.of(k) != g.n {
		return
	}
	kept := *rec
	e := &completed{rec: &kept, seen: g.at}
	if _, loaded := l.completed.Swap(k, e); !loaded {
		l.n.Add(1)
	}
	if l.gens.of(k) != g.n { // forgotten while being kept
		if l.completed.CompareAndDelete(k, e) {
			l.n.Add(-1)
		}
		return
	}
	// Full: forget an arbitrary entry or so.
	for range l.n.Load() - maxCompleted {
		l.completed.Range(func(old, _ any) bool {
			l.drop(old.(storage.RecordKey))
			return false
		})
	}
}

// Forget drops the completed record kept for k, once its stored record
// has changed or may have. The key's generation moves: what a read made
// before now would keep is dropped too.
func (l *Ledger) Forget(k storage.RecordKey) {
	l.gens.add(k)
	l.drop(k)
}

func (l *Ledger) drop(k storage.RecordKey) {
	if _, ok := l.completed.LoadAndDelete(k); ok {
		l.n.Add(-1)
	}
}

// HeldAfter returns up to limit of the claims held here whose keys come
// after after in cmp's order. They are sorted, with their renewed leases.
// The records are copies.
func (l *Ledger) HeldAfter(after storage.RecordKey, limit int, cmp func(a, b storage.RecordKey) int) []storage.KeyedRecord {
	l.mu.Lock()
	claims := make([]storage.KeyedRecord, 0, len(l.held))
	for k, rec := range l.held {
		if after == (storage.RecordKey{}) || cmp(k, after) > 0 {
			claims = append(claims, storage.KeyedRecord{Key: k, Record: l.renewedLocked(k, rec)})
		}
	}
	l.mu.Unlock()
	sortKeyed(claims, cmp)
	return copyRecords(claims[:min(limit, len(claims))])
}

// WithRenewals returns claims, read from the store in flight, with the
// leases renewed here. The records are copies.
func (l *Ledger) WithRenewals(claims []storage.KeyedRecord) []storage.KeyedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, c := range claims {
		claims[i].Record = l.renewedLocked(c.Key, c.Record)
	}
	return copyRecords(claims)
}

func sortKeyed(claims []storage.KeyedRecord, cmp func(a, b storage.RecordKey) int) {
	slices.SortFunc(claims, func(a, b storage.KeyedRecord) int { return cmp(a.Key, b.Key) })
}

// copyRecords gives claims records of their own. The caller may change
// them, and the ledger's are shared.
func copyRecords(claims []storage.KeyedRecord) []storage.KeyedRecord {
	for i, c := range claims {
		r := *c.Record
		claims[i].Record = &r
	}
	return claims
}
