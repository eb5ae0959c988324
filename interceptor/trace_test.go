package interceptor_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/tracing"
	"github.com/paymentsd/paymentsd/internal/testkit/testclock"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/wire"
)

// Tested with an in-memory span recorder: a real server whose first
// interceptor starts each call's span, as a tracing stats handler does,
// and the idempotency interceptor on memstore, whose spans are checked.

const (
	traceToken = "tok-SECRET-7f3a"
	traceKey   = "key-SECRET-91bc"
)

type traceHarness struct {
	client  testgrpc.TestServiceClient
	service *testService
	clock   *testclock.Clock
	spans   *tracetest.SpanRecorder
}

// startTraced serves a testService behind a span per call and the
// interceptor. UnaryCall takes a key optionally, EmptyCall requires one.
func startTraced(t *testing.T) *traceHarness {
	t.Helper()
	h := &traceHarness{service: &testService{handler: echo}, clock: testclock.New(), spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	spanned := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, span := tp.Tracer("test").Start(ctx, info.FullMethod, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		return handler(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(spanned,
		interceptor.MustUnaryServerInterceptor(memstore.New(),
			interceptor.WithClock(h.clock.Now), interceptor.WithObserver(tracing.Observer{}),
			interceptor.WithKeyPolicy(testgrpc.TestService_EmptyCall_FullMethodName, interceptor.KeyRequired))))
	testgrpc.RegisterTestServiceServer(srv, h.service)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		tp.Shutdown(context.Background())
	})
	h.client = testgrpc.NewTestServiceClient(conn)
	return h
}

// span waits for the n-th server span to end (the server ends it after
// the client has its answer) and returns its attributes.
func (h *traceHarness) span(t *testing.T, n int) map[attribute.Key]attribute.Value {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(h.spans.Ended()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(h.spans.Ended()), n)
		}
		time.Sleep(time.Millisecond)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range h.spans.Ended()[n-1].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	return attrs
}

// wantIdempotency checks a span's idempotency attributes; outcome "" means
// the call was not deduplicated and must carry no outcome or attempt.
func wantIdempotency(t *testing.T, attrs map[attribute.Key]attribute.Value, keyPresent bool, outcome string, attempt int64) {
	t.Helper()
	if v, ok := attrs[tracing.AttrKeyPresent]; !ok || v.Type() != attribute.BOOL || v.AsBool() != keyPresent {
		t.Errorf("%s = %v (set %v), want %v", tracing.AttrKeyPresent, v.String(), ok, keyPresent)
	}
	o, oOK := attrs[tracing.AttrOutcome]
	a, aOK := attrs[tracing.AttrAttempt]
	if outcome == "" {
		if oOK || aOK {
			t.Errorf("not deduplicated, yet outcome %q, attempt %q", o.String(), a.String())
		}
		return
	}
	if !oOK || o.AsString() != outcome {
		t.Errorf("%s = %q, want %q", tracing.AttrOutcome, o.String(), outcome)
	}
	if !aOK || a.Type() != attribute.INT64 || a.AsInt64() != attempt {
		t.Errorf("%s = %q, want %d", tracing.AttrAttempt, a.String(), attempt)
	}
}

func TestTraceAttributes(t *testing.T) {
	h := startTraced(t)
	ctx := context.Background()
	withKey := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+traceToken, wire.KeyHeader, traceKey)
	tokenOnly := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+traceToken)

	steps := []struct {
		name       string
		call       func() error
		code       codes.Code
		keyPresent bool
		outcome    string
		attempt    int64
	}{
		{"fresh", func() error { _, err := h.client.UnaryCall(withKey, payload("a")); return err }, codes.OK, true, "fresh", 1},
		{"replay", func() error { _, err := h.client.UnaryCall(withKey, payload("a")); return err }, codes.OK, true, "replay", 1},
		{"mismatch", func() error { _, err := h.client.UnaryCall(withKey, payload("b")); return err }, codes.FailedPrecondition, true, "mismatch", 1},
		{"optional key absent", func() error { _, err := h.client.UnaryCall(tokenOnly, payload("a")); return err }, codes.OK, false, "", 0},
		{"required key absent", func() error { _, err := h.client.EmptyCall(tokenOnly, &testgrpc.Empty{}); return err }, codes.InvalidArgument, false, "", 0},
	}
	for n, s := range steps {
		if err := s.call(); status.Code(err) != s.code {
			t.Fatalf("%s: %v, want %v", s.name, err, s.code)
		}
		t.Run(s.name, func(t *testing.T) {
			wantIdempotency(t, h.span(t, n+1), s.keyPresent, s.outcome, s.attempt)
		})
	}
	wantNoSecrets(t, h.spans.Ended())
}

// TestTraceTakeover: a takeover's span carries attempt 2, and the
// superseded attempt's span still says it ran fresh as attempt 1.
func TestTraceTakeover(t *testing.T) {
	h := startTraced(t)
	running, release := h.service.blockFirstAttempt()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+traceToken, wire.KeyHeader, traceKey)
	first := make(chan error, 1)
	go func() {
		_, err := h.client.UnaryCall(ctx, payload("a"))
		first <- err
	}()
	<-running
	h.clock.Advance(once.DefaultLease + time.Second)
	if _, err := h.client.UnaryCall(ctx, payload("a")); err != nil {
		t.Fatal(err)
	}
	wantIdempotency(t, h.span(t, 1), true, "takeover", 2)
	close(release)
	if err := <-first; status.Code(err) != codes.Aborted {
		t.Fatalf("superseded attempt: %v, want ABORTED", err)
	}
	wantIdempotency(t, h.span(t, 2), true, "fresh", 1)
	wantNoSecrets(t, h.spans.Ended())
}

// wantNoSecrets checks that no span names, attributes, events or status
// descriptions carry the key or the credential.
func wantNoSecrets(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, string(kv.Key), kv.Value.String())
		}
		for _, e := range s.Events() {
			texts = append(texts, e.Name)
			for _, kv := range e.Attributes {
				texts = append(texts, string(kv.Key), kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, secret := range []string{traceToken, traceKey, "SECRET"} {
				if strings.Contains(text, secret) {
					t.Errorf("span %q carries %q: %q", s.Name(), secret, text)
				}
			}
		}
	}
}
