// Package metrics exposes what the idempotency interceptor and the gRPC
// server do as Prometheus metrics. Its Metrics is an interceptor.Observer.
package metrics

import (
	"context"
	"net/http"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paymentsd/paymentsd/interceptor"
)

// Metrics holds the collectors, in a registry of their own.
type Metrics struct {
	registry *prometheus.Registry
	// GRPC is the standard gRPC server metrics (grpc_server_*): chain its
	// UnaryServerInterceptor first and call its InitializeMetrics.
	GRPC *grpcprom.ServerMetrics

	requests *prometheus.CounterVec
	handler  *prometheus.HistogramVec
	store    *prometheus.HistogramVec
	inFlight prometheus.Gauge
	swept    prometheus.Counter
}

// New returns the metrics, registered with process and Go runtime metrics.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		GRPC:     grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_requests_total",
			Help: "Requests seen by the idempotency interceptor, by method and outcome (fresh, replay, in_flight, mismatch, takeover; none when not deduplicated).",
		}, []string{"method", "outcome"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_handler_seconds",
			Help:    "Time in the handler, for the requests that ran it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_store_seconds",
			Help:    "Time in the idempotency store per request: claim and completion.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_claims_in_flight",
			Help: "Claims whose handler this process is running now.",
		}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_records_swept_total",
			Help: "Expired idempotency records deleted by the sweeper.",
		}),
	}
	m.registry.MustRegister(m.GRPC, m.requests, m.handler, m.store, m.inFlight, m.swept,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Claimed counts a claim whose handler is about to run as in flight.
func (m *Metrics) Claimed(ctx context.Context, o interceptor.Observation) {
	if o.Outcome.Claimed() {
		m.inFlight.Inc()
	}
}

// Finished counts the request and its times.
func (m *Metrics) Finished(ctx context.Context, o interceptor.Observation) {
	outcome := o.Outcome.String()
	if o.Outcome == 0 {
		outcome = "none"
	}
	m.requests.WithLabelValues(o.FullMethod, outcome).Inc()
	if o.Outcome.Claimed() {
		m.inFlight.Dec()
		m.handler.WithLabelValues(o.FullMethod).Observe(o.Handler.Seconds())
	}
	if o.Outcome != 0 {
		m.store.WithLabelValues(o.FullMethod).Observe(o.Store.Seconds())
	}
}

// Swept counts records deleted by a sweep.
func (m *Metrics) Swept(n int) { m.swept.Add(float64(n)) }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
