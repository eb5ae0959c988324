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
)

// prom is paymentsd's Prometheus registry: the gRPC server's standard
// metrics (grpc_server_*), the idempotency interceptor's, and Go's and
// the process's.
type prom struct {
	registry *prometheus.Registry
	grpc     *grpcprom.ServerMetrics
	idem     *metrics.Metrics
}

func newProm(db *backend) (*prom, error) {
	p := &prom{
		registry: prometheus.NewRegistry(),
		grpc:     grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
	}
	p.registry.MustRegister(p.grpc,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	p.idem, err = metrics.New(p.registry, metrics.WithLiveRecords(db.countRecords))
	return p, err
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
