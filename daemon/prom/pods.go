package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/placement"
)

// Pods is a store over several pods (package pods' Router).
type Pods interface {
	// Health is each pod's state as of its last check: nil while it
	// serves.
	Health() map[string]error
	// Backends are the pods' databases, by pod name.
	Backends() map[string]intents.Backend
	// DirectoryHealth is nil while the placement directory is in touch
	// with etcd.
	DirectoryHealth() error
	// DirectoryStats count what the directory asked of etcd.
	DirectoryStats() placement.Stats
}

// WatchPods exports each pod's state and its PostgreSQL pool, labelled
// pod, and what the placement directory asked of etcd.
func (p *Prom) WatchPods(pods Pods) {
	for name, b := range pods.Backends() {
		if pg, ok := b.(Postgres); ok {
			p.watchPostgres(pg, prometheus.Labels{"pod": name})
		}
		p.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "paymentsd_pod_up",
			Help:        "1 while the pod's database serves, as its last health check found; 0 while its principals are refused.",
			ConstLabels: prometheus.Labels{"pod": name},
		}, func() float64 { return up(pods.Health()[name]) }))
	}
	p.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paymentsd_placement_directory_up",
		Help: "1 while the placement directory is in touch with etcd; 0 while new principals are refused (known ones are served).",
	}, func() float64 { return up(pods.DirectoryHealth()) }))
	for _, c := range []struct {
		name, help string
		read       func(placement.Stats) uint64
	}{
		{"paymentsd_placement_places_total", "Compare-and-sets sent to etcd to place a new principal.", func(s placement.Stats) uint64 { return s.Places }},
		{"paymentsd_placement_resolves_total", "Reads sent to etcd for a principal not in memory.", func(s placement.Stats) uint64 { return s.Resolves }},
		{"paymentsd_placement_failures_total", "Requests to etcd that were not answered.", func(s placement.Stats) uint64 { return s.Failures }},
		{"paymentsd_placement_refused_total", "Unknown principals refused without asking etcd, which had just failed.", func(s placement.Stats) uint64 { return s.Refused }},
	} {
		p.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(c.read(pods.DirectoryStats())) }))
	}
}

// up is 1 for nil, else 0.
func up(err error) float64 {
	if err != nil {
		return 0
	}
	return 1
}
