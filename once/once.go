package once

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/wire"
)

// Defaults of the Options.
const (
	DefaultLease = 30 * time.Second
	DefaultTTL   = 24 * time.Hour
	// DefaultMaxResultSize is four times gRPC's default message size limit.
	DefaultMaxResultSize = 16 << 20
	// DefaultHandlerTimeout bounds a function whose caller has gone.
	DefaultHandlerTimeout = 30 * time.Second
	// DefaultWatchPoll is how often a waiter on a Watcher polls anyway.
	DefaultWatchPoll = time.Second
)

// Options tune a Guard. A zero field takes its default.
type Options struct {
	// Lease is how long a claim holds before a retry of the same request
	// may take it over, its worker presumed dead. It should exceed the
	// function's longest run, and must be shorter than TTL.
	Lease time.Duration
	// TTL is how long a record lives from its first claim. After it, the
	// key runs fresh again.
	TTL time.Duration
	// InFlightWait has a duplicate of a request in flight wait for the
	// first to end, up to this long, and answer with its result. Zero
	// answers at once with an in-flight refusal.
	InFlightWait time.Duration
	// HandlerTimeout bounds a claimed function's run. Its context is done
	// then, whether or not the caller went away.
	HandlerTimeout time.Duration
	// MaxResultSize is the largest result stored, in bytes of its parts. A
	// larger one is replaced by a stored INTERNAL error.
	MaxResultSize int
	// FingerprintExclude names request fields left out of fingerprints,
	// such as a trace id that varies between retries.
	FingerprintExclude []protoreflect.FullName
	// NotStored lists the codes of a transactional function's errors that
	// are not stored. Its writes and claim roll back, and the key stays
	// free. OK may not be listed.
	NotStored []code.Code
	// Now is the clock of leases and expiry.
	Now func() time.Time
	// Logger takes problems that reach no caller, such as a failed renewal.
	Logger *slog.Logger
	// WatchPoll is how often a duplicate waiting on a Watcher's notice
	// looks at the store anyway, in case the notice was lost.
	WatchPoll time.Duration
	// Statuses, when set, stores the errors of Do's and DoValue's
	// functions with the codes and details of their own type, and answers
	// with errors of that type. interceptor.StatusErrors keeps gRPC status
	// errors. Unset, a function chooses its code with Errorf.
	Statuses Statuses
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Lease, DefaultLease)
	def(&o.TTL, DefaultTTL)
	def(&o.HandlerTimeout, DefaultHandlerTimeout)
	def(&o.WatchPoll, DefaultWatchPoll)
	if o.MaxResultSize == 0 {
		o.MaxResultSize = DefaultMaxResultSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// check reports options that cannot work.
func (o Options) check() error {
	if o.Lease <= 0 || o.TTL <= o.Lease || o.TTL > storage.MaxTTL {
		return fmt.Errorf("need 0 < lease < ttl <= %v, got lease %v, ttl %v", storage.MaxTTL, o.Lease, o.TTL)
	}
	if o.MaxResultSize < 0 {
		return fmt.Errorf("max result size %d: need a positive limit", o.MaxResultSize)
	}
	if o.HandlerTimeout <= 0 {
		return fmt.Errorf("handler timeout %v: need a positive limit", o.HandlerTimeout)
	}
	for _, c := range o.NotStored {
		if c == code.Code_OK {
			return errors.New("a success is always stored: OK cannot be left unstored")
		}
	}
	return nil
}

// Guard runs functions at most once per (scope, key) over one store. It
// is safe for concurrent use. Share one per store in a process: it keeps
// the runs in progress, which wake the duplicates waiting for them.
type Guard struct {
	store         storage.Store
	txStore       storage.TxStore // store, if it is one; nil otherwise
	watcher       storage.Watcher // store, if it is one; nil otherwise
	opts          Options
	notStored     map[code.Code]bool
	fingerprinter fingerprinter
	scheme        string
	flights       flights
	handlerTimes  handlerTimes
}

// New returns a Guard over store. It fails for options that cannot work.
func New(store storage.Store, opts Options) (*Guard, error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	g := &Guard{store: store, opts: opts, fingerprinter: newFingerprinter(opts.FingerprintExclude), notStored: map[code.Code]bool{}}
	g.txStore, _ = store.(storage.TxStore)
	g.watcher, _ = store.(storage.Watcher)
	g.scheme = g.fingerprinter.scheme()
	for _, c := range opts.NotStored {
		g.notStored[c] = true
	}
	return g, nil
}

// Request names one operation to run at most once.
type Request struct {
	// Scope owns the key. It must come from an authenticated identity,
	// never from the payload: a key is unique within its scope only. The
	// empty scope is one like any other, shared by whoever uses it.
	Scope string
	// Key is the idempotency key: 1 to 255 printable ASCII characters (see
	// wire.ValidateKey).
	Key string
	// Operation names what is done, such as a gRPC full method name. It is
	// part of the fingerprint, so one key cannot serve two operations.
	Operation string
	// Message is the request. Its deterministic encoding is fingerprinted.
	// It is nil for DoValue, which fingerprints its value.
	Message proto.Message
	// Transactional declares that the function acts only through the
	// store's Tx. On a TxStore its claim then commits with its writes, or
	// never (storage.Transactional). Otherwise the claim is Durable.
	Transactional bool
	// OnClaim, when set, is told of the first claim's decision, before a
	// result is replayed or the function runs. Its error ends the call.
	OnClaim func(ctx context.Context, outcome storage.Outcome, rec *storage.Record) error
}

// Observation is what the guard did with one request, for logs and
// metrics. Run fills in all but Code; a caller that answers with a status
// code, such as package interceptor, sets it.
type Observation struct {
	// Operation is the request's Operation, such as a gRPC full method.
	Operation string
	// Outcome is the first claim's decision; zero when none was made.
	Outcome storage.Outcome
	// Attempt is the record's attempt, for claims and replays.
	Attempt uint64
	// Runs is how many times the function ran. It is more than once when
	// a transactional function's writes lost to concurrent changes.
	Runs int
	// Handler is the time spent in the function, over all its runs.
	Handler time.Duration
	// Store is the time spent claiming and completing, renewals aside.
	Store time.Duration
	// Err is the store's error when a claim or a completion failed. The
	// caller was told only UNAVAILABLE or DATA_LOSS.
	Err error
	// Code is the code of the answer the caller was given.
	Code code.Code
}

// Func runs an operation once and returns its result to store: a
// response or an error status, with any metadata. Its ctx carries the
// claim's Tx on a TxStore, its attempt (AttemptFrom) and its key
// (KeyFrom). An error means the result cannot be stored at all. It goes
// to the caller, and a durable claim stays in flight for the lease rule.
type Func func(ctx context.Context) (*storage.Result, error)

// Answer is a request's result, as stored.
type Answer struct {
	Result *storage.Result
	// Replayed is true when an earlier call stored Result.
	Replayed bool
}

// Run runs fn at most once for req across retries, processes and replicas
// that share g's store. It returns the stored result, unchanged, to every
// later call with the same request. Its error is a *Refusal, or one that
// fn or req.OnClaim returned. obs, when not nil, is filled in.
func (g *Guard) Run(ctx context.Context, req Request, obs *Observation, fn Func) (Answer, error) {
	if req.Message == nil {
		return Answer{}, misuse("a request needs a message")
	}
	fp, err := g.fingerprinter.fingerprint(req.Operation, req.Message)
	if err != nil {
		return Answer{}, misuse("%v", err)
	}
	return g.run(ctx, req, fp, g.scheme, obs, fn)
}

// run runs fn for req, whose request fingerprints as fp under scheme.
func (g *Guard) run(ctx context.Context, req Request, fp storage.Fingerprint, scheme string, obs *Observation, fn Func) (Answer, error) {
	if obs == nil {
		obs = &Observation{}
	}
	obs.Operation = req.Operation
	if err := wire.ValidateKey(req.Key); err != nil {
		return Answer{}, errInvalidKey(err)
	}
	c := g.newCall(req, fp, scheme, obs)
	for runs := 1; ; runs++ {
		a, err := c.answer(ctx, fn, runs > 1)
		if !errors.Is(err, errRunAgain) {
			return a, err
		}
		if runs == maxConflictRuns {
			return Answer{}, errWriteConflict(req.Key, runs)
		}
	}
}

// running is what a function's context says of its run: one value, for
// both AttemptFrom and KeyFrom.
type running struct {
	attempt uint64
	key     storage.RecordKey
}

type runningKey struct{}

// AttemptFrom returns the attempt a function runs as: 1 for a fresh
// claim, more after takeovers. ok is false outside a Guard's run.
func AttemptFrom(ctx context.Context) (attempt uint64, ok bool) {
	r, ok := ctx.Value(runningKey{}).(*running)
	if !ok {
		return 0, false
	}
	return r.attempt, true
}

// KeyFrom returns the scope and idempotency key a function runs for. A
// store can then keep the key with what the function creates, for
// operators. ok is false outside a Guard's run.
func KeyFrom(ctx context.Context) (scope, key string, ok bool) {
	r, ok := ctx.Value(runningKey{}).(*running)
	if !ok {
		return "", "", false
	}
	return r.key.Scope, r.key.Key, true
}
