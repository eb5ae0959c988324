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
)

// completeTimeout bounds the write of a result. It runs even when the
// caller has gone away: the handler's side effects happened, so its result
// must be stored.
const completeTimeout = 10 * time.Second

// UnaryServerInterceptor returns an interceptor that runs each request's
// handler at most once per (scope, idempotency key) and replays its stored
// result to every retry. See the package documentation.
//
// It fails for options that cannot work: a lease not shorter than the TTL,
// or a method named in WithKeyPolicy or WithTransactional other than as
// "/package.Service/Method".
func UnaryServerInterceptor(store Store, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	o := evaluateOptions(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	i := &idempotency{store: store, opts: o, fingerprinter: newFingerprinter(o.exclude)}
	i.txStore, _ = store.(TxStore)
	i.watcher, _ = store.(Watcher)
	i.scheme = i.fingerprinter.scheme()
	return i.intercept, nil
}

// MustUnaryServerInterceptor is UnaryServerInterceptor for options known
// to be valid; it panics if they are not.
func MustUnaryServerInterceptor(store Store, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := UnaryServerInterceptor(store, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

type idempotency struct {
	store         Store
	txStore       TxStore // store, if it is one; nil otherwise
	watcher       Watcher // store, if it is one; nil otherwise
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
		traceObservation(ctx, obs)
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

	for runs := 1; ; runs++ {
		resp, err := i.answer(ctx, req, handler, rk, fp, obs, runs > 1)
		if !errors.Is(err, errRunAgain) {
			return resp, err
		}
		if runs == maxConflictRuns {
			return nil, errWriteConflict(rk.Key, runs)
		}
	}
}

// answer claims rk and answers by its outcome: the stored result, an
// error, or the handler's run. again is true when an earlier run of the
// request lost to a concurrent change: the observer was told of its claim,
// and the caller of its expiry.
func (i *idempotency) answer(ctx context.Context, req any, handler grpc.UnaryHandler, rk RecordKey, fp Fingerprint, obs *Observation, again bool) (any, error) {
	outcome, rec, tx, now, err := i.claim(ctx, rk, fp, obs)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, status.FromContextError(ctxErr).Err() // the caller gave up, maybe while waiting
		}
		obs.Err = err
		if status.Code(err) == codes.DataLoss {
			return nil, status.Error(codes.DataLoss, "idempotency store found its data damaged; the request was not run")
		}
		return nil, status.Error(codes.Unavailable, "idempotency store unavailable, the request was not run; retry with the same key")
	}
	if tx != nil {
		defer tx.Rollback() // a handler that panics releases its claim
	}
	if !again {
		obs.Outcome, obs.Attempt = outcome, rec.Attempt
		i.opts.observer.Claimed(ctx, *obs)
	}

	// Every answer about a record says when it is forgotten: until then a
	// retry with this key is safe. Truncated to the second, so never late
	// (nor after a run again, whose claim expires later still). A caller
	// that has gone gets no header; its claim still runs.
	expires := metadata.MD{}
	if !again {
		expires[ExpiresAtHeader] = []string{rec.Expiry.UTC().Format(time.RFC3339)}
	}
	if outcome == OutcomeReplay {
		return replay(ctx, rec.Result, expires)
	}
	if !again {
		if err := grpc.SetHeader(ctx, expires); err != nil && ctx.Err() == nil {
			return nil, status.Errorf(codes.Internal, "idempotency: set header: %v", err)
		}
	}
	switch outcome {
	case OutcomeInFlight:
		return nil, errInFlight(rk.Key, i.handlerTimes.retryDelay(obs.FullMethod, rec.LeaseExpiry.Sub(now)))
	case OutcomeMismatch:
		return nil, errMismatch(rk.Key, rec, fp, i.scheme)
	}
	return i.run(ctx, req, handler, rk, rec, tx, obs)
}

// maxConflictRuns bounds how many times a transactional method runs for one
// request whose writes keep losing to other requests (ErrConflict).
const maxConflictRuns = 8

// errRunAgain is run's answer when a transactional method's writes lost
// to a concurrent change: nothing was stored and the claim was released,
// so the request is claimed and run again.
var errRunAgain = errors.New("idempotency: run again")

// claim claims rk, through ClaimTx when the store is a TxStore. With
// WithInFlightWait, a request that finds the same request in flight waits
// for it to finish and claims again, up to the wait and the caller's
// deadline. A run in this process wakes its waiters when it ends; one in
// another process sharing the store wakes them through the store when it
// is a Watcher, and is polled otherwise (and, rarely, in case a notice is
// lost, even so).
func (i *idempotency) claim(ctx context.Context, rk RecordKey, fp Fingerprint, obs *Observation) (Outcome, *Record, Tx, time.Time, error) {
	var (
		giveUp, poll *time.Timer // made on the first wait
		watched      <-chan struct{}
		stopWatching = func() {}
	)
	pollEvery := 10 * time.Millisecond
	defer func() {
		if giveUp != nil {
			giveUp.Stop()
			poll.Stop()
		}
		stopWatching()
	}()
	for {
		now := i.opts.now()
		req := ClaimRequest{Key: rk, Fingerprint: fp, Scheme: i.scheme, Now: now, Lease: i.opts.lease, TTL: i.opts.ttl}
		start := time.Now()
		var (
			outcome Outcome
			rec     *Record
			tx      Tx
			err     error
		)
		if i.txStore != nil {
			durability := ClaimDurable
			if i.opts.transactional[obs.FullMethod] {
				durability = ClaimInTx // its writes are its only effect: they and the claim commit together
			}
			outcome, rec, tx, err = i.txStore.ClaimTx(ctx, req, durability)
		} else {
			outcome, rec, err = i.store.Claim(ctx, req)
		}
		obs.Store += time.Since(start)
		if err != nil || outcome != OutcomeInFlight || i.opts.inFlightWait <= 0 {
			return outcome, rec, tx, now, err
		}
		local := i.flights.done(rk) // nil unless it runs in this process
		if local == nil && i.watcher != nil && watched == nil {
			watched, stopWatching = i.watcher.Watch(rk)
			continue // it may have ended before the watch began: look again
		}
		wait := pollEvery
		switch {
		case watched != nil:
			wait = watchedPollEvery
		case giveUp != nil:
			pollEvery = min(2*pollEvery, 200*time.Millisecond)
			wait = pollEvery
		}
		if giveUp == nil {
			giveUp, poll = time.NewTimer(i.opts.inFlightWait), time.NewTimer(wait)
		} else {
			poll.Reset(wait)
		}
		var pollC <-chan time.Time
		if local == nil {
			pollC = poll.C
		}
		select {
		case <-local:
		case <-watched: // a notice is used up: watch afresh
			stopWatching()
			watched, stopWatching = nil, func() {}
		case <-pollC:
		case <-giveUp.C:
			return outcome, rec, nil, now, nil
		case <-ctx.Done():
			return 0, nil, nil, now, ctx.Err()
		}
	}
}

// watchedPollEvery is how often a duplicate waiting on a Watcher's notice
// looks at the store anyway, in case the notice was lost. (A variable only
// so that a test can tell a notice from a poll.)
var watchedPollEvery = time.Second

// identify returns the record key and fingerprint of a request, dedup false
// when the request is to pass through, or a status error for the caller.
func (i *idempotency) identify(ctx context.Context, req any, method string) (rk RecordKey, dedup bool, fp Fingerprint, err error) {
	policy := i.opts.policy(method)
	if policy == KeyIgnored {
		return RecordKey{}, false, Fingerprint{}, nil
	}
	if policy == KeyOptional && !keySent(ctx) {
		return RecordKey{}, false, Fingerprint{}, nil
	}
	// The credential comes first: without one, the key is not even read.
	scope, err := i.opts.scope(ctx)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unauthenticated, err.Error())
		}
		return RecordKey{}, false, Fingerprint{}, err
	}
	key, sent, err := keyFromContext(ctx)
	switch {
	case err != nil:
		return RecordKey{}, false, Fingerprint{}, err
	case !sent:
		return RecordKey{}, false, Fingerprint{}, errKeyMissing(method)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return RecordKey{}, false, Fingerprint{}, status.Errorf(codes.Internal, "idempotency: request of %s is a %T, not a protobuf message", method, req)
	}
	fp, err = i.fingerprinter.fingerprint(method, msg)
	if err != nil {
		return RecordKey{}, false, Fingerprint{}, status.Errorf(codes.Internal, "idempotency: %v", err)
	}
	return RecordKey{Scope: scope, Key: key}, true, fp, nil
}

// run runs the handler under claim, stores its result and returns it. With
// a Tx, the handler's writes commit together with the result, and only
// with a response: an error's writes are discarded, since no answer names
// them. The handler's header and trailer metadata are held back until the
// result is stored, so that a superseded attempt sends nothing of its own.
func (i *idempotency) run(ctx context.Context, req any, handler grpc.UnaryHandler, rk RecordKey, claim *Record, tx Tx, obs *Observation) (any, error) {
	// Once claimed, the handler runs to its end even if the caller has gone
	// (its deadline passed, it hung up), bounded by the server's own limit:
	// the retry then finds the result instead of a key locked for a lease.
	detached := context.WithoutCancel(ctx) // for the completion too
	hctx, cancelHandler := context.WithTimeout(detached, i.opts.handlerTimeout)
	defer cancelHandler()
	capture := &capturingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	hctx = grpc.NewContextWithServerTransportStream(context.WithValue(hctx, attemptKey{}, claim.Attempt), capture)
	// A claim that is not durable lives no longer than this process's run
	// of it: there is no lease to renew.
	durable := tx == nil || !i.opts.transactional[obs.FullMethod]
	stopRenewing := func() {}
	if tx != nil {
		hctx = tx.Context(hctx)
	}
	if durable {
		stopRenewing = i.renewWhileRunning(ctx, rk, *claim, obs.FullMethod)
		defer stopRenewing() // for a handler that panics; else stopped below, before the commit
	}
	// A handler deaf to its context must not hold its key for good: once it
	// has overrun its limit by as much again (so that one that returns at
	// its deadline still has its answer stored), its claim is released, or,
	// durable, left to the lease rule, and nothing it still does is stored.
	overran := time.AfterFunc(2*i.opts.handlerTimeout, func() {
		stopRenewing()
		if tx != nil {
			tx.Rollback()
		}
	})
	defer overran.Stop()
	if i.opts.inFlightWait > 0 { // else no duplicate waits for this run
		flight := i.flights.begin(rk)
		defer i.flights.end(rk, flight) // after the commit: waiters find the result
	}
	start := time.Now()
	resp, herr := handler(hctx, req)
	took := time.Since(start)
	obs.Runs++
	obs.Handler += took
	i.handlerTimes.observe(obs.FullMethod, took)
	stopRenewing()

	header, trailer := capture.metadata()
	result, err := newResult(resp, herr, header, trailer)
	if err != nil {
		// Nothing can be stored; a durable claim stays in flight and a retry
		// takes it over once the lease ends.
		return nil, status.Errorf(codes.Internal, "idempotency: %v", err)
	}
	if size := result.size(); size > i.opts.maxResult {
		result = &Result{Status: status.Newf(codes.Internal,
			"idempotency: the handler's result is %d bytes, over the %d-byte limit for stored results; it was discarded",
			size, i.opts.maxResult).Proto()}
	}
	cctx, cancel := context.WithTimeout(detached, completeTimeout)
	defer cancel()
	start = time.Now()
	if tx != nil {
		writes := KeepWrites
		if result.Status != nil {
			writes = DropWrites // a handler that failed leaves no writes behind
		}
		err = tx.Commit(cctx, claim.Completed(result), writes)
	} else {
		err = i.store.Complete(cctx, rk, claim.Completed(result))
	}
	obs.Store += time.Since(start)
	switch {
	case errors.Is(err, ErrSuperseded):
		return nil, errSuperseded(rk.Key, claim.Attempt)
	case status.Code(err) == codes.DataLoss:
		obs.Err = err
		return nil, status.Errorf(codes.DataLoss, "idempotency store found its data damaged; the result of attempt %d was not stored", claim.Attempt)
	case errors.Is(err, ErrConflict) && !durable:
		return nil, errRunAgain
	case errors.Is(err, ErrOutcomeUnknown):
		obs.Err = err
		return nil, errOutcomeUnknown(rk.Key, claim.Attempt, durable)
	case err != nil && durable:
		obs.Err = err
		return nil, status.Errorf(codes.Unavailable,
			"idempotency store failed to save the result of attempt %d; retry with the same key", claim.Attempt)
	case err != nil:
		obs.Err = err
		return nil, status.Error(codes.Unavailable,
			"idempotency store failed to save the request's writes and result, which were most likely not kept (a commit whose answer was lost may have been); retry with the same key to learn which")
	}
	if err := sendMetadata(ctx, result.Header, result.Trailer); err != nil {
		return nil, err
	}
	if result.Status != nil {
		return nil, status.ErrorProto(result.Status)
	}
	return resp, nil
}

// renewWhileRunning extends the claim's lease every third of a lease, so
// that a slow but live worker is never taken over: only a dead one, whose
// renewals stopped, is. It stops when the returned func is called, which
// waits for it, or when a renewal finds the claim superseded. A renewal that
// fails otherwise is logged and tried again at the next tick; if they all
// fail, the lease runs out and a takeover supersedes this attempt, as if it
// had died.
func (i *idempotency) renewWhileRunning(ctx context.Context, rk RecordKey, claim Record, method string) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(i.opts.lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			claim.LeaseExpiry = i.opts.now().Add(i.opts.lease)
			switch err := i.store.Renew(ctx, rk, &claim); {
			case errors.Is(err, ErrSuperseded):
				return
			case err != nil && ctx.Err() == nil:
				i.opts.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: lease renewal failed; will retry at the next tick",
					slog.String("method", method), slog.Uint64("attempt", claim.Attempt), slog.Any("err", err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// replay answers with a stored result, marked as replayed, its header
// sent after header (the record's expiry) in one piece.
func replay(ctx context.Context, result *Result, header metadata.MD) (any, error) {
	for k, vs := range result.Header {
		header[k] = append(header[k], vs...) // copies: the stored result is shared
	}
	header[ReplayedHeader] = append(header[ReplayedHeader], "true")
	if err := sendMetadata(ctx, header, result.Trailer); err != nil {
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

func newResult(resp any, herr error, header, trailer metadata.MD) (*Result, error) {
	r := &Result{Header: header, Trailer: trailer}
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

// size is the stored size of r, near enough: its parts' encodings.
func (r *Result) size() int {
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

// sendMetadata sets header and trailer on the call (grpc-go copies them);
// for a caller that has gone, it sets what it can.
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
// claim, more after takeovers. ok is false outside the interceptor.
func AttemptFromContext(ctx context.Context) (attempt uint64, ok bool) {
	attempt, ok = ctx.Value(attemptKey{}).(uint64)
	return attempt, ok
}
