package main

import (
	"io"
	"net/http"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/metrics"
	"github.com/paymentsd/paymentsd/tlsreload"
)

// prom is paymentsd's Prometheus registry: the gRPC server's standard
// metrics (grpc_server_*), the idempotency interceptor's, and Go's and
// the process's.
type prom struct {
	registry *prometheus.Registry
	grpc     *grpcprom.ServerMetrics
	idem     *metrics.Metrics
	reloads  *prometheus.CounterVec
}

func newProm(db *backend) (*prom, error) {
	p := &prom{
		registry: prometheus.NewRegistry(),
		grpc:     grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
	}
	p.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paymentsd_credential_reloads_total",
		Help: "Credential files read again after a change or SIGHUP, by file (api_keys, tls) and result (ok, error: the previous ones stay in use).",
	}, []string{"file", "result"})
	for _, file := range []string{"api_keys", "tls"} {
		for _, result := range []string{"ok", "error"} {
			p.reloads.WithLabelValues(file, result) // at 0 from the start, so that rate() sees the first error
		}
	}
	p.registry.MustRegister(p.grpc, p.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	p.idem, err = metrics.New(p.registry, metrics.WithLiveRecords(db.countRecords))
	return p, err
}

// reloaded counts a reload of file; p may be nil (no --metrics-listen).
func (p *prom) reloaded(file string, err error) {
	if p == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	p.reloads.WithLabelValues(file, result).Inc()
}

// watchCertificate exports when the certificate served now expires, for
// an alert well before it does.
func (p *prom) watchCertificate(s *tlsreload.Server) {
	p.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paymentsd_tls_certificate_not_after_seconds",
		Help: "When the TLS certificate served now expires, in seconds since the Unix epoch.",
	}, func() float64 { return float64(s.Leaf().NotAfter.Unix()) }))
}

// handler serves the registry in the Prometheus text format.
func (p *prom) handler() http.Handler { return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{}) }

// healthz answers 200 while paymentsd serves and 503 while its store does
// not (or it shuts down), as grpc.health.v1 says, for probes that speak
// only HTTP.
func (m *Main) healthz(w http.ResponseWriter, r *http.Request) {
	resp, err := m.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, "NOT_SERVING", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "SERVING\n")
}
