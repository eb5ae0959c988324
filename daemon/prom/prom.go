// Package prom is paymentsd's Prometheus registry. It holds the gRPC
// server's standard metrics (grpc_server_*) and the HTTP face's
// (http_server_*). The idempotency interceptor's, the credential reloads,
// the build's, Go's and the process's are there too.
package prom

import (
	"net/http"
	"runtime"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/daemon/internal/version"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
	"github.com/paymentsd/paymentsd/metrics"
)

// Prom is the registry and the metrics paymentsd feeds.
type Prom struct {
	registry *prometheus.Registry
	// GRPC are the gRPC server's: install its interceptor, and initialize
	// it with the server once its services are registered.
	GRPC *grpcprom.ServerMetrics
	// Idem are the idempotency interceptor's.
	Idem *metrics.Metrics
	// HTTP are the HTTP face's: give them to httpapi.Face.Observe.
	HTTP    *httpapi.Metrics
	reloads *prometheus.CounterVec
}

// New registers the metrics; countRecords counts the idempotency records
// stored, read at each scrape.
func New(countRecords func() (float64, error)) (*Prom, error) {
	p := &Prom{
		registry: prometheus.NewRegistry(),
		GRPC:     grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
	}
	p.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paymentsd_credential_reloads_total",
		Help: "Credential files read again after a change or SIGHUP, by file (api_keys, admin_keys, tls, metrics_token) and result (ok, error: the previous ones stay in use).",
	}, []string{"file", "result"})
	for _, file := range []string{"api_keys", "admin_keys", "tls", "metrics_token"} {
		for _, result := range []string{"ok", "error"} {
			p.reloads.WithLabelValues(file, result) // at 0 from the start, so that rate() sees the first error
		}
	}
	p.registry.MustRegister(p.GRPC, p.reloads, buildInfo(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var err error
	if p.HTTP, err = httpapi.NewMetrics(p.registry); err != nil {
		return nil, err
	}
	p.Idem, err = metrics.New(p.registry, metrics.WithLiveRecords(countRecords))
	return p, err
}

// buildInfo is a gauge of 1 whose labels name the build, for joins and
// for seeing a rollout through.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "paymentsd_build_info",
		Help: "Always 1; the labels name the build: the release, the revision and the Go version.",
		ConstLabels: prometheus.Labels{
			"version":   version.Version,
			"revision":  version.Revision(),
			"goversion": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}

// Reloaded counts a reload of file ("api_keys", "admin_keys", "tls" or
// "metrics_token"); p may be nil (no metrics served).
func (p *Prom) Reloaded(file string, err error) {
	if p == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	p.reloads.WithLabelValues(file, result).Inc()
}

// WatchCertificate exports when the certificate served now expires, for
// an alert well before it does.
func (p *Prom) WatchCertificate(s *tlsreload.Server) {
	p.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paymentsd_tls_certificate_not_after_seconds",
		Help: "When the TLS certificate served now expires, in seconds since the Unix epoch.",
	}, func() float64 { return float64(s.Leaf().NotAfter.Unix()) }))
}

// WatchCRLs exports when each client CRL in force must be replaced, for an
// alert hours before: past it, no client certificate is admitted.
func (p *Prom) WatchCRLs(s *tlsreload.Server) {
	p.registry.MustRegister(crlCollector{s})
}

var crlNextUpdate = prometheus.NewDesc("paymentsd_tls_client_crl_next_update_seconds",
	"The nextUpdate of each client CRL in force, by issuer (the CA's subject), in seconds since the Unix epoch. Past it, no client certificate is admitted.",
	[]string{"issuer"}, nil)

// crlCollector reads the CRLs in force at each scrape.
type crlCollector struct{ s *tlsreload.Server }

func (c crlCollector) Describe(ch chan<- *prometheus.Desc) { ch <- crlNextUpdate }

// Collect exports one series per issuer. Two CAs of one subject have one
// series: the earlier nextUpdate, the first to matter.
func (c crlCollector) Collect(ch chan<- prometheus.Metric) {
	next := map[string]time.Time{}
	for _, crl := range c.s.CRLs() {
		if t, ok := next[crl.Issuer]; !ok || crl.NextUpdate.Before(t) {
			next[crl.Issuer] = crl.NextUpdate
		}
	}
	for issuer, t := range next {
		ch <- prometheus.MustNewConstMetric(crlNextUpdate, prometheus.GaugeValue, float64(t.Unix()), issuer)
	}
}

// WatchCommits exports a group commit's counts: its commits, and the
// writes they carried. Their rates' ratio is the batch, the writes that
// share one fsync. counts is called at each scrape.
func (p *Prom) WatchCommits(counts func() (commits, writes uint64)) {
	p.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "paymentsd_store_commits_total",
			Help: "Write transactions of the bbolt group commit, committed or tried: each is two fsyncs.",
		}, func() float64 { c, _ := counts(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "paymentsd_store_committed_writes_total",
			Help: "Writes the bbolt group commit's commits carried: claims, completions and their units of work.",
		}, func() float64 { _, w := counts(); return float64(w) }))
}

// Handler serves the registry in the Prometheus text format.
func (p *Prom) Handler() http.Handler { return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{}) }
