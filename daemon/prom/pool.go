package prom

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// WatchPool exports a PostgreSQL connection pool's use, read at each
// scrape. A pool whose connections are all acquired makes every call
// wait for one: the wait shows here before it shows as latency.
func (p *Prom) WatchPool(pool *pgxpool.Pool) {
	p.registry.MustRegister(poolCollector{pool})
}

var (
	poolConnectionsDesc = prometheus.NewDesc("paymentsd_pg_pool_connections",
		"PostgreSQL connections of the pool, by state: acquired (in use), idle, constructing.", []string{"state"}, nil)
	poolMaxDesc = prometheus.NewDesc("paymentsd_pg_pool_max_connections",
		"The most connections the pool opens (--db-pool).", nil, nil)
	poolAcquiresDesc = prometheus.NewDesc("paymentsd_pg_pool_acquires_total",
		"Connections acquired from the pool.", nil, nil)
	poolEmptyAcquiresDesc = prometheus.NewDesc("paymentsd_pg_pool_empty_acquires_total",
		"Acquires that found no idle connection, waited for one to open or come back, and got it.", nil, nil)
	poolEmptyWaitDesc = prometheus.NewDesc("paymentsd_pg_pool_empty_acquire_wait_seconds_total",
		"Time waited by the acquires that found no idle connection and then got one, added as each gets it. Acquires given up add nothing: see paymentsd_pg_pool_canceled_acquires_total.", nil, nil)
	poolCanceledDesc = prometheus.NewDesc("paymentsd_pg_pool_canceled_acquires_total",
		"Acquires given up before a connection came: the call's deadline or cancellation.", nil, nil)
)

type poolCollector struct{ pool *pgxpool.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolConnectionsDesc, poolMaxDesc, poolAcquiresDesc, poolEmptyAcquiresDesc, poolEmptyWaitDesc, poolCanceledDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolConnectionsDesc, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(poolConnectionsDesc, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(poolConnectionsDesc, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(poolMaxDesc, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolAcquiresDesc, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolEmptyAcquiresDesc, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolEmptyWaitDesc, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
	ch <- prometheus.MustNewConstMetric(poolCanceledDesc, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
}
