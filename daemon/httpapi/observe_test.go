package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/daemon/testkit/logbuf"
)

// observedAPI serves the API as Face does, observed, and returns its log,
// metrics and spans.
func observedAPI(t *testing.T) (*httptest.Server, *fakeService, *logbuf.Buffer, *prometheus.Registry, *tracetest.SpanRecorder) {
	t.Helper()
	f := &fakeService{}
	srv := grpc.NewServer(grpc.Creds(httpapi.ServerCredentials(nil)))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, f)
	conn := httpapi.Dial(srv)
	reg := prometheus.NewRegistry()
	metrics, err := httpapi.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	trace := func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(h, "http", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.TraceContext{}))
	}
	log := &logbuf.Buffer{}
	h := httpapi.Observed(httpapi.New(conn, auth.NewAuthenticator(auth.FromBearer, auth.Dev())),
		slog.New(slog.NewJSONHandler(log, nil)), httpapi.Observe{Metrics: metrics, Trace: trace})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		srv.Stop()
		conn.Close()
	})
	return ts, f, log, reg, spans
}

// Each request, refused by the face or not, is one log line and one count,
// under its route template, with a request id echoed in the answer.
func TestObserved_LogsAndCountsEveryRequest(t *testing.T) {
	ts, _, log, reg, _ := observedAPI(t)
	for _, c := range []struct {
		method, path, ct, body, route string
		status                        int
	}{
		{"GET", "/v1/nowhere", "", "", "", 404},
		{"DELETE", "/v1/payment_intents/pi_1", "", "", "/v1/payment_intents/{id}", 405},
		{"POST", "/v1/payment_intents", "application/x-www-form-urlencoded", "a=1", "/v1/payment_intents", 415},
		{"POST", "/v1/payment_intents", "", strings.Repeat("x", httpapi.MaxBodyBytes+1), "/v1/payment_intents", 413},
		{"GET", "/v1/payment_intents/pi_1", "", "", "/v1/payment_intents/{id}", 404},
	} {
		before := len(log.Lines(t))
		resp, _ := do(t, c.method, ts.URL+c.path, c.ct, c.body, "Authorization", "Bearer tok")
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		lines := log.Lines(t)[before:]
		if len(lines) != 1 {
			t.Fatalf("%s %s: %d log lines, want 1: %v", c.method, c.path, len(lines), lines)
		}
		l := lines[0]
		if l["msg"] != "http" || l["method"] != c.method || l["route"] != c.route || l["status"] != float64(c.status) ||
			l["request_id"] != resp.Header.Get("X-Request-Id") || l["duration_ms"] == nil || l["trace_id"] == nil {
			t.Errorf("%s %s: log line %v, answer's id %q", c.method, c.path, l, resp.Header.Get("X-Request-Id"))
		}
		if n := count(t, reg, c.method, c.route, c.status); n != 1 {
			t.Errorf("%s %s: counted %v times, want 1", c.method, c.path, n)
		}
	}
	if n := testutil.CollectAndCount(reg, "http_server_requests_total"); n != 5 {
		t.Errorf("%d series, want 5", n)
	}
}

// count is the value of http_server_requests_total{method,route,code}.
func count(t *testing.T, reg *prometheus.Registry, method, route string, code int) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if mf.GetName() == "http_server_requests_total" && strings.EqualFold(l["method"], method) &&
				l["route"] == route && l["code"] == strconv.Itoa(code) {
				return m.Counter.GetValue()
			}
		}
	}
	return 0
}

// A valid X-Request-Id is kept, an invalid one replaced; either reaches
// the gRPC call, as does the HTTP span, as the parent of the server's, in
// place of the client's traceparent; the log line names the principal by
// its hash.
func TestObserved_PassesRequestIDAndSpanToTheCall(t *testing.T) {
	ts, f, log, _, spans := observedAPI(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct{ sent, want string }{{"req-42", "req-42"}, {"bad id", ""}} {
		resp, body := do(t, "POST", ts.URL+"/v1/payment_intents", "application/json", `{"amount":"1"}`,
			"Authorization", "Bearer tok", "Idempotency-Key", "k1", "X-Request-Id", c.sent, "traceparent", parent)
		if resp.StatusCode != 201 {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		id := resp.Header.Get("X-Request-Id")
		if c.want != "" && id != c.want || c.want == "" && (id == c.sent || len(id) != 36) {
			t.Errorf("sent %q: answered X-Request-Id %q", c.sent, id)
		}
		f.mu.Lock()
		md := f.seen[len(f.seen)-1]
		f.mu.Unlock()
		if got := md.Get("x-request-id"); len(got) != 1 || got[0] != id {
			t.Errorf("sent %q: the call got x-request-id %q, want %q", c.sent, got, id)
		}
		ended := spans.Ended()
		sc := ended[len(ended)-1].SpanContext()
		if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; len(md.Get("traceparent")) != 1 || md.Get("traceparent")[0] != want {
			t.Errorf("the call's traceparent %q, want the HTTP span's %s", md.Get("traceparent"), want)
		}
		if sc.TraceID().String() != parent[3:35] || ended[len(ended)-1].Name() != "POST /v1/payment_intents" {
			t.Errorf("HTTP span %s in trace %s, want POST /v1/payment_intents continuing the traceparent", ended[len(ended)-1].Name(), sc.TraceID())
		}
		lines := log.Lines(t)
		l := lines[len(lines)-1]
		if l["principal_hash"] != auth.PrincipalHash(md.Get(auth.ForwardedPrincipalHeader)[0]) || l["trace_id"] != sc.TraceID().String() || l["span_id"] != sc.SpanID().String() {
			t.Errorf("log line %v, want the principal's hash and the HTTP span's ids", l)
		}
		if strings.Contains(fmtLines(lines), "tok") {
			t.Errorf("the token is logged: %v", l)
		}
	}
}

func fmtLines(lines []map[string]any) string {
	b, _ := json.Marshal(lines)
	return string(b)
}

// A request the face refuses is logged with its caller and the key as
// sent: quoted when it names no key, decoded when it does.
func TestObserved_LogsTheCallerAndTheKeyOfARefusal(t *testing.T) {
	ts, _, log, _, _ := observedAPI(t)
	for _, c := range []struct{ sent, want string }{
		{`"order-100`, `"order-100`}, // no closing quote: refused, shown as sent
		{"caf\xe9", `"caf\xe9"`},     // not printable ASCII: refused, shown quoted
		{`"order-100"`, "order-100"}, // a structured-field string: the key it names
	} {
		before := len(log.Lines(t))
		do(t, "POST", ts.URL+"/v1/payment_intents", "application/json", "{}",
			"Authorization", "Bearer tok", "Idempotency-Key", c.sent)
		lines := log.Lines(t)[before:]
		if len(lines) != 1 || lines[0]["idempotency_key"] != c.want || lines[0]["principal_hash"] != devHash("tok") {
			t.Errorf("key %s: lines %v; want one with idempotency_key %s and the caller's hash", c.sent, lines, c.want)
		}
	}
}

// devHash is the principal's hash dev mode gives token.
func devHash(token string) string {
	p, _ := auth.Dev().Authenticate(token)
	return auth.PrincipalHash(p)
}
