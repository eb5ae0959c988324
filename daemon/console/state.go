package console

import (
	"context"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// current is what a key holds now, as the console judges it: the record
// stored, or the claim in flight that the store lists in its place.
type current struct {
	rec *storage.Record // nil when the key has none
	// stored says rec is in the store. It is false for a claim this
	// process holds in memory alone, such as a transactional one not yet
	// committed, which Get cannot see.
	stored bool
}

// current reads what k holds now. A key with no live result is looked for
// in the list of claims in flight too. That list holds the claims this
// process holds in memory alone, and the leases it renewed in memory,
// which the stored record lacks.
func (s *Console) current(ctx context.Context, k storage.RecordKey) (current, error) {
	rec, err := s.c.Store.Get(ctx, k)
	if err != nil {
		return current{}, err
	}
	if rec != nil && rec.State == storage.StateCompleted && s.c.Now().Before(rec.Expiry) {
		return current{rec: rec, stored: true}, nil // a live result: no claim of the key can be made
	}
	claim, err := s.claimOf(ctx, k)
	switch {
	case err != nil:
		return current{}, err
	case claim == nil:
		return current{rec: rec, stored: rec != nil}, nil
	}
	held := rec == nil || storage.CheckClaim(rec, claim) != nil
	if me, ok := s.claimant(); ok && claim.Owner != me.ID {
		held = false // only this process's claims are held here: another's was stored after Get read
	}
	return current{rec: claim, stored: !held}, nil
}

// claimOf returns the claim of k the store lists in flight, or nil. The
// list starts right before k, so k comes first when it is listed.
func (s *Console) claimOf(ctx context.Context, k storage.RecordKey) (*storage.Record, error) {
	claims, err := s.c.Store.InFlight(ctx, justBefore(k), 1)
	if err != nil || len(claims) == 0 || claims[0].Key != k {
		return nil, err
	}
	return claims[0].Record, nil
}

// justBefore is a key that the list of claims in flight starts after so
// as to begin with k. Both stores order one scope's keys byte by byte. An
// idempotency key is printable ASCII, below 0x7f (wire.ValidateKey). So
// no key comes between k's last byte made one less, followed by 0x7f,
// and k itself. k.Key is never empty.
func justBefore(k storage.RecordKey) storage.RecordKey {
	b := []byte(k.Key)
	b[len(b)-1]--
	return storage.RecordKey{Scope: k.Scope, Key: string(append(b, 0x7f))}
}

// claimantStore is a store that says who claims through it, as boltstore
// and pgstore do.
type claimantStore interface {
	Claimant() storage.Claimant
}

// claimant is who claims through the console's store: this process. ok
// is false when the store does not say.
func (s *Console) claimant() (me storage.Claimant, ok bool) {
	cs, ok := s.c.Store.(claimantStore)
	if !ok {
		return storage.Claimant{}, false
	}
	return cs.Claimant(), true
}

// toldInFlight is what a retry of a key in flight is answered.
const toldInFlight = "told the key is in flight (ABORTED; 409 over HTTP), or waits up to --in-flight-wait for its result"

// outlook is what a key's next request gets, in words: brief for a row of
// a table, full for the key's page and the JSON API.
type outlook struct {
	brief, full string
}

// retryOutlook says what a retry of c, a claim in flight, gets at now. It
// follows storage.Decide. A process holding a claim, whose handler or
// commit it still runs, answers in flight however late the lease. Any
// other process starts afresh once the record expired, and takes the
// claim over once its lease ran out, or at once when the store is used
// by one process at a time and the claim is an earlier process's. The
// console knows a claim is held only when it is held in memory alone.
// Whether a stored claim's holder still runs it, it cannot know: the
// sentence then says what that decides, and promises nothing.
func (s *Console) retryOutlook(c current, now time.Time) outlook {
	rec := c.rec
	me, known := s.claimant()
	mine := known && rec.Owner == me.ID
	orphan := known && me.Exclusive && !mine // its process ended: nothing can hold it
	switch {
	case !c.stored:
		o := outlook{"in flight while this process runs it", "This process holds the claim and still runs its handler or commit: a retry is " +
			toldInFlight + ", however late the lease."}
		if rec.Durability == storage.Transactional {
			o.full += " Nothing of it is stored: should the run end without a result, the next request runs afresh."
		}
		return o
	case !now.Before(rec.Expiry) && orphan:
		return outlook{"runs afresh", "The record expired: the next request runs afresh."}
	case !now.Before(rec.Expiry):
		return outlook{"runs afresh, unless its holder still runs it", "The record expired: the next request runs afresh, unless " + unlessHeld(mine, me.Exclusive)}
	case orphan:
		return outlook{"takes it over", "The claim was left by an earlier process. This store is used by one process at a time, so the next retry takes it over at once, whatever the lease."}
	case now.Before(rec.LeaseExpiry):
		return outlook{"in flight", "While the lease holds, a retry is " + toldInFlight + "."}
	}
	return outlook{"takes it over, unless its holder still runs it", "The lease ran out: a retry takes the claim over, unless " + unlessHeld(mine, me.Exclusive)}
}

// unlessHeld ends a sentence on what a retry gets with the case the
// console cannot see: the process that made the claim still runs it.
// mine says that process is this one; exclusive, that no other uses the
// store.
func unlessHeld(mine, exclusive bool) string {
	if mine && exclusive {
		return "this process, which made the claim, still runs its handler or commit: then the retry is " + toldInFlight +
			". Whether that run has ended, the console cannot tell."
	}
	who := "the process that made the claim (its owner)"
	if mine {
		who = "the process that made the claim, this one,"
	}
	return "the retry reaches " + who + " while that process still runs its handler or commit: that process tells it the key is in flight. " +
		"Whether it still runs it, the console cannot tell."
}

// unseen is what a store shared by processes may hold that the console
// cannot see: another process's claim not yet committed. It is empty
// for a store used by one process at a time.
func (s *Console) unseen() string {
	if me, ok := s.claimant(); ok && me.Exclusive {
		return ""
	}
	return " A claim another process holds and has not committed yet is not seen here."
}
