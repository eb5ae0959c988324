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
func (p *Prom) WatchPostgres(db Postgres) { p.watchPostgres(db, nil) }

// watchPostgres is WatchPostgres, its metrics labelled by labels: a pod's
// name.
func (p *Prom) watchPostgres(db Postgres, labels prometheus.Labels) {
	p.registry.MustRegister(newPoolCollector(db.Pool(), labels),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "paymentsd_pg_read_only_errors_total",
			Help:        "Statements refused because the server was read-only: a member demoted, or a standby a pooled connection still reached. Each drops the pool's connections, so that new ones find the primary.",
			ConstLabels: labels,
		}, func() float64 { return float64(db.Replication().ReadOnlyErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "paymentsd_pg_standby_unconfirmed_total",
			Help:        "Commits that were to show a synchronous standby has the WAL, and were not confirmed in time: a replay's (not given) or a health probe's.",
			ConstLabels: labels,
		}, func() float64 { return float64(db.Replication().Unconfirmed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "paymentsd_pg_standby_wait_seconds",
			Help:        "How long the health probe's commits have waited for the synchronous standby without a confirmation; 0 once one came. Past 5 s the store reports NOT_SERVING.",
			ConstLabels: labels,
		}, func() float64 { return db.Replication().Waiting.Seconds() }))
}

// poolCollector reads a pool's statistics at each scrape.
type poolCollector struct {
	pool                                                           *pgxpool.Pool
	connections, max, acquires, emptyAcquires, emptyWait, canceled *prometheus.Desc
}

func newPoolCollector(pool *pgxpool.Pool, labels prometheus.Labels) poolCollector {
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	return poolCollector{pool: pool,
		connections: desc("paymentsd_pg_pool_connections",
			"PostgreSQL connections of the pool, by state: acquired (in use), idle, constructing.", "state"),
		max: desc("paymentsd_pg_pool_max_connections",
			"The most connections the pool opens (--db-pool)."),
		acquires: desc("paymentsd_pg_pool_acquires_total",
			"Connections acquired from the pool."),
		emptyAcquires: desc("paymentsd_pg_pool_empty_acquires_total",
			"Acquires that found no idle connection, waited for one to open or come back, and got it."),
		emptyWait: desc("paymentsd_pg_pool_empty_acquire_wait_seconds_total",
			"Time waited by the acquires that found no idle connection and then got one, added as each gets it. Acquires given up add nothing: see paymentsd_pg_pool_canceled_acquires_total."),
		canceled: desc("paymentsd_pg_pool_canceled_acquires_total",
			"Acquires given up before a connection came: the call's deadline or cancellation."),
	}
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connections, c.max, c.acquires, c.emptyAcquires, c.emptyWait, c.canceled} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.connections, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(c.connections, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(c.connections, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.emptyAcquires, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.emptyWait, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
	ch <- prometheus.MustNewConstMetric(c.canceled, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
}
