package httpapi

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/paymentsd/paymentsd/auth"
	"github.com/paymentsd/paymentsd/internal/requestid"
)

// outgoing passes what the HTTP request's observation knows to the gRPC
// call it makes. It also takes back what the call knows.
// It passes the request id, so that the call's log line carries it.
// It passes the HTTP span as the parent of the server's span. That
// replaces the traceparent header the gateway forwards, which is the HTTP
// span's own parent. It takes back the principal's hash for the HTTP log
// line, and the route template the gateway matched.
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
	if p := md.Get(auth.ForwardedPrincipalHeader); len(p) == 1 {
		i.principal = auth.PrincipalHash(p[0])
	}
	if route, ok := runtime.HTTPPathPattern(ctx); ok {
		i.route = route // the template the gateway routed by: no lookup needed
	}
	return invoker(metadata.NewOutgoingContext(ctx, md), method, req, reply, cc, opts...)
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
