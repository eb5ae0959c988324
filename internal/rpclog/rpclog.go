package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/metrics"
)

// rpcOutcomeKey holds an *interceptor.Observation in which the observer
// carries the interceptor's decision out to logRPC, which sits outside it.
type rpcOutcomeKey struct{}

// observer hands what the interceptor did to the log line and, when they
// are on, the metrics.
type observer struct{ metrics *metrics.Metrics }

func (o observer) Claimed(ctx context.Context, obs interceptor.Observation) {
	if o.metrics != nil {
		o.metrics.Claimed(ctx, obs)
	}
}

func (o observer) Finished(ctx context.Context, obs interceptor.Observation) {
	if slot, ok := ctx.Value(rpcOutcomeKey{}).(*interceptor.Observation); ok {
		*slot = obs
	}
	if o.metrics != nil {
		o.metrics.Finished(ctx, obs)
	}
}

// logRPC writes one line per call: method, idempotency outcome and attempt,
// status code, duration and, for a storage failure, its cause. It logs no
// metadata and no principal, so neither a credential nor a key's owner.
func logRPC(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		slot := &interceptor.Observation{}
		resp, err := handler(context.WithValue(ctx, rpcOutcomeKey{}, slot), req)
		attrs := []slog.Attr{
			slog.String("method", info.FullMethod),
			slog.String("code", status.Code(err).String()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if slot.Outcome != 0 {
			attrs = append(attrs, slog.String("idempotency", slot.Outcome.String()), slog.Uint64("attempt", slot.Attempt))
			if slot.Runs > 1 {
				attrs = append(attrs, slog.Int("runs", slot.Runs))
			}
		}
		// The cause of a failure the caller was told of only by its code.
		var wrapped interface{ Unwrap() error }
		switch {
		case slot.Err != nil:
			attrs = append(attrs, slog.String("err", slot.Err.Error()))
		case errors.As(err, &wrapped):
			attrs = append(attrs, slog.String("err", err.Error()))
		}
		logger.LogAttrs(ctx, slog.LevelInfo, "rpc", attrs...)
		return resp, err
	}
}
