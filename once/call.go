package once

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/storage"
)

// completeTimeout bounds the write of a result. It runs even when the
// caller has gone away. The function's side effects happened, so its
// result must be stored.
const completeTimeout = 10 * time.Second

// maxConflictRuns bounds how many times a transactional function runs for
// one request whose writes keep losing to other requests (ErrConflict).
const maxConflictRuns = 8

// errRunAgain is run's answer when a transactional function's writes lost
// to a concurrent change. Nothing was stored and the claim was released.
// So the request is claimed and run again.
var errRunAgain = errors.New("idempotency: run again")

// call is one keyed request on its way through the rules. It holds what
// names the request, how durable its claims are, and the claim it runs
// under. Durability is decided once, here, so every step reads one answer.
type call struct {
	g   *Guard
	req Request
	key storage.RecordKey
	fp  storage.Fingerprint
	// scheme is how fp was computed, kept with the claim.
	scheme string
	obs    *Observation
	// durability is Transactional for a function declared so, on a
	// TxStore. Its writes are its only effect, so its claim commits with
	// them or never. Every other claim is Durable.
	durability storage.Durability

	claim *storage.Record // the claim the function runs under; nil until claimed
	tx    storage.Tx      // the claim's Tx, on a TxStore
}

func (g *Guard) newCall(req Request, fp storage.Fingerprint, scheme string, obs *Observation) *call {
	c := &call{g: g, req: req, key: storage.RecordKey{Scope: req.Scope, Key: req.Key}, fp: fp, scheme: scheme, obs: obs, durability: storage.Durable}
	if g.txStore != nil && req.Transactional {
		c.durability = storage.Transactional
	}
	return c
}

// answer claims the key and answers by the outcome: the stored result, a
// refusal, or the function's run. The flag again is true when an earlier
// run lost to a concurrent change. OnClaim was then told of its claim.
func (c *call) answer(ctx context.Context, fn Func, again bool) (Answer, error) {
	c.claim, c.tx = nil, nil
	outcome, rec, now, err := c.claimKey(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Answer{}, gaveUp(ctxErr) // maybe while waiting
		}
		c.obs.Err = err
		return Answer{}, c.storeFailure(err)
	}
	if c.tx != nil {
		defer c.tx.Rollback() // a function that panics releases its claim
	}
	if !again {
		c.obs.Outcome, c.obs.Attempt = outcome, rec.Attempt
		if c.req.OnClaim != nil {
			if err := c.req.OnClaim(ctx, outcome, rec); err != nil {
				return Answer{}, err
			}
		}
	}
	switch {
	case Replays(outcome, rec):
		return Answer{Result: rec.Result, Replayed: true}, nil
	case outcome == storage.OutcomeInFlight:
		return Answer{}, errInFlight(c.key.Key, c.g.handlerTimes.retryDelay(c.req.Operation, rec.LeaseExpiry.Sub(now)))
	case outcome == storage.OutcomeMismatch:
		return Answer{}, errMismatch(c.key.Key, rec, c.fp, c.scheme)
	}
	if c.g.txStore != nil && c.tx == nil {
		// A TxStore that claimed without a Tx broke its contract: run nothing.
		c.obs.Err = errors.New("the store claimed without a Tx")
		return Answer{}, plain(ErrStoreUnavailable, code.Code_UNAVAILABLE, "idempotency store unavailable, the request was not run; retry with the same key")
	}
	c.claim = rec
	return c.run(ctx, fn)
}

// Replays reports whether a claim's decision is answered with the stored
// result, as Run does: a replay of the same request.
func Replays(outcome storage.Outcome, rec *storage.Record) bool {
	return outcome == storage.OutcomeReplay || replayMismatch && outcome == storage.OutcomeMismatch && rec.Result != nil
}

// claimKey claims the key, through ClaimTx when the store is a TxStore,
// and keeps the claim's Tx. With InFlightWait, a request that finds the
// same request in flight waits for it to end and claims again. It waits
// up to the limit and the caller's deadline. A run in this process wakes
// its waiters when it ends. A run in another process wakes them through
// the store when it is a Watcher. Otherwise, and in case a notice is lost,
// waiters poll.
func (c *call) claimKey(ctx context.Context) (storage.Outcome, *storage.Record, time.Time, error) {
	now := c.g.opts.Now()
	outcome, rec, err := c.claimOnce(ctx, now)
	if err != nil || outcome != storage.OutcomeInFlight || c.g.opts.InFlightWait <= 0 {
		return outcome, rec, now, err
	}
	return c.waitAndClaim(ctx, outcome, rec, now)
}

// waitAndClaim waits for the run in flight that the claim at now found,
// and claims again once it ends. It is apart from claimKey so that the
// common call, which does not wait, keeps a small stack.
func (c *call) waitAndClaim(ctx context.Context, outcome storage.Outcome, rec *storage.Record, now time.Time) (storage.Outcome, *storage.Record, time.Time, error) {
	opts := c.g.opts
	w := &inFlightWait{watcher: c.g.watcher, key: c.key, limit: opts.InFlightWait, pollEvery: 10 * time.Millisecond, watchedPollEvery: opts.WatchPoll}
	defer w.stop()
	for {
		local := c.g.flights.done(c.key) // nil unless it runs in this process
		if local != nil || !w.watch() {  // else it may have ended before the watch began: look again
			switch timedOut, err := w.wait(ctx, local); {
			case err != nil:
				return 0, nil, now, err
			case timedOut:
				return outcome, rec, now, nil
			}
		}
		now = opts.Now()
		var err error
		if outcome, rec, err = c.claimOnce(ctx, now); err != nil || outcome != storage.OutcomeInFlight {
			return outcome, rec, now, err
		}
	}
}

// claimOnce asks the store once, at now, through ClaimTx when it is a
// TxStore.
func (c *call) claimOnce(ctx context.Context, now time.Time) (outcome storage.Outcome, rec *storage.Record, err error) {
	req := storage.ClaimRequest{Key: c.key, Fingerprint: c.fp, Scheme: c.scheme, Now: now, Lease: c.g.opts.Lease, TTL: c.g.opts.TTL}
	start := time.Now()
	if c.g.txStore != nil {
		outcome, rec, c.tx, err = c.g.txStore.ClaimTx(ctx, req, c.durability)
	} else {
		outcome, rec, err = c.g.store.Claim(ctx, req)
	}
	c.obs.Store += time.Since(start)
	return outcome, rec, err
}

// run runs fn under the claim, stores its result and returns it. With a
// Tx, fn's writes commit together with the result, and only with a
// response. An error's writes are discarded, since no answer names them.
func (c *call) run(ctx context.Context, fn Func) (Answer, error) {
	// Once claimed, fn runs to its end even if the caller has gone. The
	// guard's own limit bounds it. A retry then finds the result instead
	// of a key locked for a lease.
	detached := context.WithoutCancel(ctx) // for the completion too
	fctx, cancel := context.WithTimeout(detached, c.g.opts.HandlerTimeout)
	defer cancel()
	fctx = context.WithValue(fctx, runningKey{}, &running{attempt: c.claim.Attempt, key: c.key})
	if c.tx != nil {
		fctx = c.tx.Context(fctx)
	}
	// A claim that is not durable lives no longer than this process's run
	// of it. There is no lease to renew.
	stopRenewing := func() {}
	if c.durability == storage.Durable {
		stopRenewing = c.renewWhileRunning(ctx)
		defer stopRenewing() // for a function that panics; else stopped below, before the commit
	}
	// A function deaf to its context must not hold its key for good. Once
	// it has overrun its limit by as much again, its claim is released,
	// with a Tx. Nothing it still does is then stored. A durable claim is
	// left to the lease rule. A function that returns at its deadline
	// still has its answer stored.
	tx := c.tx // the timer may fire while a run again claims anew
	overran := time.AfterFunc(2*c.g.opts.HandlerTimeout, func() {
		stopRenewing()
		if tx != nil {
			tx.Rollback()
		}
	})
	defer overran.Stop()
	if c.g.opts.InFlightWait > 0 { // else no duplicate waits for this run
		flight := c.g.flights.begin(c.key)
		defer c.g.flights.end(c.key, flight) // after the commit: waiters find the result
	}
	result, err := c.invoke(fctx, fn)
	stopRenewing()
	if err != nil {
		// Nothing can be stored. A durable claim stays in flight, and a
		// retry takes it over once the lease ends.
		return Answer{}, err
	}
	return c.deliver(detached, result)
}

// invoke runs fn once, timing it for the observation and for the
// in-flight answers' retry delay. A result over MaxResultSize is replaced
// by an INTERNAL error saying so.
func (c *call) invoke(ctx context.Context, fn Func) (*storage.Result, error) {
	start := time.Now()
	result, err := fn(ctx)
	took := time.Since(start)
	c.obs.Runs++
	c.obs.Handler += took
	c.g.handlerTimes.observe(c.req.Operation, took)
	if err != nil {
		return nil, err
	}
	if size := resultSize(result); size > c.g.opts.MaxResultSize {
		result = &storage.Result{Status: &spb.Status{Code: int32(code.Code_INTERNAL), Message: fmt.Sprintf(
			"idempotency: the handler's result is %d bytes, over the %d-byte limit for stored results; it was discarded",
			size, c.g.opts.MaxResultSize)}}
	}
	return result, nil
}

// deliver stores result and answers with it. A transactional function's
// error of a code in NotStored is not stored. Its Tx is rolled back,
// which discards its writes and frees the key, since its claim was never
// durable.
func (c *call) deliver(ctx context.Context, result *storage.Result) (Answer, error) {
	if c.durability == storage.Transactional && result.Status != nil && c.g.notStored[code.Code(result.Status.Code)] {
		c.tx.Rollback()
	} else if err := c.complete(ctx, result); err != nil {
		return Answer{}, err
	}
	return Answer{Result: result}, nil
}

// complete stores result as the completion of the claim. With a Tx, fn's
// writes commit with it, if fn succeeded. It returns what the caller is
// told if that failed. That is errRunAgain when a transactional function
// lost to a concurrent change.
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
		err = c.g.store.Complete(ctx, c.key, done)
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
// slow but live worker is then never taken over; only a dead one is. It
// stops when the returned func is called, which waits for it, or when a
// renewal finds the claim superseded. A renewal that fails otherwise is
// logged and tried again at the next tick. If they all fail, the lease
// runs out and a takeover supersedes this attempt, as if it had died.
func (c *call) renewWhileRunning(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	claim, opts := *c.claim, c.g.opts
	go func() {
		defer close(done)
		tick := time.NewTicker(opts.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			claim.LeaseExpiry = opts.Now().Add(opts.Lease)
			switch err := c.g.store.Renew(ctx, c.key, &claim); {
			case errors.Is(err, storage.ErrSuperseded):
				return
			case err != nil && ctx.Err() == nil:
				opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: lease renewal failed; will retry at the next tick",
					slog.String("method", c.req.Operation), slog.Uint64("attempt", claim.Attempt), slog.Any("err", err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// storeFailure is what the caller is told when the store failed. It is
// the one place where the store contract's errors become codes. With no
// claim, the claim itself failed and the request was not run. With one,
// its completion failed, and a durable claim's function may have acted
// outside the store. The cause goes to the Observation, never to the
// caller.
func (c *call) storeFailure(err error) *Refusal {
	switch {
	case c.claim == nil && errors.Is(err, storage.ErrScopeUnavailable):
		return errScopeUnavailable(err)
	case c.claim == nil && errors.Is(err, storage.ErrDamaged):
		return plain(ErrDataLoss, code.Code_DATA_LOSS, "idempotency store found its data damaged; the request was not run")
	case c.claim == nil:
		return plain(ErrStoreUnavailable, code.Code_UNAVAILABLE, "idempotency store unavailable, the request was not run; retry with the same key")
	case errors.Is(err, storage.ErrDamaged):
		return plain(ErrDataLoss, code.Code_DATA_LOSS, "idempotency store found its data damaged; the result of attempt %d was not stored", c.claim.Attempt)
	case errors.Is(err, storage.ErrOutcomeUnknown):
		return errOutcomeUnknown(c.key.Key, c.claim.Attempt, c.durability == storage.Durable)
	case c.durability == storage.Durable:
		return plain(ErrStoreUnavailable, code.Code_UNAVAILABLE,
			"idempotency store failed to save the result of attempt %d; retry with the same key", c.claim.Attempt)
	default:
		return plain(ErrStoreUnavailable, code.Code_UNAVAILABLE,
			"idempotency store failed to save the request's writes and result, which were most likely not kept (a commit whose answer was lost may have been); retry with the same key to learn which")
	}
}

// resultSize is the stored size of r, near enough: its parts' encodings.
func resultSize(r *storage.Result) int {
	n := proto.Size(r.Response) + proto.Size(r.Status)
	for _, md := range []map[string][]string{r.Header, r.Trailer} {
		for k, vs := range md {
			for _, v := range vs {
				n += len(k) + len(v)
			}
		}
	}
	return n
}
