package interceptor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/wire"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// KeyPolicy says what a method does with the idempotency-key header.
type KeyPolicy int

const (
	// KeyOptional deduplicates requests that carry a key and passes the others
	// through. It is the default for every method.
	KeyOptional KeyPolicy = iota
	// KeyRequired rejects requests without a key with INVALID_ARGUMENT
	// (IDEMPOTENCY_KEY_MISSING).
	KeyRequired
	// KeyIgnored passes every request through untouched, key or not. It is
	// for reads and other methods that are idempotent by nature.
	KeyIgnored
)

// ScopeFunc returns the scope of a request's keys: who owns them. It must
// come from the authenticated credential, never from the request body. Its
// error goes to the caller. A status error goes as it is, any other as
// UNAUTHENTICATED.
type ScopeFunc func(ctx context.Context) (string, error)

// Observer is told what the interceptor does, in a once.Observation whose
// Operation is the full method. Its Outcome is zero when the request was
// not deduplicated: its method ignores keys, it carried none where one is
// optional, or it was refused before a claim. Its methods must be quick
// and safe for concurrent use.
type Observer interface {
	// Claimed is called once a claim has decided, before the handler runs
	// (if it does). It is called once per request, even when the handler
	// runs again. Runs, Handler, Err and Code are not set yet.
	Claimed(ctx context.Context, o once.Observation)
	// Finished is called for every request as the interceptor returns.
	// Code is the answer's status code. Outcome and Attempt are those of
	// the first claim, the one Claimed was told of.
	Finished(ctx context.Context, o once.Observation)
}

// observers tells each of its observers, in the order they were given.
type observers []Observer

func (all observers) Claimed(ctx context.Context, o once.Observation) {
	for _, ob := range all {
		ob.Claimed(ctx, o)
	}
}

func (all observers) Finished(ctx context.Context, o once.Observation) {
	for _, ob := range all {
		ob.Finished(ctx, o)
	}
}

// Option configures the interceptor. A duration or size given as zero
// takes its default, as in once.Options.
type Option func(*options)

type options struct {
	// guard holds the options of the once.Guard the interceptor runs on;
	// once.New checks them.
	guard         once.Options
	policies      map[string]KeyPolicy
	defaultPolicy KeyPolicy
	scope         ScopeFunc
	observer      observers
	transactional map[string]bool
	storedBytes   bool
}

func evaluateOptions(opts []Option) *options {
	o := &options{
		guard:         once.Options{Logger: slog.Default(), WatchPoll: watchedPollEvery},
		policies:      map[string]KeyPolicy{},
		defaultPolicy: KeyOptional,
		scope:         BearerScope,
		transactional: map[string]bool{},
	}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithLease sets how long a claim holds before a retry of the same request
// may take it over, assuming its worker died. Default 30s. It should exceed
// the method's longest run. It must be shorter than the TTL.
func WithLease(d time.Duration) Option { return func(o *options) { o.guard.Lease = d } }

// WithTTL sets how long a record lives from its first claim. After that the
// key runs fresh again. Default 24h.
func WithTTL(d time.Duration) Option { return func(o *options) { o.guard.TTL = d } }

// WithKeyPolicy sets the key policy of one method, by full method name
// ("/package.Service/Method").
func WithKeyPolicy(fullMethod string, p KeyPolicy) Option {
	return func(o *options) { o.policies[fullMethod] = p }
}

// WithDefaultKeyPolicy sets the key policy of methods without their own.
// Default KeyOptional.
func WithDefaultKeyPolicy(p KeyPolicy) Option { return func(o *options) { o.defaultPolicy = p } }

// WithScope sets how a request's scope is found. Default BearerScope.
func WithScope(f ScopeFunc) Option { return func(o *options) { o.scope = f } }

// WithClock sets the clock used for leases and expiry. Default time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.guard.Now = now } }

// WithMaxResultSize sets the largest result stored, in bytes of its
// encoding: the response or status plus the metadata. A larger result is
// not kept. In its place, INTERNAL saying so is stored, returned and
// replayed. One answer still leaves the server for the key. Default
// once.DefaultMaxResultSize, 16 MiB.
func WithMaxResultSize(n int) Option { return func(o *options) { o.guard.MaxResultSize = n } }

// WithFingerprintExclude leaves the named fields out of request
// fingerprints, wherever they occur in a request. They are fields that
// vary between retries of one operation, such as a trace id. Names are
// full proto field names, such as "shop.v1.PlaceOrderRequest.trace_id".
// Excluded fields are part of the fingerprint scheme. Records made before
// the exclusion changed are thus refused as mismatches, never replayed.
func WithFingerprintExclude(fields ...protoreflect.FullName) Option {
	return func(o *options) { o.guard.FingerprintExclude = append(o.guard.FingerprintExclude, fields...) }
}

// WithInFlightWait has a duplicate of a request in flight wait for the
// first to finish. It then answers with the replay, instead of ABORTED
// (IDEMPOTENCY_KEY_IN_USE). It waits up to d, and never past its own
// deadline. A run in this process wakes its waiters once it stores the
// result. A request running in another process that shares the store is
// polled, backing off from 10ms to 200ms. With a store that is a Watcher,
// its notice wakes the waiters instead. They then poll once a second, in
// case a notice is lost. Default 0: no waiting.
func WithInFlightWait(d time.Duration) Option { return func(o *options) { o.guard.InFlightWait = d } }

// WithTransactional declares methods, by full method name, whose only
// effects are writes through the TxStore's Tx. Nothing outside the store
// happens while they run. Their claim is storage.Transactional: it need
// not be durable before the handler runs. A crash then loses nothing, and
// the retry simply runs afresh. So claim, writes and result commit at
// once, in one commit per request instead of two. Duplicates still get
// IN_USE while the first runs, or wait with WithInFlightWait. With a Store
// that is not a TxStore it changes nothing. Methods not declared keep the
// storage.Durable claim.
func WithTransactional(fullMethods ...string) Option {
	return func(o *options) {
		for _, m := range fullMethods {
			o.transactional[m] = true
		}
	}
}

// WithoutStoring has transactional methods (WithTransactional, on a
// TxStore) not store their errors of the given codes. The error is
// returned, and the handler's writes and its claim are rolled back. The
// key stays free, so a retry with it runs afresh. It is for errors that
// say nothing about the request itself, such as UNAVAILABLE from a
// downstream service. An operator would otherwise have to release those
// key by key. A method that is not transactional stores every result
// regardless. Its handler may have acted outside the store before it
// failed. By default every result is stored. OK is refused: a success is
// always stored.
func WithoutStoring(cs ...codes.Code) Option {
	return func(o *options) {
		for _, c := range cs {
			o.guard.NotStored = append(o.guard.NotStored, code.Code(c))
		}
	}
}

// WithHandlerTimeout bounds how long a claimed handler runs. A handler's
// context is not canceled when its caller goes away, as on a client
// deadline or a dropped connection. Once claimed, the request runs to its
// end and its result is stored. The retry then replays it instead of
// finding the key in flight. The limit d is the server's own: past it the
// handler's context is done. A handler deaf to its context does not hold
// its key for good. At twice the limit, with a TxStore, its claim is
// released and nothing it still does is stored. A durable claim is left to
// the lease rule. Default 30s.
func WithHandlerTimeout(d time.Duration) Option {
	return func(o *options) { o.guard.HandlerTimeout = d }
}

// WithStoredBytes makes the interceptor answer with a *StoredResponse,
// the bytes its record holds, rather than a decoded message. The server
// must send it with Codec. A response is then encoded once, and a replay
// never decoded. Without Codec, grpc-go cannot send it: every keyed call
// would fail with INTERNAL.
func WithStoredBytes() Option { return func(o *options) { o.storedBytes = true } }

// WithLogger sets where problems that reach no caller are logged. One is
// the cause of a store failure the caller knows only by its code
// (UNAVAILABLE, DATA_LOSS). Another is a lease renewal that failed.
// Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.guard.Logger = l } }

// WithObserver has o told of every request the interceptor sees. Each
// call adds one, so metrics and a log can both observe.
func WithObserver(o Observer) Option {
	return func(opts *options) { opts.observer = append(opts.observer, o) }
}

// check reports the options of the interceptor's own that cannot work:
// method names not of the form "/package.Service/Method". A typo there
// would silently leave the method without its policy. once.New checks the
// rest.
func (o *options) check() error {
	for m := range o.policies {
		if err := wire.ValidateMethod(m); err != nil {
			return fmt.Errorf("interceptor: WithKeyPolicy: %w", err)
		}
	}
	for m := range o.transactional {
		if err := wire.ValidateMethod(m); err != nil {
			return fmt.Errorf("interceptor: WithTransactional: %w", err)
		}
	}
	return nil
}

func (o *options) policy(fullMethod string) KeyPolicy {
	if p, ok := o.policies[fullMethod]; ok {
		return p
	}
	return o.defaultPolicy
}

// watchedPollEvery is how often a duplicate waiting on a Watcher's notice
// looks at the store anyway, in case the notice was lost. It is a variable
// only so that a test can tell a notice from a poll.
var watchedPollEvery = once.DefaultWatchPoll
