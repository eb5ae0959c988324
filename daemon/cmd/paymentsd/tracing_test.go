package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// collector is a fake OTLP/gRPC collector that keeps what it is sent.
type collector struct {
	collectortracepb.UnimplementedTraceServiceServer
	addr  string
	conns atomic.Int64
	mu    sync.Mutex
	got   []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, req.ResourceSpans...)
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

// startCollector serves a collector on addr, counting the connections.
func startCollector(t *testing.T, addr string) *collector {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("no collector on %s: %v", addr, err)
	}
	c := &collector{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortracepb.RegisterTraceServiceServer(srv, c)
	go srv.Serve(countingListener{lis, &c.conns})
	t.Cleanup(srv.Stop)
	return c
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return conn, err
}

// otelEnv clears the OpenTelemetry environment the test does not set, so
// that the runner's own cannot change what paymentsd does.
func otelEnv(t *testing.T, set map[string]string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER", "OTEL_SERVICE_NAME",
		"OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_PROPAGATORS"} {
		t.Setenv(k, set[k])
	}
}

const (
	traceToken  = "tok-SECRET-5d1e"
	traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// TestTracing_ExportsSpansWithIdempotencyOverOTLP: with an OTLP endpoint
// set, the real binary exports a server span per create, from gRPC and
// HTTP alike, continuing a W3C traceparent and carrying the idempotency
// attributes, and never the key or the token; health checks make none.
// The batch delay is long, so the spans arrive only because shutdown
// flushes them.
func TestTracing_ExportsSpansWithIdempotencyOverOTLP(t *testing.T) {
	c := startCollector(t, "127.0.0.1:0")
	otelEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + c.addr,
		"OTEL_BSP_SCHEDULE_DELAY":     "600000",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test",
	})
	d := start(t, spec{http: true})
	base := d.httpBase
	ctx := metadata.AppendToOutgoingContext(withCreds(traceToken, "key-SECRET-grpc"), "traceparent", traceParent)
	for range 2 { // fresh, then replay
		if a := d.create(ctx, seedRequest("100000000")); a.err != nil {
			t.Fatal(a.err)
		}
	}
	if a := httpCall(t, "POST", base+"/v1/payment_intents", seedBody,
		append(withHTTPKey(traceToken, "key-SECRET-http"), "traceparent", traceParent)...); a.status != 201 {
		t.Fatalf("HTTP create: %d %s", a.status, a.body)
	}
	if _, err := healthpb.NewHealthClient(d.dial(t, nil)).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.stderr(), "tracing: exporting spans") {
		t.Errorf("no log line saying tracing is on:\n%s", d.stderr())
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, d.stderr())
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var creates []*tracepb.Span
	for _, rs := range c.got {
		res := attrs(rs.Resource.GetAttributes())
		if res["service.name"] != "paymentsd" || res["deployment.environment.name"] != "test" {
			t.Errorf("resource %v: want service.name paymentsd and OTEL_RESOURCE_ATTRIBUTES'", res)
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				noSecrets(t, s)
				if strings.Contains(s.Name, "grpc.health.v1") {
					t.Errorf("health check traced: %s", s.Name)
				}
				if strings.HasSuffix(s.Name, "/CreatePaymentIntent") {
					creates = append(creates, s)
				}
			}
		}
	}
	if len(creates) != 3 {
		t.Fatalf("%d CreatePaymentIntent spans exported, want 3 (gRPC fresh, gRPC replay, HTTP)", len(creates))
	}
	// In the order the calls were made: a span is exported once it ends,
	// which can be after the client has its answer and made the next call.
	slices.SortFunc(creates, func(a, b *tracepb.Span) int { return cmp.Compare(a.StartTimeUnixNano, b.StartTimeUnixNano) })
	var outcomes []string
	for _, s := range creates {
		a := attrs(s.Attributes)
		outcomes = append(outcomes, a["idempotency.outcome"])
		if a["idempotency.key_present"] != "true" || a["idempotency.attempt"] != "1" || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("span %s %v: want a server span, key present, attempt 1", s.Name, a)
		}
	}
	if got := strings.Join(outcomes, " "); got != "fresh replay fresh" {
		t.Errorf("outcomes %q, want fresh replay fresh", got)
	}
	if got, want := hex.EncodeToString(creates[0].TraceId), traceParent[3:35]; got != want {
		t.Errorf("gRPC span's trace %s, want the traceparent's %s", got, want)
	}
	if got, want := hex.EncodeToString(creates[0].ParentSpanId), traceParent[36:52]; got != want {
		t.Errorf("gRPC span's parent %s, want the traceparent's %s", got, want)
	}
}

// TestTracing_Off_DialsNothing: without an OTLP endpoint, paymentsd dials
// no collector, not even at the default address, to which a spurious
// exporter would send; nor with one, when OTEL_SDK_DISABLED says so.
func TestTracing_Off_DialsNothing(t *testing.T) {
	c := startCollector(t, "127.0.0.1:4317") // skips if the port is taken
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + c.addr, "OTEL_SDK_DISABLED": "true"},
	} {
		otelEnv(t, env)
		d := start(t, spec{})
		if a := d.createSeed(traceToken, "k1", "100000000"); a.err != nil {
			t.Fatal(a.err)
		}
		if err := d.stop(t); err != nil {
			t.Fatalf("exit: %v\n%s", err, d.stderr())
		}
		if n := c.conns.Load(); n > 0 || strings.Contains(d.stderr(), "tracing:") {
			t.Errorf("env %v: %d connections to the collector, log:\n%s\nwant none and no tracing", env, n, d.stderr())
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return v.String()
}

// noSecrets fails t if s carries the token or a key anywhere.
func noSecrets(t *testing.T, s *tracepb.Span) {
	t.Helper()
	texts := []string{s.Name, s.Status.GetMessage()}
	for _, kv := range s.Attributes {
		texts = append(texts, kv.Key, anyValue(kv.Value))
	}
	for _, e := range s.Events {
		texts = append(texts, e.Name)
		for _, kv := range e.Attributes {
			texts = append(texts, kv.Key, anyValue(kv.Value))
		}
	}
	for _, text := range texts {
		if strings.Contains(text, "SECRET") {
			t.Errorf("span %s carries a secret: %q", s.Name, text)
		}
	}
}
