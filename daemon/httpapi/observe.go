package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsd/paymentsd/daemon"
	"github.com/paymentsd/paymentsd/daemon/internal/logattr"
	"github.com/paymentsd/paymentsd/daemon/internal/requestid"
)

// Observe says how the HTTP face is observed beyond its log line, which is
// always written.
type Observe struct {
	// Metrics counts requests and their durations; nil counts nothing.
	Metrics *Metrics
	// Trace starts each request's span (otelhttp's handler, say); nil
	// traces nothing.
	Trace func(http.Handler) http.Handler
}

// Metrics are the HTTP face's Prometheus metrics, kept by client_golang's
// promhttp. Their labels are method, route and code. The route is the
// template, never the path, so that ids do not make series.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_server_requests_total",
			Help: "HTTP/JSON API requests answered, the face's own refusals included, by method, route template (empty when none matched) and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_server_request_duration_seconds",
			Help:    "Time answering HTTP/JSON API requests, by method, route template and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe counts a request answered with code after d.
func (m *Metrics) observe(method, route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	l := []string{metricMethod(method), route, metricCode(code)}
	m.requests.WithLabelValues(l...).Inc()
	m.duration.WithLabelValues(l...).Observe(d.Seconds())
}

// metricMethod is a method as a label: lower case, and "unknown" for any
// other than RFC 9110's, NOTIFY and PATCH, so that clients make no new
// series. It is the value client_golang's promhttp gives, which takes
// each name in upper or lower case.
func metricMethod(m string) string {
	switch m {
	case "GET", "PUT", "HEAD", "POST", "DELETE", "CONNECT", "OPTIONS", "NOTIFY", "TRACE", "PATCH":
		return strings.ToLower(m)
	case "get", "put", "head", "post", "delete", "connect", "options", "notify", "trace", "patch":
		return m
	}
	return "unknown"
}

// metricCode is a status as a label. A handler that never set one answered
// 200, as net/http does.
func metricCode(code int) string {
	if code == 0 {
		code = http.StatusOK
	}
	return strconv.Itoa(code)
}

// reqInfo is what a request's log line says beyond its status and time.
// It is gathered as the request goes: guard fills in the caller and the
// key, and the gRPC call the rest.
type reqInfo struct {
	route     string
	requestID string
	principal string // the hash; "" until known
	key       string // the Idempotency-Key, decoded once it is valid
	outcome   string // the idempotency decision, "" if none
	attempt   string
	intentID  string
	reason    string // the error's ErrorInfo reason
}

type infoKey struct{}

func infoOf(ctx context.Context) *reqInfo {
	if i, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

// Observed wraps h, the API, to observe every request, whether the face
// refuses it or the server answers it. Each is logged in one line, counted
// and traced. Each carries a request id: the one in X-Request-Id if valid,
// or a new one. The id is answered in X-Request-Id and passed to the gRPC
// call.
func Observed(h http.Handler, logger *slog.Logger, o Observe) http.Handler {
	h = observed(h, logger, o.Metrics)
	if o.Trace != nil {
		h = o.Trace(h)
	}
	return h
}

// observed logs and counts each request once it is answered. It runs
// inside the span, so that the line carries the span's ids. One wrapper of
// the ResponseWriter serves the line and the metrics.
func observed(next http.Handler, logger *slog.Logger, metrics *Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		i := &reqInfo{requestID: requestid.Of(r.Header.Values(requestid.Header))}
		w.Header().Set(requestid.Header, i.requestID)
		sw := &statusWriter{ResponseWriter: w}
		ctx := context.WithValue(r.Context(), infoKey{}, i)
		next.ServeHTTP(sw, r.WithContext(ctx))
		d := time.Since(start)
		if i.route == "" { // the gateway did not route it: a refusal, or no route
			i.route = routes.of(r)
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetName(strings.TrimSpace(r.Method + " " + i.route))
			span.SetAttributes(semconv.HTTPRoute(i.route), requestIDAttr.String(i.requestID))
		}
		metrics.observe(r.Method, i.route, sw.code, d)
		logRequest(ctx, logger, r.Method, i, sw.code, d)
	})
}

// logRequest writes a request's line. It passes no caller's pc to the
// handler, which does not print one: runtime.Callers is a cost per line.
func logRequest(ctx context.Context, logger *slog.Logger, method string, i *reqInfo, code int, d time.Duration) {
	if !logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "http", 0)
	rec.AddAttrs(
		slog.String("method", method),
		slog.String("route", i.route),
		slog.Int("status", cmp.Or(code, http.StatusOK)),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.String("request_id", i.requestID),
	)
	if i.principal != "" {
		rec.AddAttrs(slog.String("principal_hash", i.principal))
	}
	if i.key != "" {
		rec.AddAttrs(slog.String("idempotency_key", logattr.Key(i.key)))
	}
	if i.outcome != "" {
		attempt, _ := strconv.ParseUint(i.attempt, 10, 64)
		rec.AddAttrs(slog.String("idempotency", i.outcome), slog.Uint64("attempt", attempt))
	}
	if i.reason != "" {
		rec.AddAttrs(slog.String("reason", i.reason))
	}
	if i.intentID != "" {
		rec.AddAttrs(slog.String("intent_id", i.intentID))
	}
	rec.AddAttrs(TraceAttrs(ctx)...)
	logger.Handler().Handle(ctx, rec)
}

// statusWriter keeps the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestIDAttr is the span attribute of the request id. It lets a trace
// be found from a log line or a client's report.
const requestIDAttr = attribute.Key("http.request.header.x-request-id")

// TraceAttrs are the trace_id and span_id of the span recording in ctx,
// none without one.
func TraceAttrs(ctx context.Context) []slog.Attr {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return nil
	}
	sc := span.SpanContext()
	return []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}

// routeTable names the route template of a request, for logs and metric
// labels. The templates are those of the OpenAPI document, which the
// gateway serves.
type routeTable struct{ mux *http.ServeMux }

var routes = newRouteTable(daemon.OpenAPI)

// newRouteTable reads the paths of an OpenAPI document. Each template is
// matched by any method, so that a 405 names its route too.
func newRouteTable(doc []byte) routeTable {
	var d struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(err) // the embedded document, checked by the tests
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/openapi.json", http.NotFound)
	for path := range d.Paths {
		mux.HandleFunc(path, http.NotFound)
	}
	return routeTable{mux}
}

func (t routeTable) of(r *http.Request) string {
	_, pattern := t.mux.Handler(r)
	return pattern
}
