package main

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// newLogLines returns d's log lines with message msg after the first
// skip, waiting a little for one: the line is written once the answer is
// sent, so it may come after the client has it.
func (d *daemon) newLogLines(skip int, msg string) []logLine {
	for range 200 {
		if lines := d.lines(msg); len(lines) > skip {
			time.Sleep(20 * time.Millisecond) // a second one, if there were, would show
			return d.lines(msg)[skip:]
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// httpRequests sums http_server_requests_total over its series, and over
// those of code alone.
func httpRequests(t *testing.T, addr, code string) (all, ofCode float64) {
	for name, v := range scrape(t, addr) {
		if strings.HasPrefix(name, "http_server_requests_total{") {
			all += v
			if strings.Contains(name, `code="`+code+`"`) {
				ofCode += v
			}
		}
	}
	return all, ofCode
}

// TestHTTPObservability_EachRefusalIsOneLineAndOneCount: the face's own
// refusals, which never reach gRPC, are each logged once and counted once
// on /metrics, with the request id the client sent or one made for it.
func TestHTTPObservability_EachRefusalIsOneLineAndOneCount(t *testing.T) {
	d := start(t, spec{http: true, metrics: true})
	base, metrics := d.httpBase, d.metricsAddr(t)
	for _, c := range []struct {
		name, method, path, body string
		headers                  []string
		status                   int
	}{
		{"404", "GET", "/v1/nowhere", "", bearerHeader(traceToken), 404},
		{"405", "DELETE", "/v1/payment_intents", "", bearerHeader(traceToken), 405},
		{"413", "POST", "/v1/payment_intents", strings.Repeat(" ", 1<<20+1), withHTTPKey(traceToken, "k1"), 413},
		{"415", "POST", "/v1/payment_intents", "a=1", append(withHTTPKey(traceToken, "k1"), "Content-Type", "application/x-www-form-urlencoded"), 415},
		{"400 bad key", "POST", "/v1/payment_intents", seedBody, withHTTPKey(traceToken, "café"), 400},
	} {
		lines := len(d.lines("http"))
		all, ofCode := httpRequests(t, metrics, c.name[:3])
		a := httpCall(t, c.method, base+c.path, c.body, append(c.headers, "X-Request-Id", "req-"+c.name[:3])...)
		if a.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, a.status, c.status, a.body)
		}
		got := d.newLogLines(lines, "http")
		if len(got) != 1 || got[0]["status"] != float64(c.status) || got[0]["request_id"] != "req-"+c.name[:3] ||
			got[0]["method"] != c.method || a.header.Get("X-Request-Id") != "req-"+c.name[:3] {
			t.Errorf("%s: log lines %v, answer's X-Request-Id %q; want one line with the status and request id", c.name, got, a.header.Get("X-Request-Id"))
		}
		all2, ofCode2 := httpRequests(t, metrics, c.name[:3])
		if all2-all != 1 || ofCode2-ofCode != 1 {
			t.Errorf("%s: http_server_requests_total grew by %v (%v with code %s), want 1", c.name, all2-all, ofCode2-ofCode, c.name[:3])
		}
	}
	if out := d.stderr(); strings.Contains(out, traceToken) {
		t.Errorf("the token is logged:\n%s", out)
	}
}

// TestTracing_HTTPSpanIsTheParentOfTheGRPCSpan: a traced HTTP create is
// an HTTP server span, continuing the client's traceparent, whose child is
// the gRPC server span; the log lines of both carry the trace and the
// request id. The resource names the version; reflection is not traced.
func TestTracing_HTTPSpanIsTheParentOfTheGRPCSpan(t *testing.T) {
	c := startCollector(t, "127.0.0.1:0")
	otelEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + c.addr, "OTEL_BSP_SCHEDULE_DELAY": "600000"})
	d := start(t, spec{http: true})
	base := d.httpBase
	a := httpCall(t, "POST", base+"/v1/payment_intents", seedBody,
		append(withHTTPKey(traceToken, "key-SECRET-http"), "traceparent", traceParent, "X-Request-Id", "req-trace-1")...)
	if a.status != 201 || a.header.Get("X-Request-Id") != "req-trace-1" {
		t.Fatalf("HTTP create: %d %v %s", a.status, a.header, a.body)
	}
	listServices(t, d)
	if err := d.stop(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, d.stderr())
	}
	httpSpan, grpcSpan := tracedCreate(t, c)
	if hex.EncodeToString(httpSpan.TraceId) != traceParent[3:35] || hex.EncodeToString(httpSpan.ParentSpanId) != traceParent[36:52] {
		t.Errorf("HTTP span in trace %x under %x, want the traceparent's", httpSpan.TraceId, httpSpan.ParentSpanId)
	}
	if string(grpcSpan.TraceId) != string(httpSpan.TraceId) || string(grpcSpan.ParentSpanId) != string(httpSpan.SpanId) {
		t.Errorf("gRPC span in trace %x under %x, want the HTTP span's child (%x)", grpcSpan.TraceId, grpcSpan.ParentSpanId, httpSpan.SpanId)
	}
	for msg, span := range map[string]*tracepb.Span{"http": httpSpan, "rpc": grpcSpan} {
		var found bool
		for _, l := range d.lines(msg) {
			if l["trace_id"] == hex.EncodeToString(span.TraceId) && l["span_id"] == hex.EncodeToString(span.SpanId) && l["request_id"] == "req-trace-1" {
				found = true
			}
		}
		if !found {
			t.Errorf("no %q log line with the trace %x, span %x and request id:\n%s", msg, span.TraceId, span.SpanId, d.stderr())
		}
	}
}

// tracedCreate returns the HTTP and gRPC spans of the one create c got,
// checking the resource and that nothing else was traced but them.
func tracedCreate(t *testing.T, c *collector) (httpSpan, grpcSpan *tracepb.Span) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range c.got {
		if res := attrs(rs.Resource.GetAttributes()); res["service.name"] != "paymentsd" || res["service.version"] != releaseVersion(t) {
			t.Errorf("resource %v: want service.name paymentsd and service.version %s", res, releaseVersion(t))
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				noSecrets(t, s)
				switch {
				case s.Name == "POST /v1/payment_intents" && s.Kind == tracepb.Span_SPAN_KIND_SERVER:
					httpSpan = s
				case strings.HasSuffix(s.Name, "/CreatePaymentIntent"):
					grpcSpan = s
				default:
					t.Errorf("span %q traced, want only the create's", s.Name)
				}
			}
		}
	}
	if httpSpan == nil || grpcSpan == nil {
		t.Fatalf("HTTP span %v, gRPC span %v: want both", httpSpan, grpcSpan)
	}
	return httpSpan, grpcSpan
}

// listServices asks d's reflection service for its services.
func listServices(t *testing.T, d *daemon) {
	t.Helper()
	conn := d.newConn(t, nil)
	defer conn.Close()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
}
