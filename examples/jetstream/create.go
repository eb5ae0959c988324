package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/once"
)

// outcome is what becomes of one command.
type outcome struct {
	resp     *paymentsv1.CreatePaymentIntentResponse // nil when status is set
	status   *spb.Status
	replayed bool          // an earlier delivery stored this result
	retry    time.Duration // when positive, nothing is final: redeliver after it
	why      string        // why it is not final, for the log
}

// creator creates intents, through the core unless plain.
type creator struct {
	guard  *once.Guard
	server *server.Server
	plain  bool
	retry  time.Duration
	log    *slog.Logger
}

// create runs cmd's create at most once per (principal, key). The intent
// and the record commit in one transaction, or neither does.
func (c *creator) create(ctx context.Context, principal string, cmd command) outcome {
	if c.plain {
		resp, err := c.server.CreatePaymentIntent(auth.NewContext(ctx, principal), cmd.req)
		return c.plainOutcome(resp, err)
	}
	resp, answered, err := once.Do(ctx, c.guard, once.Request{Scope: principal, Key: cmd.key, Operation: operation,
		Message: cmd.req, Transactional: true},
		func(ctx context.Context) (*paymentsv1.CreatePaymentIntentResponse, error) {
			resp, err := c.server.CreatePaymentIntent(auth.NewContext(ctx, principal), cmd.req)
			if cause := errors.Unwrap(err); cause != nil {
				c.log.Error("intent storage failed", "err", cause) // logged, never stored
			}
			return resp, err
		})
	var refused *once.Refusal
	switch {
	case err == nil:
		return outcome{resp: resp, replayed: answered.Replayed}
	case !errors.As(err, &refused):
		// The server's own error, with its code and details
		// (interceptor.StatusErrors): stored, on this run or an earlier
		// one, unless its code is one of notStored.
		st := status.Convert(err).Proto()
		if slices.Contains(notStored, code.Code(st.Code)) {
			return outcome{retry: c.retry, why: st.Message}
		}
		return outcome{status: st, replayed: answered.Replayed}
	}
	if d, again := c.retryable(ctx, refused); again {
		return outcome{retry: d, why: refused.Error()}
	}
	return outcome{status: refused.Status}
}

// retryable says whether a refusal leaves the command to a redelivery,
// and when. Nothing was stored for it.
func (c *creator) retryable(ctx context.Context, r *once.Refusal) (time.Duration, bool) {
	switch {
	case errors.Is(r, once.ErrInFlight), errors.Is(r, once.ErrSuperseded), errors.Is(r, once.ErrWriteConflict):
		return max(r.RetryDelay(), 50*time.Millisecond), true
	case once.Retryable(r), errors.Is(r, once.ErrDataLoss):
		return c.retry, true
	case errors.Is(r, context.Canceled), errors.Is(r, context.DeadlineExceeded):
		return c.retry, ctx.Err() != nil // stopping: not an answer
	}
	return 0, false
}

// plainOutcome is the outcome of a create without the core.
func (c *creator) plainOutcome(resp *paymentsv1.CreatePaymentIntentResponse, err error) outcome {
	if err == nil {
		return outcome{resp: resp}
	}
	st := status.Convert(err).Proto()
	if code.Code(st.Code) == code.Code_UNAVAILABLE {
		return outcome{retry: c.retry, why: st.Message}
	}
	return outcome{status: st}
}

// notStored are the server's errors that say nothing of the request. The
// core rolls their writes back and stores nothing, so a redelivery runs.
var notStored = []code.Code{code.Code_UNAVAILABLE, code.Code_DATA_LOSS}
