// Package metrics exposes what the idempotency interceptor does as
// Prometheus metrics. Its Metrics is an interceptor.Observer.
//
// Methods are labelled as go-grpc-middleware's Prometheus provider labels
// them, with grpc_service and grpc_method. So its grpc_server_* series and
// these join on the same labels.
package metrics

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsd/paymentsd/once"
)

// Metrics holds the interceptor's collectors.
type Metrics struct {
	requests    *prometheus.CounterVec
	handler     *prometheus.HistogramVec
	store       *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	inFlight    prometheus.Gauge
	swept       prometheus.Counter
}

// Option tunes New.
type Option func(*options)

type options struct {
	liveRecords func() (float64, error)
}

// WithLiveRecords adds the gauge idempotency_records, read from count at
// each scrape. It is how many records the store holds, live or expired but
// not yet swept. A count that fails leaves the gauge out of that scrape.
func WithLiveRecords(count func() (float64, error)) Option {
	return func(o *options) { o.liveRecords = count }
}

var methodLabels = []string{"grpc_service", "grpc_method"}

// New returns the metrics, registered on reg. That is
// prometheus.DefaultRegisterer or a registry of the embedder's. It fails
// if reg already holds collectors of the same names.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_requests_total",
			Help: "Requests seen by the idempotency interceptor, by method and outcome (fresh, replay, in_flight, mismatch, takeover; none when not deduplicated).",
		}, append(methodLabels, "outcome")),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_handler_seconds",
			Help:    "Time in the handler, for the requests that ran it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, methodLabels),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_store_seconds",
			Help:    "Time in the idempotency store per request: claim and completion.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, methodLabels),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_store_errors_total",
			Help: "Requests answered UNAVAILABLE or DATA_LOSS because the idempotency store failed.",
		}, methodLabels),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_claims_in_flight",
			Help: "Claims whose handler this process is running now.",
		}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_records_swept_total",
			Help: "Expired idempotency records deleted by the sweeper.",
		}),
	}
	collectors := []prometheus.Collector{m.requests, m.handler, m.store, m.storeErrors, m.inFlight, m.swept}
	if o.liveRecords != nil {
		collectors = append(collectors, liveRecords{count: o.liveRecords})
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// splitMethod splits "/package.Service/Method" as go-grpc-middleware does.
func splitMethod(fullMethod string) (service, method string) {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return "unknown", "unknown"
	}
	return service, method
}

// Claimed counts a claim whose handler is about to run as in flight.
func (m *Metrics) Claimed(ctx context.Context, o once.Observation) {
	if o.Outcome.Claimed() {
		m.inFlight.Inc()
	}
}

// Finished counts the request, its times and a failure of the store.
func (m *Metrics) Finished(ctx context.Context, o once.Observation) {
	service, method := splitMethod(o.Operation)
	outcome := o.Outcome.String()
	if o.Outcome == 0 {
		outcome = "none"
	}
	m.requests.WithLabelValues(service, method, outcome).Inc()
	if o.Outcome.Claimed() {
		m.inFlight.Dec()
		m.handler.WithLabelValues(service, method).Observe(o.Handler.Seconds())
	}
	if o.Outcome != 0 || o.Err != nil {
		m.store.WithLabelValues(service, method).Observe(o.Store.Seconds())
	}
	if o.Err != nil {
		m.storeErrors.WithLabelValues(service, method).Inc()
	}
}

// Swept counts records deleted by a sweep.
func (m *Metrics) Swept(n int) { m.swept.Add(float64(n)) }

// liveRecords is the idempotency_records gauge, counted at each scrape.
type liveRecords struct{ count func() (float64, error) }

var liveRecordsDesc = prometheus.NewDesc("idempotency_records",
	"Idempotency records the store holds, live or expired but not yet swept.", nil, nil)

func (liveRecords) Describe(ch chan<- *prometheus.Desc) { ch <- liveRecordsDesc }

func (l liveRecords) Collect(ch chan<- prometheus.Metric) {
	if n, err := l.count(); err == nil {
		ch <- prometheus.MustNewConstMetric(liveRecordsDesc, prometheus.GaugeValue, n)
	}
}
