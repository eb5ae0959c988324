// Package rpclog writes paymentsd's log line of each call, with what the
// idempotency interceptor decided for it.
package rpclog

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/internal/requestid"
	"github.com/paymentsd/paymentsd/metrics"
)

// rpcOutcomeKey holds an *interceptor.Observation. Observer carries the
// interceptor's decision in it out to Interceptor, which sits outside.
type rpcOutcomeKey struct{}

// Observer hands what the interceptor did to the log line, and to Metrics
// when set. Give it to the idempotency interceptor with
// interceptor.WithObserver.
type Observer struct{ Metrics *metrics.Metrics }

// Claimed counts a claim.
func (o Observer) Claimed(ctx context.Context, obs interceptor.Observation) {
	if o.Metrics != nil {
		o.Metrics.Claimed(ctx, obs)
	}
}

// Finished hands obs to the log line, and counts it.
func (o Observer) Finished(ctx context.Context, obs interceptor.Observation) {
	if slot, ok := ctx.Value(rpcOutcomeKey{}).(*interceptor.Observation); ok {
		*slot = obs
	}
	if o.Metrics != nil {
		o.Metrics.Finished(ctx, obs)
	}
}

// Interceptor writes one line per call. It holds the method, status code
// and duration, and the idempotency outcome and attempt when Observer saw
// them. A storage failure adds its cause. The call's x-request-id is
// logged when valid; the HTTP face sends its request's. A span recording
// the call adds trace_id and span_id. It logs no other metadata and no
// principal, so neither a credential nor a key's owner. Put it outside the
// idempotency interceptor.
func Interceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		slot := &interceptor.Observation{}
		resp, err := handler(context.WithValue(ctx, rpcOutcomeKey{}, slot), req)
		logCall(ctx, logger, info.FullMethod, start, slot, err)
		return resp, err
	}
}

// logCall writes the line of a call that ended with err. It is a function
// of its own so that its attributes take no room on the stack while the
// handler runs: a deeper stack is copied to a larger one, at a cost.
func logCall(ctx context.Context, logger *slog.Logger, method string, start time.Time, slot *interceptor.Observation, err error) {
	if !logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	// No caller's pc: the handler prints none, and runtime.Callers is a
	// cost per line.
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "rpc", 0)
	rec.AddAttrs(
		slog.String("method", method),
		slog.String("code", status.Code(err).String()),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	)
	if slot.Outcome != 0 {
		rec.AddAttrs(slog.String("idempotency", slot.Outcome.String()), slog.Uint64("attempt", slot.Attempt))
		if slot.Runs > 1 {
			rec.AddAttrs(slog.Int("runs", slot.Runs))
		}
	}
	// The cause of a failure the caller was told of only by its code.
	var wrapped interface{ Unwrap() error }
	switch {
	case slot.Err != nil:
		rec.AddAttrs(slog.String("err", slot.Err.Error()))
	case errors.As(err, &wrapped):
		rec.AddAttrs(slog.String("err", err.Error()))
	}
	if id := requestid.FromIncoming(ctx); id != "" {
		rec.AddAttrs(slog.String("request_id", id))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		sc := span.SpanContext()
		rec.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	logger.Handler().Handle(ctx, rec)
}
