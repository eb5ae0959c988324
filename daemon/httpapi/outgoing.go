package httpapi

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/logattr"
	"github.com/paymentsd/paymentsd/daemon/internal/requestid"
)

// outgoing passes what the HTTP request's observation knows to the gRPC
// call it makes. It also takes back what the call knows.
// It passes the request id, so that the call's log line carries it.
// It passes the HTTP span as the parent of the server's span. That
// replaces the traceparent header the gateway forwards, which is the HTTP
// span's own parent. It takes back, for the HTTP log line, the route
// template the gateway matched and what the call's line says of it.
func outgoing(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, ok := metadata.FromOutgoingContext(ctx) // a copy, ours to change
	if !ok {
		md = metadata.MD{}
	}
	i := infoOf(ctx)
	if i.requestID != "" {
		md.Set(requestid.MetadataKey, i.requestID)
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		md.Delete("traceparent")
		md.Delete("tracestate")
		propagation.TraceContext{}.Inject(ctx, mdCarrier(md))
	}
	if route, ok := runtime.HTTPPathPattern(ctx); ok {
		i.route = route // the template the gateway routed by: no lookup needed
	}
	var trailer metadata.MD
	err := invoker(metadata.NewOutgoingContext(ctx, md), method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
	i.observed(trailer, req, reply, err)
	return err
}

// observed takes back what the call's line says of it: the idempotency
// decision (logattr.ObservedTrailer), the intent's id (the answer's, else
// the request's) and the error's reason.
func (i *reqInfo) observed(trailer metadata.MD, req, reply any, err error) {
	if v := trailer.Get(logattr.ObservedTrailer); len(v) == 1 {
		i.outcome, i.attempt, _ = strings.Cut(v[0], " ")
	}
	if r, ok := reply.(interface {
		GetPaymentIntent() *paymentsv1.PaymentIntent
	}); ok && err == nil {
		i.intentID = r.GetPaymentIntent().GetId()
	} else if r, ok := req.(interface{ GetId() string }); ok {
		i.intentID = r.GetId()
	}
	i.reason = logattr.Reason(status.Convert(err))
}

// mdCarrier lets a propagator write metadata, whose keys are lower case.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
