package prom

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsd/paymentsd/pgstore"
)

// Postgres is a store on PostgreSQL: its pool, and what it has seen of its
// server's replication.
type Postgres interface {
	Pool() *pgxpool.Pool
	Replication() pgstore.Replication
}

// WatchPostgres exports a PostgreSQL store's connection pool's use and
// what it saw of replication, read at each scrape. A pool whose
// connections are all acquired makes every call wait for one: the wait
// shows here before it shows as latency. A failover shows as statements
// refused by a read-only member, and as commits the synchronous standby
// does not confirm.
func (p *Prom) WatchPostgres(db Postgres) {
	p.registry.MustRegister(poolCollector{db.Pool()},
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "paymentsd_pg_read_only_errors_total",
			Help: "Statements refused because the server was read-only: a member demoted, or a standby a pooled connection still reached. Each drops the pool's connections, so that new ones find the primary.",
		}, func() float64 { return float64(db.Replication().ReadOnlyErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "paymentsd_pg_standby_unconfirmed_total",
			Help: "Commits that were to show a synchronous standby has the WAL, and were not confirmed in time: a replay's (not given) or a health probe's.",
		}, func() float64 { return float64(db.Replication().Unconfirmed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "paymentsd_pg_standby_wait_seconds",
			Help: "How long the health probe's commits have waited for the synchronous standby without a confirmation; 0 once one came. Past 5 s the store reports NOT_SERVING.",
		}, func() float64 { return db.Replication().Waiting.Seconds() }))
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
