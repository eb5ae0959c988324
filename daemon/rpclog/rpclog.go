// Package rpclog writes paymentsd's log line of each call, with what the
// idempotency interceptor decided for it.
package rpclog

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/internal/logattr"
	"github.com/paymentsd/paymentsd/daemon/internal/requestid"
	"github.com/paymentsd/paymentsd/metrics"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/wire"
)

// callKey holds the *call of the line being gathered. Observer and
// Identified, which run inside, fill it in for Interceptor, outside.
type callKey struct{}

// call is what the inner interceptors tell a call's line.
type call struct {
	obs       once.Observation
	principal string // "" until Identified saw one
}

// Observer hands what the interceptor did to the log line, and to Metrics
// when set. Give it to the idempotency interceptor with
// interceptor.WithObserver.
type Observer struct{ Metrics *metrics.Metrics }

// Claimed counts a claim.
func (o Observer) Claimed(ctx context.Context, obs once.Observation) {
	if o.Metrics != nil {
		o.Metrics.Claimed(ctx, obs)
	}
}

// Finished hands obs to the log line, and counts it.
func (o Observer) Finished(ctx context.Context, obs once.Observation) {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		c.obs = obs
	}
	if o.Metrics != nil {
		o.Metrics.Finished(ctx, obs)
	}
}

// Identified hands the principal authenticated for the call to its line.
// Put it after the authenticating interceptor.
func Identified(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		c.principal, _ = auth.FromContext(ctx)
	}
	return handler(ctx, req)
}

// Interceptor writes one line per call. It holds the method, status code
// and duration, the principal's hash once Identified saw it, the
// idempotency key as sent, and the idempotency outcome and attempt when
// Observer saw them. An error's ErrorInfo reason is its reason. A payment
// intent's id is the response's, or else the request's. A storage failure
// adds its cause. The call's x-request-id is logged when valid; the HTTP
// face sends its request's, and a call it made says so (via "http"). A
// span recording the call adds trace_id and span_id. It logs no other
// metadata, and never a credential. Put it outside the idempotency
// interceptor.
func Interceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		c := &call{}
		resp, err := handler(context.WithValue(ctx, callKey{}, c), req)
		forwarded := isForwarded(ctx)
		if forwarded && c.obs.Outcome != 0 {
			grpc.SetTrailer(ctx, metadata.Pairs(logattr.ObservedTrailer, c.obs.Outcome.String()+" "+strconv.FormatUint(c.obs.Attempt, 10)))
		}
		logCall(ctx, logger, info.FullMethod, start, c, forwarded, req, resp, err)
		return resp, err
	}
}

// isForwarded reports whether the call came from a face in the process.
func isForwarded(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	_, ok = p.AuthInfo.(auth.Forwarded)
	return ok
}

// logCall writes the line of a call that ended with err. It is a function
// of its own so that its attributes take no room on the stack while the
// handler runs: a deeper stack is copied to a larger one, at a cost.
func logCall(ctx context.Context, logger *slog.Logger, method string, start time.Time, c *call, forwarded bool, req, resp any, err error) {
	if !logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	// No caller's pc: the handler prints none, and runtime.Callers is a
	// cost per line.
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "rpc", 0)
	st, _ := status.FromError(err)
	rec.AddAttrs(
		slog.String("method", method),
		slog.String("code", st.Code().String()),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	)
	if forwarded {
		rec.AddAttrs(slog.String("via", "http"))
	}
	if c.principal != "" {
		rec.AddAttrs(slog.String("principal_hash", auth.PrincipalHash(c.principal)))
	}
	if keys := metadata.ValueFromIncomingContext(ctx, wire.KeyHeader); len(keys) > 0 {
		rec.AddAttrs(slog.String("idempotency_key", logattr.Key(keys[0])))
	}
	if slot := &c.obs; slot.Outcome != 0 {
		rec.AddAttrs(slog.String("idempotency", slot.Outcome.String()), slog.Uint64("attempt", slot.Attempt))
		if slot.Runs > 1 {
			rec.AddAttrs(slog.Int("runs", slot.Runs))
		}
	}
	if reason := logattr.Reason(st); reason != "" {
		rec.AddAttrs(slog.String("reason", reason))
	}
	if id := intentID(resp); id != "" {
		rec.AddAttrs(slog.String("intent_id", id))
	} else if r, ok := req.(interface{ GetId() string }); ok && r.GetId() != "" {
		rec.AddAttrs(slog.String("intent_id", r.GetId()))
	}
	// The cause of a failure the caller was told of only by its code.
	var wrapped interface{ Unwrap() error }
	switch {
	case c.obs.Err != nil:
		rec.AddAttrs(slog.String("err", c.obs.Err.Error()))
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
