package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsd/paymentsd/daemon/internal/connlimit"
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
			"call_evicted (a call not yet sent its request, for a new one), answer_evicted (a connection whose "+
			"answers waited for a window its client did not grant, for a new call), unread_refused (a call on a "+
			"connection over its unread bytes), unread_closed (a connection over its unread bytes past the grace, "+
			"or the largest with the server over its own), slow_reader_evicted (a connection whose write was blocked, "+
			"for a new one), write_timeout (an HTTP answer not written in time), flow_control (a window past 2^31-1), anonymous_limit (a call that needs no credential, their slots all taken).",
		[]string{"listener", "reason"}, nil)
	callsDesc = prometheus.NewDesc("paymentsd_grpc_calls_in_progress",
		"gRPC calls in progress, the HTTP face's among them: from their headers until their answers have left.", nil, nil)
	maxCallsDesc = prometheus.NewDesc("paymentsd_grpc_max_calls",
		"The most gRPC calls in progress at once (--max-calls).", nil, nil)
	leavingDesc = prometheus.NewDesc("paymentsd_grpc_calls_leaving",
		"gRPC calls in progress whose handlers are done and whose answers have not yet been written to their connections.", nil, nil)
	unreadDesc = prometheus.NewDesc("paymentsd_grpc_unread_bytes",
		"Bytes of gRPC answers handlers wrote that are not yet written to their connections: their clients have not read them.", nil, nil)
	maxUnreadDesc = prometheus.NewDesc("paymentsd_grpc_max_unread_bytes",
		"The most bytes of unread gRPC answers, in all (--grpc-max-unread-bytes) and on one connection "+
			"(--grpc-max-unread-bytes-per-connection).", []string{"scope"}, nil)
)

type limitsCollector struct {
	listeners map[string]*connlimit.Listener
	refusals  []*connlimit.Refusals
	calls     *connlimit.Calls
}

func (c limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connectionsDesc, maxConnectionsDesc, refusalsDesc, callsDesc, maxCallsDesc, leavingDesc, unreadDesc, maxUnreadDesc} {
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
	ch <- prometheus.MustNewConstMetric(leavingDesc, prometheus.GaugeValue, float64(c.calls.Leaving()))
	ch <- prometheus.MustNewConstMetric(unreadDesc, prometheus.GaugeValue, float64(c.calls.Unsent()))
	b := c.calls.Bounds()
	ch <- prometheus.MustNewConstMetric(maxUnreadDesc, prometheus.GaugeValue, float64(b.Total), "total")
	ch <- prometheus.MustNewConstMetric(maxUnreadDesc, prometheus.GaugeValue, float64(b.PerConnection), "connection")
}
