package interceptor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/interceptor/storage"
	"github.com/paymentsd/paymentsd/interceptor/wire"
)

// completeTimeout bounds the write of a result. The write runs even when
// the caller has gone away. The handler's side effects happened, so its
// result must be stored.
const completeTimeout = 10 * time.Second

// UnaryServerInterceptor returns an interceptor that runs each request's
// handler at most once per (scope, idempotency key). It replays the stored
// result to every retry. See the package documentation.
//
// It fails for options that cannot work. A lease must be positive and
// shorter than the TTL, and a handler timeout positive. A method named in
// WithKeyPolicy or WithTransactional must be named as
// "/package.Service/Method". WithoutStoring(OK) is refused.
func UnaryServerInterceptor(store storage.Store, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	o := evaluateOptions(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	i := &idempotency{store: store, opts: o, fingerprinter: newFingerprinter(o.exclude)}
	i.txStore, _ = store.(storage.TxStore)
	i.watcher, _ = store.(storage.Watcher)
	i.scheme = i.fingerprinter.scheme()
	return i.intercept, nil
}

// MustUnaryServerInterceptor is UnaryServerInterceptor for options known
// to be valid. It panics if they are not.
func MustUnaryServerInterceptor(store storage.Store, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := UnaryServerInterceptor(store, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

type idempotency struct {
	store         storage.Store
	txStore       storage.TxStore // store, if it is one; nil otherwise
	watcher       storage.Watcher // store, if it is one; nil otherwise
	opts          *options
	fingerprinter fingerprinter
	scheme        string
	flights       flights
	handlerTimes  handlerTimes
}

func (i *idempotency) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	obs := &Observation{FullMethod: info.FullMethod}
	defer func() {
		obs.Code = status.Code(err)
		if obs.Err != nil { // the caller knows only the code; the operator needs the cause
			i.opts.logger.LogAttrs(ctx, slog.LevelError, "idempotency: store failed",
				slog.String("method", obs.FullMethod), slog.String("code", obs.Code.String()), slog.String("err", obs.Err.Error()))
		}
		i.opts.observer.Finished(ctx, *obs)
	}()
	rk, dedup, fp, err := i.identify(ctx, req, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if !dedup {
		return handler(ctx, req)
	}

	c := i.newCall(rk, fp, obs)
	for runs := 1; ; runs++ {
		resp, err := c.answer(ctx, req, handler, runs > 1)
		if !errors.Is(err, errRunAgain) {
			return resp, err
		}
		if runs == maxConflictRuns {
			return nil, errWriteConflict(rk.Key, runs)
		}
	}
}

// call is one keyed request on its way through the rules. It holds what
// names the request, how durable its claims are, and the claim it runs
// under. Durability is decided once, here, so every step reads one answer.
type call struct {
	i   *idempotency
	key storage.RecordKey
	fp  storage.Fingerprint
	obs *Observation
	// durability is Transactional for a method declared so, on a TxStore.
	// Its writes are its only effect, so its claim commits with them or
	// never. Every other claim is Durable.
	durability storage.Durability

	claim *storage.Record // the claim the handler runs under; nil until claimed
	tx    storage.Tx      // the claim's Tx, on a TxStore
}

func (i *idempotency) newCall(rk storage.RecordKey, fp storage.Fingerprint, obs *Observation) *call {
	c := &call{i: i, key: rk, fp: fp, obs: obs, durability: storage.Durable}
	if i.txStore != nil && i.opts.transactional[obs.FullMethod] {
		c.durability = storage.Transactional
	}
	return c
}

// answer claims the key and answers by the outcome: the stored result, an
// error, or the handler's run. If again is true, an earlier run lost to a
// concurrent change. The observer was then told of its claim, and the
// caller of its expiry.
func (c *call) answer(ctx context.Context, req any, handler grpc.UnaryHandler, again bool) (any, error) {
	c.claim, c.tx = nil, nil
	outcome, rec, now, err := c.claimKey(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, status.FromContextError(ctxErr).Err() // the caller gave up, maybe while waiting
		}
		c.obs.Err = err
		return nil, c.storeFailure(err)
	}
	if c.tx != nil {
		defer c.tx.Rollback() // a handler that panics releases its claim
	}
	if !again {
		c.obs.Outcome, c.obs.Attempt = outcome, rec.Attempt
		c.i.opts.observer.Claimed(ctx, *c.obs)
	}

	// Every answer about a record says when it is forgotten. Until then a
	// retry with this key is safe. The time is truncated to the second, so
	// it is never late. A run again's claim expires later still. A caller
	// that has gone gets no header; its claim still runs.
	expires := metadata.MD{}
	if !again {
		expires[wire.ExpiresAtHeader] = []string{rec.Expiry.UTC().Format(time.RFC3339)}
	}
	if outcome == storage.OutcomeReplay || replayMismatch && outcome == storage.OutcomeMismatch && rec.Result != nil {
		return replay(ctx, rec.Result, expires)
	}
	if !again {
		if err := grpc.SetHeader(ctx, expires); err != nil && ctx.Err() == nil {
			return nil, status.Errorf(codes.Internal, "idempotency: set header: %v", err)
		}
	}
	switch outcome {
	case storage.OutcomeInFlight:
		return nil, errInFlight(c.key.Key, c.i.handlerTimes.retryDelay(c.obs.FullMethod, rec.LeaseExpiry.Sub(now)))
	case storage.OutcomeMismatch:
		return nil, errMismatch(c.key.Key, rec, c.fp, c.i.scheme)
	}
	c.claim = rec
	return c.run(ctx, req, handler)
}

// maxConflictRuns bounds how many times a transactional method runs for one
// request whose writes keep losing to other requests (ErrConflict).
const maxConflictRuns = 8

// errRunAgain is run's answer when a transactional method's writes lost
// to a concurrent change. Nothing was stored and the claim was released,
// so the request is claimed and run again.
var errRunAgain = errors.New("idempotency: run again")

// claimKey claims the key, through ClaimTx when the store is a TxStore.
// It keeps the claim's Tx. With WithInFlightWait, a request that finds the
// same request in flight waits for it to end and claims again. It waits up
// to the limit and the caller's deadline. A run in this process wakes its
// waiters when it ends. A run in another process wakes them through the
// store when it is a Watcher. Otherwise, and in case a notice is lost,
// waiters poll.
func (c *call) claimKey(ctx context.Context) (storage.Outcome, *storage.Record, time.Time, error) {
	opts := c.i.opts
	w := &inFlightWait{watcher: c.i.watcher, key: c.key, limit: opts.inFlightWait, pollEvery: 10 * time.Millisecond}
	defer w.stop()
	for {
		now := opts.now()
		outcome, rec, err := c.claimOnce(ctx, storage.ClaimRequest{Key: c.key, Fingerprint: c.fp, Scheme: c.i.scheme,
			Now: now, Lease: opts.lease, TTL: opts.ttl})
		if err != nil || outcome != storage.OutcomeInFlight || opts.inFlightWait <= 0 {
			return outcome, rec, now, err
		}
		local := c.i.flights.done(c.key) // nil unless it runs in this process
		if local == nil && w.watch() {
			continue // it may have ended before the watch began: look again
		}
		switch timedOut, err := w.wait(ctx, local); {
		case err != nil:
			return 0, nil, now, err
		case timedOut:
			return outcome, rec, now, nil
		}
	}
}

// claimOnce asks the store once, through ClaimTx when it is a TxStore.
func (c *call) claimOnce(ctx context.Context, req storage.ClaimRequest) (outcome storage.Outcome, rec *storage.Record, err error) {
	start := time.Now()
	if c.i.txStore != nil {
		outcome, rec, c.tx, err = c.i.txStore.ClaimTx(ctx, req, c.durability)
	} else {
		outcome, rec, err = c.i.store.Claim(ctx, req)
	}
	c.obs.Store += time.Since(start)
	return outcome, rec, err
}

// watchedPollEvery is how often a duplicate waiting on a Watcher's notice
// looks at the store anyway, in case the notice was lost. It is a variable
// only so that a test can tell a notice from a poll.
var watchedPollEvery = time.Second

// identify returns the record key and fingerprint of a request. It returns
// dedup false when the request is to pass through. Its error is a status
// error for the caller.
func (i *idempotency) identify(ctx context.Context, req any, method string) (rk storage.RecordKey, dedup bool, fp storage.Fingerprint, err error) {
	policy := i.opts.policy(method)
	if policy == KeyIgnored {
		return storage.RecordKey{}, false, storage.Fingerprint{}, nil
	}
	if policy == KeyOptional && !wire.KeySent(ctx) {
		return storage.RecordKey{}, false, storage.Fingerprint{}, nil
	}
	// The credential comes first: without one, the key is not even read.
	scope, err := i.opts.scope(ctx)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unauthenticated, err.Error())
		}
		return storage.RecordKey{}, false, storage.Fingerprint{}, err
	}
	key, sent, err := keyFromContext(ctx)
	switch {
	case err != nil:
		return storage.RecordKey{}, false, storage.Fingerprint{}, err
	case !sent:
		return storage.RecordKey{}, false, storage.Fingerprint{}, errKeyMissing(method)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return storage.RecordKey{}, false, storage.Fingerprint{}, status.Errorf(codes.Internal, "idempotency: request of %s is a %T, not a protobuf message", method, req)
	}
	fp, err = i.fingerprinter.fingerprint(method, msg)
	if err != nil {
		return storage.RecordKey{}, false, storage.Fingerprint{}, status.Errorf(codes.Internal, "idempotency: %v", err)
	}
	return storage.RecordKey{Scope: scope, Key: key}, true, fp, nil
}

// run runs the handler under the claim, stores its result and returns it.
// With a Tx, the handler's writes commit together with the result, and
// only with a response. An error's writes are discarded, since no answer
// names them. The handler's header and trailer are held back until the
// result is stored. A superseded attempt thus sends nothing of its own.
func (c *call) run(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	// Once claimed, the handler runs to its end even if the caller has gone.
	// The server's own limit bounds it. A retry then finds the result
	// instead of a key locked for a lease.
	detached := context.WithoutCancel(ctx) // for the completion too
	hctx, cancelHandler := context.WithTimeout(detached, c.i.opts.handlerTimeout)
	defer cancelHandler()
	capture := &capturingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	hctx = grpc.NewContextWithServerTransportStream(context.WithValue(hctx, attemptKey{}, c.claim.Attempt), capture)
	if c.tx != nil {
		hctx = c.tx.Context(hctx)
	}
	// A claim that is not durable lives no longer than this process's run
	// of it: there is no lease to renew.
	stopRenewing := func() {}
	if c.durability == storage.Durable {
		stopRenewing = c.renewWhileRunning(ctx)
		defer stopRenewing() // for a handler that panics; else stopped below, before the commit
	}
	// A handler deaf to its context must not hold its key for good. Once it
	// has overrun its limit by as much again, renewals stop and its Tx, if
	// any, is rolled back. That releases a Transactional claim. A durable
	// claim is left to the lease rule. With a Tx, nothing it still does is
	// stored. Without one, a late result is still stored unless the claim
	// was taken over. A handler that returns at its deadline still has its
	// answer stored.
	tx := c.tx // the timer may fire while a run again claims anew
	overran := time.AfterFunc(2*c.i.opts.handlerTimeout, func() {
		stopRenewing()
		if tx != nil {
			tx.Rollback()
		}
	})
	defer overran.Stop()
	if c.i.opts.inFlightWait > 0 { // else no duplicate waits for this run
		flight := c.i.flights.begin(c.key)
		defer c.i.flights.end(c.key, flight) // after the commit: waiters find the result
	}
	resp, herr := c.i.invoke(hctx, req, handler, c.obs)
	stopRenewing()

	result, err := c.i.resultOf(resp, herr, capture)
	if err != nil {
		// Nothing can be stored. A durable claim stays in flight, and a
		// retry takes it over once the lease ends.
		return nil, err
	}
	return c.deliver(ctx, detached, result, resp)
}

// deliver stores result and answers with it. A transactional method's
// error of a code given to WithoutStoring is not stored. Its Tx is rolled
// back, which discards its writes and frees the key, since its claim was
// never durable. The store is written under detached, which outlives ctx.
func (c *call) deliver(ctx, detached context.Context, result *storage.Result, resp any) (any, error) {
	if c.durability == storage.Transactional && result.Status != nil && c.i.opts.notStored[codes.Code(result.Status.Code)] {
		c.tx.Rollback()
	} else if err := c.complete(detached, result); err != nil {
		return nil, err
	}
	if err := sendMetadata(ctx, result.Header, result.Trailer); err != nil {
		return nil, err
	}
	if result.Status != nil {
		return nil, status.ErrorProto(result.Status)
	}
	return resp, nil
}

// invoke runs the handler once, timing it for the observer and for the
// in-flight answers' retry delay.
func (i *idempotency) invoke(ctx context.Context, req any, handler grpc.UnaryHandler, obs *Observation) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	took := time.Since(start)
	obs.Runs++
	obs.Handler += took
	i.handlerTimes.observe(obs.FullMethod, took)
	return resp, err
}

// resultOf is the result to store of the handler's answer and the metadata
// it set. A result over WithMaxResultSize is replaced by an INTERNAL error.
// When the answer cannot be stored at all, its error is the caller's.
func (i *idempotency) resultOf(resp any, herr error, capture *capturingStream) (*storage.Result, error) {
	header, trailer := capture.metadata()
	result, err := newResult(resp, herr, header, trailer)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idempotency: %v", err)
	}
	if size := resultSize(result); size > i.opts.maxResult {
		result = &storage.Result{Status: status.Newf(codes.Internal,
			"idempotency: the handler's result is %d bytes, over the %d-byte limit for stored results; it was discarded",
			size, i.opts.maxResult).Proto()}
	}
	return result, nil
}

// complete stores result as the completion of the claim. With a Tx, the
// handler's writes commit with it, if the handler succeeded. It returns
// what the caller is told if that failed. That is errRunAgain when a
// transactional method lost to a concurrent change.
func (c *call) complete(ctx context.Context, result *storage.Result) error {
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	start := time.Now()
	done := c.claim.Completed(result)
	done.Durability = c.durability // a Transactional error left nothing behind: it may be released
	var err error
	if c.tx != nil {
		err = c.tx.Commit(ctx, done)
	} else {
		err = c.i.store.Complete(ctx, c.key, done)
	}
	c.obs.Store += time.Since(start)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrSuperseded):
		return errSuperseded(c.key.Key, c.claim.Attempt)
	case errors.Is(err, storage.ErrConflict) && c.durability == storage.Transactional:
		return errRunAgain
	default:
		c.obs.Err = err
		return c.storeFailure(err)
	}
}

// renewWhileRunning extends the claim's lease every third of a lease. A
// slow but live worker is then never taken over. Only a dead one is. It
// stops when the returned func is called, which waits for it. It also
// stops when a renewal finds the claim superseded. A renewal that fails
// otherwise is logged and tried again at the next tick. If they all fail,
// the lease runs out. A takeover then supersedes this attempt, as if it
// had died.
func (c *call) renewWhileRunning(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	claim, opts := *c.claim, c.i.opts
	go func() {
		defer close(done)
		tick := time.NewTicker(opts.lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			claim.LeaseExpiry = opts.now().Add(opts.lease)
			switch err := c.i.store.Renew(ctx, c.key, &claim); {
			case errors.Is(err, storage.ErrSuperseded):
				return
			case err != nil && ctx.Err() == nil:
				opts.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: lease renewal failed; will retry at the next tick",
					slog.String("method", c.obs.FullMethod), slog.Uint64("attempt", claim.Attempt), slog.Any("err", err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// replay answers with a stored result, marked as replayed. A stored error
// carries the mark in its trailer too. The stored header is sent after
// header (the record's expiry), in one piece.
func replay(ctx context.Context, result *storage.Result, header metadata.MD) (any, error) {
	for k, vs := range result.Header {
		header[k] = append(header[k], vs...) // copies: the stored result is shared
	}
	header[wire.ReplayedHeader] = append(header[wire.ReplayedHeader], "true")
	trailer := result.Trailer
	if result.Status != nil {
		// A stored error carries the marker in its trailer too. The trailer
		// comes with the status. A client can then tell the stored error from
		// an error of its connection, cut after the header (see package
		// retry).
		trailer = metadata.Join(trailer, metadata.Pairs(wire.ReplayedHeader, "true"))
	}
	if err := sendMetadata(ctx, header, trailer); err != nil {
		return nil, err
	}
	if result.Status != nil {
		return nil, status.ErrorProto(result.Status)
	}
	resp, err := result.Response.UnmarshalNew()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idempotency: stored response cannot be decoded: %v", err)
	}
	return resp, nil
}

func newResult(resp any, herr error, header, trailer metadata.MD) (*storage.Result, error) {
	r := &storage.Result{Header: header, Trailer: trailer}
	if herr != nil {
		st, ok := status.FromError(herr)
		if !ok {
			st = status.FromContextError(herr) // as grpc-go itself converts handler errors
		}
		r.Status = st.Proto()
		return r, nil
	}
	msg, ok := resp.(proto.Message)
	if !ok || msg == nil {
		return nil, fmt.Errorf("handler returned %T, not a protobuf message", resp)
	}
	var err error
	r.Response, err = anypb.New(msg)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return r, nil
}

// resultSize is the stored size of r, near enough: its parts' encodings.
func resultSize(r *storage.Result) int {
	n := proto.Size(r.Response) + proto.Size(r.Status)
	for _, md := range []metadata.MD{r.Header, r.Trailer} {
		for k, vs := range md {
			for _, v := range vs {
				n += len(k) + len(v)
			}
		}
	}
	return n
}

// sendMetadata sets header and trailer on the call (grpc-go copies them).
// For a caller that has gone, it sets what it can.
func sendMetadata(ctx context.Context, header, trailer metadata.MD) error {
	if len(header) > 0 {
		if err := grpc.SetHeader(ctx, header); err != nil && ctx.Err() == nil {
			return status.Errorf(codes.Internal, "idempotency: set header: %v", err)
		}
	}
	if len(trailer) > 0 {
		if err := grpc.SetTrailer(ctx, trailer); err != nil && ctx.Err() == nil {
			return status.Errorf(codes.Internal, "idempotency: set trailer: %v", err)
		}
	}
	return nil
}

type attemptKey struct{}

// AttemptFromContext returns the attempt a handler runs as: 1 for a fresh
// claim, more after takeovers. Outside the interceptor, ok is false.
func AttemptFromContext(ctx context.Context) (attempt uint64, ok bool) {
	attempt, ok = ctx.Value(attemptKey{}).(uint64)
	return attempt, ok
}

// storeFailure is what the caller is told when the store failed. It is
// the one place where the store contract's errors become gRPC codes. With
// no claim, the claim itself failed and the request was not run. With
// one, its completion failed. A durable claim's handler may then have
// acted outside the store. The cause goes to the Observer and the log,
// never to the caller.
func (c *call) storeFailure(err error) error {
	switch {
	case c.claim == nil && errors.Is(err, storage.ErrDamaged):
		return status.Error(codes.DataLoss, "idempotency store found its data damaged; the request was not run")
	case c.claim == nil:
		return status.Error(codes.Unavailable, "idempotency store unavailable, the request was not run; retry with the same key")
	case errors.Is(err, storage.ErrDamaged):
		return status.Errorf(codes.DataLoss, "idempotency store found its data damaged; the result of attempt %d was not stored", c.claim.Attempt)
	case errors.Is(err, storage.ErrOutcomeUnknown):
		return errOutcomeUnknown(c.key.Key, c.claim.Attempt, c.durability == storage.Durable)
	case c.durability == storage.Durable:
		return status.Errorf(codes.Unavailable,
			"idempotency store failed to save the result of attempt %d; retry with the same key", c.claim.Attempt)
	default:
		return status.Error(codes.Unavailable,
			"idempotency store failed to save the request's writes and result, which were most likely not kept (a commit whose answer was lost may have been); retry with the same key to learn which")
	}
}
