package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsd/paymentsd/internal/connlimit"
)

// WatchLimits exports the listeners' connections and refusals, and the
// gRPC calls in progress, read at each scrape.
func (p *Prom) WatchLimits(listeners map[string]*connlimit.Listener, refusals []*connlimit.Refusals, calls *connlimit.Calls) {
	p.registry.MustRegister(limitsCollector{listeners, refusals, calls})
}

var (
	connectionsDesc = prometheus.NewDesc("paymentsd_listener_connections",
		"Connections open on a listener (grpc, http, metrics, console).", []string{"listener"}, nil)
	maxConnectionsDesc = prometheus.NewDesc("paymentsd_listener_max_connections",
		"The most connections a listener holds at once (--max-connections).", []string{"listener"}, nil)
	refusalsDesc = prometheus.NewDesc("paymentsd_listener_refusals_total",
		"What a listener's limits refused or closed, by reason: connection_limit (a new connection, all busy), "+
			"idle_evicted (an idle connection, for a new one), accept_error, handshake (TLS), preface (not HTTP/2), "+
			"header_timeout (an unfinished header block), call_limit (a call, every slot handling one), "+
			"call_evicted (a call not yet sent its request, for a new one).",
		[]string{"listener", "reason"}, nil)
	callsDesc = prometheus.NewDesc("paymentsd_grpc_calls_in_progress",
		"gRPC calls in progress, the HTTP face's among them.", nil, nil)
	maxCallsDesc = prometheus.NewDesc("paymentsd_grpc_max_calls",
		"The most gRPC calls in progress at once (--max-calls).", nil, nil)
)

type limitsCollector struct {
	listeners map[string]*connlimit.Listener
	refusals  []*connlimit.Refusals
	calls     *connlimit.Calls
}

func (c limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connectionsDesc, maxConnectionsDesc, refusalsDesc, callsDesc, maxCallsDesc} {
		ch <- d
	}
}

func (c limitsCollector) Collect(ch chan<- prometheus.Metric) {
	for name, l := range c.listeners {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(l.Open()), name)
		ch <- prometheus.MustNewConstMetric(maxConnectionsDesc, prometheus.GaugeValue, float64(l.Max()), name)
	}
	for _, rs := range c.refusals {
		for _, r := range connlimit.Reasons {
			ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(rs.Count(r)), rs.Listener(), string(r))
		}
	}
	ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.GaugeValue, float64(c.calls.Active()))
	ch <- prometheus.MustNewConstMetric(maxCallsDesc, prometheus.GaugeValue, float64(c.calls.Max()))
}
