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
	"bytes"
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
	// released counts the claims that left held, by key slot.
	released counts

	completed sync.Map // storage.RecordKey → *completed
	n         atomic.Int64
	// forgotten counts the completed records forgotten, by key slot.
	forgotten counts
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

// Answer decides req on what the ledger knows without the store: a
// trusted completed record, or a claim held here. When it knows neither,
// ok is false and the store must be read.
func (l *Ledger) Answer(req storage.ClaimRequest) (outcome storage.Outcome, rec *storage.Record, ok bool) {
	if rec := l.trusted(req.Key, req.Now); rec != nil {
		if outcome, rec := storage.Decide(rec, false, req, storage.Durable, l.who); !outcome.Claimed() {
			return outcome, rec, true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[req.Key] == nil {
		return 0, nil, false
	}
	outcome, rec = l.decideLocked(req, storage.Durable, nil) // a held key is never claimed
	return outcome, rec, true
}

// Decide decides req, a claim of durability d, on stored, the record as
// the store read it, or on the claim held here in its place. It holds
// nothing.
func (l *Ledger) Decide(req storage.ClaimRequest, d storage.Durability, stored *storage.Record) (storage.Outcome, *storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decideLocked(req, d, stored)
}

// Claim is Decide, and holds the claim it makes until Release. The record
// stored must have been read after Version(req.Key) returned version. A
// claim of the key may have ended since. Then ok is false, nothing is
// decided, and the store must read again.
func (l *Ledger) Claim(req storage.ClaimRequest, d storage.Durability, stored *storage.Record, version uint64) (outcome storage.Outcome, rec *storage.Record, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[req.Key] == nil && l.released.of(req.Key) != version {
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
	if held := l.held[req.Key]; held != nil {
		return storage.Decide(held, true, req, d, l.who)
	}
	return storage.Decide(l.renewedLocked(req.Key, stored), false, req, d, l.who)
}

// Version is to be taken before a record that Claim decides on is read. A
// record changes only as a claim of it ends. So a read made after it is
// current until the version moves.
func (l *Ledger) Version(k storage.RecordKey) uint64 { return l.released.of(k) }

// Hold holds claim, decided under the store's own lock, until Release.
func (l *Ledger) Hold(k storage.RecordKey, claim *storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[k] = claim
	delete(l.renewed, k)
}

// Release stops holding claim, if it is still the one held for k.
func (l *Ledger) Release(k storage.RecordKey, claim *storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[k] == claim {
		delete(l.held, k)
		l.released.add(k)
	}
}

// Holds reports whether a claim of k is held here.
func (l *Ledger) Holds(k storage.RecordKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[k] != nil
}

// Renew keeps claim's later lease in memory and reports true if claim is
// the one held for k. Otherwise the store must write it.
func (l *Ledger) Renew(k storage.RecordKey, claim *storage.Record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[k]
	if h == nil || h.Attempt != claim.Attempt || h.Token != claim.Token {
		return false
	}
	l.renewed[k] = renewal{attempt: claim.Attempt, token: claim.Token, lease: claim.LeaseExpiry}
	return true
}

// Settled drops the renewals of keys whose records now hold a result or
// are gone.
func (l *Ledger) Settled(keys ...storage.RecordKey) {
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

// counts counts events by key in 256 slots that keys hash to. That is
// enough to tell that nothing happened to a key since its count was read.
// The price is a false alarm now and then from another key of its slot.
type counts [256]atomic.Uint64

var countSeed = maphash.MakeSeed()

func (c *counts) slot(k storage.RecordKey) *atomic.Uint64 {
	return &c[maphash.Comparable(countSeed, k)%uint64(len(c))]
}

func (c *counts) of(k storage.RecordKey) uint64 { return c.slot(k).Load() }

func (c *counts) add(k storage.RecordKey) { c.slot(k).Add(1) }

// completed is a completed record kept in memory. It holds the encoding it
// was decoded from, if the store gave one, and when it was first trusted.
type completed struct {
	raw  []byte
	rec  *storage.Record
	seen time.Time // with its monotonic reading: immune to clock steps
}

// A Sighting is taken before a record is read or written, and given to
// Remember with what was found.
type Sighting struct {
	forgotten uint64
	at        time.Time
}

// Sight is to be taken before k's record is read, or before a write of it
// is sent.
func (l *Ledger) Sight(k storage.RecordKey) Sighting {
	s := Sighting{forgotten: l.forgotten.of(k)}
	if l.trust > 0 {
		s.at = time.Now()
	}
	return s
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

// Decoded returns the record kept for k if raw is the encoding it was
// decoded from, and the kept copy of raw. The record is a copy. Its Result
// is shared and never changed.
func (l *Ledger) Decoded(k storage.RecordKey, raw []byte) (*storage.Record, []byte) {
	v, ok := l.completed.Load(k)
	if !ok {
		return nil, nil
	}
	e := v.(*completed)
	if e.raw == nil || !bytes.Equal(e.raw, raw) {
		return nil, nil
	}
	r := *e.rec
	return &r, e.raw
}

// Remember keeps rec, k's record as read or written after s was taken.
// With it goes raw, the record's encoding (nil if the store has none). A
// record in flight is not kept, and forgets what was. Claims change,
// results do not. Nothing is kept if k was forgotten since s.
func (l *Ledger) Remember(k storage.RecordKey, rec *storage.Record, raw []byte, s Sighting) {
	if rec.State != storage.StateCompleted || len(raw) > maxCompletedSize {
		l.Forget(k)
		return
	}
	if l.forgotten.of(k) != s.forgotten {
		return
	}
	kept := *rec
	e := &completed{raw: raw, rec: &kept, seen: s.at}
	if _, loaded := l.completed.Swap(k, e); !loaded {
		l.n.Add(1)
	}
	if l.forgotten.of(k) != s.forgotten { // forgotten while being kept
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
// has changed or may have. It also drops what a read made before now
// would keep.
func (l *Ledger) Forget(k storage.RecordKey) {
	l.forgotten.add(k)
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
