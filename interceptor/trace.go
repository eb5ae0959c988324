package interceptor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes the interceptor sets on the current span. See the
// package documentation.
const (
	AttrOutcome    = attribute.Key("idempotency.outcome")
	AttrAttempt    = attribute.Key("idempotency.attempt")
	AttrKeyPresent = attribute.Key("idempotency.key_present")
)

// traceObservation records on the span of ctx, if one is recording, what
// the interceptor did. Only the API is used, so without an SDK (or with
// tracing off) it costs a context lookup. The key's presence is read from
// the metadata rather than passed in, so that the hook stays one line, and
// as a bool: neither the key nor the credential ever reaches a span.
func traceObservation(ctx context.Context, obs *Observation) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	present := keySent(ctx)
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
