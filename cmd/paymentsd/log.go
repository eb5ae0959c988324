package main

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
)

// rpcOutcome carries the idempotency interceptor's decision out to logRPC,
// which sits outside it.
type rpcOutcome struct{ interceptor.Observation }

type rpcOutcomeKey struct{}

func observeOutcome(ctx context.Context, o interceptor.Observation) {
	if slot, ok := ctx.Value(rpcOutcomeKey{}).(*rpcOutcome); ok {
		slot.Observation = o
	}
}

// logRPC writes one line per call: method, idempotency outcome and attempt,
// status code and duration. It logs no metadata, so no credential or key.
func logRPC(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		slot := &rpcOutcome{}
		resp, err := handler(context.WithValue(ctx, rpcOutcomeKey{}, slot), req)
		attrs := []slog.Attr{
			slog.String("method", info.FullMethod),
			slog.String("code", status.Code(err).String()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if slot.Outcome != 0 {
			attrs = append(attrs, slog.String("idempotency", slot.Outcome.String()), slog.Uint64("attempt", slot.Attempt))
		}
		logger.LogAttrs(ctx, slog.LevelInfo, "rpc", attrs...)
		return resp, err
	}
}
