package interceptor

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
)

// Store keeps idempotency records. It is all the interceptor needs from a
// backend: an atomic claim before the handler runs, compare-and-set lease
// renewals while it runs, and a compare-and-set completion after it. Decide
// and CheckClaim hold the rules, so a backend only has to run them inside
// one transaction of its own.
//
// A backend whose own data lives beside the records (a SQL database, say)
// can go further and commit the handler's writes in the completion's
// transaction; the interface leaves that to the backend.
type Store interface {
	// Claim decides req against the record stored for req.Key, atomically:
	// it reads the record, calls Decide with the store's Claimant, and, when
	// the outcome is Claimed, writes the new record before returning.
	// Concurrent claims of one key must be serialized so that exactly one of
	// them is fresh.
	Claim(ctx context.Context, req ClaimRequest) (Outcome, *Record, error)

	// Renew stores claim, a claim that Claim returned with a later
	// LeaseExpiry, provided CheckClaim finds it still the stored claim;
	// otherwise it returns ErrSuperseded and writes nothing.
	Renew(ctx context.Context, key RecordKey, claim *Record) error

	// Complete stores done, the completed form of a claim (Record.Completed),
	// provided CheckClaim finds that claim still stored; otherwise it returns
	// ErrSuperseded and writes nothing.
	Complete(ctx context.Context, key RecordKey, done *Record) error
}

// ErrSuperseded is returned by Store.Renew and Store.Complete when the claim
// is no longer the stored one: a takeover started a newer attempt, or the
// record expired and was replaced.
var ErrSuperseded = errors.New("idempotency: attempt superseded")

// RecordKey names one record: an idempotency key within a caller's scope.
// The same key under two scopes names two records.
type RecordKey struct {
	Scope string
	Key   string
}

// ClaimRequest is one request asking to run its handler.
type ClaimRequest struct {
	Key         RecordKey
	Fingerprint Fingerprint
	// Scheme is how Fingerprint was computed; see FingerprintScheme.
	Scheme string
	Now    time.Time
	// Lease is how long the claim holds before another request may take it over.
	Lease time.Duration
	// TTL is how long a new record lives, from its first claim.
	TTL time.Duration
}

// Outcome is what a claim decided.
type Outcome int

// The outcomes of a claim, as in the table of SPEC section 4.
const (
	// OutcomeFresh: no live record; the caller runs the handler.
	OutcomeFresh Outcome = iota + 1
	// OutcomeReplay: the same request completed; its result is replayed.
	OutcomeReplay
	// OutcomeInFlight: the same request holds a live lease; try again later.
	OutcomeInFlight
	// OutcomeMismatch: the key was used for a different request.
	OutcomeMismatch
	// OutcomeTakeover: the same request's lease expired; the caller runs the
	// handler again as the next attempt.
	OutcomeTakeover
)

var outcomeNames = [...]string{"", "fresh", "replay", "in_flight", "mismatch", "takeover"}

func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// Claimed reports whether the caller now holds the claim and must run the
// handler; a store writes the new record exactly in these cases.
func (o Outcome) Claimed() bool { return o == OutcomeFresh || o == OutcomeTakeover }

// State is a record's phase.
type State int

const (
	// StateInFlight: a handler holds the claim.
	StateInFlight State = iota + 1
	// StateCompleted: the result is stored.
	StateCompleted
)

// ClaimToken tells one claim from every other, so that a worker can only
// complete the claim it was given, even if the record was replaced since.
type ClaimToken [16]byte

// Record is what a store keeps for one RecordKey.
type Record struct {
	Fingerprint Fingerprint
	// Scheme is how Fingerprint was computed; see FingerprintScheme.
	Scheme string
	State  State
	// Attempt counts the handler runs for this record, from 1.
	Attempt uint64
	Token   ClaimToken
	// Owner is the Claimant ID of the process that made the claim.
	Owner string
	// LeaseExpiry is when an in-flight claim may be taken over.
	LeaseExpiry time.Time
	// Expiry is when the record is forgotten; from then on it counts as absent.
	Expiry time.Time
	// Result is set once the record is completed.
	Result *Result
}

// Result is everything the handler sent back.
type Result struct {
	// Response is the handler's response when it succeeded; otherwise nil.
	Response *anypb.Any
	// Status is the handler's full status when it failed; otherwise nil.
	Status *spb.Status
	// Header and Trailer are the metadata the handler set.
	Header, Trailer metadata.MD
}

// Claimant is who claims through a store: recorded with each claim, so that
// a store knows which process holds it.
type Claimant struct {
	// ID names the claiming process, new each time a store is opened.
	ID string
	// Exclusive says no other process can use the store at the same time
	// (the embedded store's file lock proves it). An in-flight claim of any
	// other ID is then an orphan of a process that died, and is taken over
	// at once instead of when its lease runs out. A store shared by several
	// processes leaves it false and keeps the lease rule.
	Exclusive bool
}

// Decide applies the claim rules to stored, the live or expired record for
// req.Key (nil when there is none), for a claim by who. It returns the
// outcome and the record as it stands afterwards: a new in-flight record
// when the outcome is Claimed, which the store must write, or stored itself.
func Decide(stored *Record, req ClaimRequest, who Claimant) (Outcome, *Record) {
	switch {
	case stored == nil || !req.Now.Before(stored.Expiry):
		return OutcomeFresh, newClaim(req, who, 1, req.Now.Add(req.TTL))
	case stored.Fingerprint != req.Fingerprint || stored.Scheme != req.Scheme:
		return OutcomeMismatch, stored
	case stored.State == StateCompleted:
		return OutcomeReplay, stored
	case req.Now.Before(stored.LeaseExpiry) && !(who.Exclusive && stored.Owner != who.ID):
		return OutcomeInFlight, stored
	default:
		return OutcomeTakeover, newClaim(req, who, stored.Attempt+1, stored.Expiry)
	}
}

func newClaim(req ClaimRequest, who Claimant, attempt uint64, expiry time.Time) *Record {
	r := &Record{
		Fingerprint: req.Fingerprint,
		Scheme:      req.Scheme,
		State:       StateInFlight,
		Attempt:     attempt,
		Owner:       who.ID,
		LeaseExpiry: req.Now.Add(req.Lease),
		Expiry:      expiry,
	}
	rand.Read(r.Token[:]) // never fails; see crypto/rand.Read
	return r
}

// CheckClaim reports whether claim, or its renewed or completed form, may
// replace stored (nil when the record is gone). It returns ErrSuperseded
// unless stored is still that very claim, in flight.
func CheckClaim(stored, claim *Record) error {
	if stored == nil || stored.State != StateInFlight ||
		stored.Attempt != claim.Attempt || stored.Token != claim.Token {
		return ErrSuperseded
	}
	return nil
}

// Completed returns the completed form of the claim r, holding result: what
// Store.Complete is given.
func (r *Record) Completed(result *Result) *Record {
	done := *r
	done.State = StateCompleted
	done.LeaseExpiry = time.Time{}
	done.Result = result
	return &done
}
