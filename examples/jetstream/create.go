package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/server"
	"github.com/paymentsd/paymentsd/wire"
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
	ran := false
	resp, err := once.Do(ctx, c.guard, once.Request{Scope: principal, Key: cmd.key, Operation: operation,
		Message: cmd.req, Transactional: true},
		func(ctx context.Context) (*paymentsv1.CreatePaymentIntentResponse, error) {
			ran = true
			resp, err := c.server.CreatePaymentIntent(auth.NewContext(ctx, principal), cmd.req)
			return resp, c.asOnceError(err)
		})
	if err == nil {
		return outcome{resp: resp, replayed: !ran}
	}
	var e *once.Error
	if !errors.As(err, &e) {
		return outcome{retry: c.retry, why: err.Error()} // not an answer of the core: keep the command
	}
	if d, again := c.retryable(ctx, e); again {
		return outcome{retry: d, why: e.Error()}
	}
	// A refusal of the rules carries a reason; a stored error never does.
	return outcome{status: e.Status, replayed: !ran && e.Reason() == ""}
}

// retryable says whether e leaves the command to a redelivery, and when.
// Nothing was stored for such an answer.
func (c *creator) retryable(ctx context.Context, e *once.Error) (time.Duration, bool) {
	switch e.Reason() {
	case wire.ReasonKeyInUse, wire.ReasonAttemptSuperseded, wire.ReasonWriteConflict:
		return max(e.RetryDelay(), 50*time.Millisecond), true
	}
	switch e.Code() {
	case code.Code_UNAVAILABLE, code.Code_DATA_LOSS:
		return c.retry, true
	case code.Code_CANCELLED, code.Code_DEADLINE_EXCEEDED:
		return c.retry, ctx.Err() != nil // stopping: not a stored answer
	}
	return 0, false
}

// asOnceError gives a server error's status to the core, which stores it.
// A storage failure's cause is logged, never stored.
func (c *creator) asOnceError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if cause := errors.Unwrap(err); cause != nil {
		c.log.Error("intent storage failed", "err", cause)
	}
	return &once.Error{Status: st.Proto()}
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
