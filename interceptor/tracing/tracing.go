// Package tracing puts what the idempotency interceptor decided on the
// request's OpenTelemetry span. It does so as an interceptor.Observer, so
// the interceptor itself needs no tracing library:
//
//	interceptor.WithObserver(tracing.Observer{})
//
// Only the OpenTelemetry API is used. Without an SDK, or with tracing off,
// each request costs a context lookup.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/once"
)

// Span attributes the Observer sets on the request's span.
const (
	// AttrOutcome: fresh, replay, in_flight, mismatch or takeover; absent
	// when the request was not deduplicated.
	AttrOutcome = attribute.Key("idempotency.outcome")
	// AttrAttempt: the record's attempt; absent as AttrOutcome is.
	AttrAttempt = attribute.Key("idempotency.attempt")
	// AttrKeyPresent: whether the request carried an idempotency key, valid
	// or not. A bool: neither the key nor the credential reaches a span.
	AttrKeyPresent = attribute.Key("idempotency.key_present")
)

// Observer records each request's outcome on the span of its context, if
// one is recording, when the interceptor finishes with it.
type Observer struct{}

var _ interceptor.Observer = Observer{}

// Claimed does nothing: Finished records the whole decision.
func (Observer) Claimed(context.Context, once.Observation) {}

// Finished sets the attributes above on the request's span.
func (Observer) Finished(ctx context.Context, obs once.Observation) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	present := interceptor.KeySent(ctx)
	if obs.Outcome == 0 {
		span.SetAttributes(AttrKeyPresent.Bool(present))
		return
	}
	span.SetAttributes(
		AttrKeyPresent.Bool(present),
		AttrOutcome.String(obs.Outcome.String()),
		AttrAttempt.Int64(int64(obs.Attempt)),
	)
}
