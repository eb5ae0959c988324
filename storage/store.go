// Package storage is the contract between the idempotency interceptor and
// the stores that keep its records. It holds these parts:
//
//   - Store: an atomic claim, lease renewal and completion.
//
//   - TxStore: a handler's writes committed with its record.
//
//   - Watcher, Upkeep, and Releaser (an operator's release of a key).
//
//   - For operators: InFlightLister, ReleaseHistory (who released a key,
//     and when) and KeyFinder (a key's records in every scope).
//
//   - Record: what they keep.
//
//   - Decide, CheckClaim and CheckRelease: the rules every store runs
//     inside one transaction of its own.
//
// A store reports what went wrong with the errors below: ErrDamaged,
// ErrStopped, ErrSuperseded, ErrConflict, ErrOutcomeUnknown and
// ErrScopeUnavailable. It never
// uses a gRPC status. The interceptor alone decides what the caller is
// told.
//
// Package storagetest is the conformance suite a store must pass. The
// rules themselves are stated in docs/idempotency.md.
package storage

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// Store keeps idempotency records. It is all the interceptor needs from a
// backend. That is an atomic claim before the handler runs, compare-and-set
// lease renewals while it runs, and a compare-and-set completion after it.
// Decide and CheckClaim hold the rules. A backend only has to run them
// inside one transaction of its own.
//
// A backend whose own data lives beside the records can go further. It can
// commit the handler's writes in the completion's transaction: see TxStore.
type Store interface {
	// Claim decides req against the record stored for req.Key, atomically.
	// It reads the record and calls Decide with the store's Claimant. When
	// the outcome is Claimed, it writes the new record before returning.
	// Concurrent claims of one key must be serialized, so that exactly one
	// of them is fresh.
	Claim(ctx context.Context, req ClaimRequest) (Outcome, *Record, error)

	// Renew stores claim, a claim that Claim returned, with a later
	// LeaseExpiry. It does so only if CheckClaim finds it still the stored
	// claim. Otherwise it returns ErrSuperseded and writes nothing.
	Renew(ctx context.Context, key RecordKey, claim *Record) error

	// Complete stores done, the completed form of a claim
	// (Record.Completed). It does so only if CheckClaim finds that claim
	// still stored. Otherwise it returns ErrSuperseded and writes nothing.
	Complete(ctx context.Context, key RecordKey, done *Record) error
}

// TxStore is a Store whose records live beside the handlers' own data. A
// handler's writes and the completion of its record commit in one
// transaction: both or neither. A crash at any point then leaves no write
// that no key's answer names.
//
// The interceptor uses it, when the store implements it, for every request
// it claims. The handler's context carries the Tx. The backend's own
// repositories find it there (each backend says how) and write through it.
// A handler that writes nothing through it behaves as with a plain Store.
type TxStore interface {
	Store

	// ClaimTx decides req as Claim does. When the outcome is Claimed, it
	// returns the Tx that the handler's writes join and that completes the
	// claim. A Durable claim is committed before ClaimTx returns, as
	// Claim's is. A Transactional one need only keep concurrent duplicates
	// out until the Tx ends. It becomes durable together with the
	// handler's writes and the completion, or never.
	ClaimTx(ctx context.Context, req ClaimRequest, d Durability) (Outcome, *Record, Tx, error)
}

// Durability is when a claim is committed. It follows from what the
// handler may do. So it also says what a stored error left behind, and
// thus whether an operator may release it (see CheckRelease).
type Durability uint8

const (
	// Durable: the claim is committed before the handler runs. Its handler
	// may act outside the store, so a stored error of it may have acted.
	// The zero value, and the only durability of Store.Claim.
	Durable Durability = iota
	// Transactional: the claim commits in the Tx that completes it, with
	// the handler's writes, or never. A handler declared so (the
	// interceptor's WithTransactional) acts only through its writes. A
	// stored error of it kept none of them.
	Transactional
)

// Tx is a unit of work of a TxStore: the handler's writes and the
// completion of one claim, committed together. Exactly one of Commit and
// Rollback ends it; Rollback after Commit does nothing.
type Tx interface {
	// Context returns parent carrying the Tx, for the handler: writes made
	// through the store's repositories with it join the Tx.
	Context(parent context.Context) context.Context

	// Commit stores done, the completed form of the claim, in one
	// transaction with the writes the handler made through the Tx. It keeps
	// those writes only when done's result is a response (KeepsWrites). An
	// error names no writes. CheckClaim must find the claim still the
	// stored one, else Commit returns ErrSuperseded. If any of it fails,
	// none of it is stored, and a Transactional claim is released. The
	// error is returned. A store that cannot tell whether it stored it
	// returns an error wrapping ErrOutcomeUnknown.
	Commit(ctx context.Context, done *Record) error

	// Rollback discards the handler's writes and releases a Transactional
	// claim. A Durable claim stays in flight, for the lease rule.
	Rollback()
}

// Watcher is a Store shared by several processes. It can tell a waiting
// duplicate when a claim of its key ends in any of them, as PostgreSQL's
// LISTEN/NOTIFY can. With WithInFlightWait, the interceptor then wakes a
// duplicate of a request running elsewhere at once, not at its next poll.
// The interceptor still polls once a second, in case a notice is lost.
type Watcher interface {
	// Watch returns a channel and a func that stops the watch. The channel
	// is closed once a claim of key may have ended after Watch was called.
	// The interceptor calls the func exactly once.
	Watch(key RecordKey) (ended <-chan struct{}, stop func())
}

// The errors a store returns. The interceptor tells the caller a plain
// message by the sentinel an error wraps. It gives the error itself to its
// Observer and logger. ErrDamaged is answered DATA_LOSS. ErrConflict runs
// a transactional method again, and is answered ABORTED once it has lost
// too often. ErrOutcomeUnknown is answered UNAVAILABLE, saying the outcome
// is unknown. ErrScopeUnavailable, on a claim, is answered UNAVAILABLE
// with a retry delay. ErrStopped, and every error that wraps none of them,
// is answered UNAVAILABLE.

// ErrDamaged, wrapped in a store's error, says the store found its data
// damaged. The caller is told DATA_LOSS. A claim that fails so does not
// run the request. A completion that fails so does not store the result.
var ErrDamaged = errors.New("idempotency: stored data is damaged")

// ErrStopped, wrapped in a store's error, says the store takes no requests
// until it is restarted. It may stop after a commit whose outcome it cannot
// know, say. The caller is told UNAVAILABLE, and to retry with the same
// key.
var ErrStopped = errors.New("idempotency: the store takes no requests until it is restarted")

// ErrSuperseded is returned by Store.Renew and Store.Complete when the
// claim is no longer the stored one. A takeover started a newer attempt,
// or the record expired and was replaced.
var ErrSuperseded = errors.New("idempotency: attempt superseded")

// ErrConflict, wrapped in the error of Tx.Commit, says that nothing was
// stored. Data the handler read changed before its writes could commit: a
// compare-and-set it staged lost to another request. A transactional
// method is then run again on the data as it now stands. Its only effects
// are its writes through the Tx. It is as if the two requests had come one
// after the other. Any other method may have acted outside the store. Its
// claim stays in flight, as after any failed commit.
var ErrConflict = errors.New("idempotency: data the handler read changed before its writes committed")

// ErrOutcomeUnknown, wrapped in the error of Tx.Commit or Store.Complete,
// says that the store cannot tell whether the transaction was kept. Say
// the disk failed after the commit's last write: a restart may find it on
// disk or not. The caller is told exactly that, and to retry with the same
// key. The retry answers with the stored result if it was kept.
var ErrOutcomeUnknown = errors.New("idempotency: whether the commit was kept is unknown")

// RecordKey names one record: an idempotency key within a caller's scope.
// The same key under two scopes names two records.
type RecordKey struct {
	Scope string
	Key   string
}

// MaxTTL bounds how long a record lives. A store may keep times as
// nanoseconds since 1970, which end in 2262; a record's expiry must stay
// well before that.
const MaxTTL = 100 * 365 * 24 * time.Hour

// ClaimRequest is one request asking to run its handler.
type ClaimRequest struct {
	Key         RecordKey
	Fingerprint Fingerprint
	// Scheme is how Fingerprint was computed; see FingerprintScheme.
	Scheme string
	Now    time.Time
	// Lease is how long the claim holds before another request may take it
	// over.
	Lease time.Duration
	// TTL is how long a new record lives, from its first claim.
	TTL time.Duration
}

// Outcome is what a claim decided.
type Outcome int

// The outcomes of a claim, as in the idempotency contract
// (docs/idempotency.md).
const (
	// OutcomeFresh: no live record. The caller runs the handler.
	OutcomeFresh Outcome = iota + 1
	// OutcomeReplay: the same request completed. Its result is replayed.
	OutcomeReplay
	// OutcomeInFlight: the same request holds a live lease. Try again
	// later.
	OutcomeInFlight
	// OutcomeMismatch: the key was used for a different request.
	OutcomeMismatch
	// OutcomeTakeover: the same request's lease expired. The caller runs
	// the handler again as the next attempt.
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
// handler. A store writes the new record exactly in these cases.
func (o Outcome) Claimed() bool { return o == OutcomeFresh || o == OutcomeTakeover }

// State is a record's phase.
type State int

const (
	// StateInFlight: a handler holds the claim.
	StateInFlight State = iota + 1
	// StateCompleted: the result is stored.
	StateCompleted
)

// ClaimToken tells one claim from every other. A worker can thus complete
// only the claim it was given, even if the record was replaced since.
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
	// ClaimTime is when the attempt that made the claim began (its
	// ClaimRequest.Now). It tells an operator how long a key has been in
	// flight. Zero for records stored before it was kept.
	ClaimTime time.Time
	// Expiry is when the record is forgotten. From then on it counts as
	// absent.
	Expiry time.Time
	// Result is set once the record is completed.
	Result *Result
	// Durability is that of the claim, from the moment Decide makes it. A
	// store keeps it with the result. Release can then tell a Transactional
	// error, which left nothing behind, from a Durable one. A list of claims
	// in flight shows it too.
	Durability Durability
}

// Result is everything the handler sent back.
type Result struct {
	// Response is the handler's response when it succeeded; otherwise nil.
	Response *anypb.Any
	// Status is the handler's full status when it failed; otherwise nil.
	Status *spb.Status
	// Header and Trailer are the metadata the handler set, by lowercase
	// name, as gRPC's metadata.MD holds it.
	Header, Trailer map[string][]string
}

// Claimant is who claims through a store. It is recorded with each claim,
// so that a store knows which process holds it.
type Claimant struct {
	// ID names the claiming process, new each time a store is opened.
	ID string
	// Exclusive says no other process can use the store at the same time.
	// The embedded store's file lock proves it. An in-flight claim of any
	// other ID is then an orphan of a process that died. It is taken over
	// at once instead of when its lease runs out. A store shared by several
	// processes leaves it false and keeps the lease rule.
	Exclusive bool
}

// Decide applies the claim rules for a claim by who, of durability d. Here
// stored is the live or expired record for req.Key, nil when there is
// none. If held is true, stored is a claim whose Tx who still runs. Its
// worker is alive, so it is in flight to its own request however late its
// lease or expiry. Decide returns the outcome and the record as it stands
// afterwards. When the outcome is Claimed, that is a new in-flight record
// of durability d, which the store must write. Otherwise it is stored
// itself.
func Decide(stored *Record, held bool, req ClaimRequest, d Durability, who Claimant) (Outcome, *Record) {
	switch {
	case stored == nil || !held && !req.Now.Before(stored.Expiry):
		return OutcomeFresh, newClaim(req, d, who, 1, req.Now.Add(req.TTL))
	case stored.Fingerprint != req.Fingerprint || stored.Scheme != req.Scheme:
		return OutcomeMismatch, stored
	case stored.State == StateCompleted:
		return OutcomeReplay, stored
	case held || req.Now.Before(stored.LeaseExpiry) && !(who.Exclusive && stored.Owner != who.ID):
		return OutcomeInFlight, stored
	default:
		return OutcomeTakeover, newClaim(req, d, who, stored.Attempt+1, stored.Expiry)
	}
}

// newClaim is a claim in flight. It knows its durability from the start,
// so that a list of claims in flight tells a transactional one.
func newClaim(req ClaimRequest, d Durability, who Claimant, attempt uint64, expiry time.Time) *Record {
	r := &Record{
		Fingerprint: req.Fingerprint,
		Scheme:      req.Scheme,
		State:       StateInFlight,
		Attempt:     attempt,
		Owner:       who.ID,
		LeaseExpiry: req.Now.Add(req.Lease),
		ClaimTime:   req.Now,
		Expiry:      expiry,
		Durability:  d,
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

// Completed returns the completed form of the claim r, holding result.
// That is what Store.Complete is given.
func (r *Record) Completed(result *Result) *Record {
	done := *r
	done.State = StateCompleted
	done.LeaseExpiry = time.Time{}
	done.Result = result
	return &done
}

// KeepsWrites reports whether a Tx that commits r keeps the handler's
// writes. It does only for a response. An error names no writes, so a
// handler that failed leaves none behind.
func (r *Record) KeepsWrites() bool {
	return r.Result != nil && r.Result.Status == nil
}

func (d Durability) String() string {
	if d == Transactional {
		return "transactional"
	}
	return "durable"
}
