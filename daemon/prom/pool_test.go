package prom_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsd/paymentsd/daemon/prom"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// postgres is a store's pool with what it saw of replication.
type postgres struct {
	pool *pgxpool.Pool
	repl pgstore.Replication
}

func (p postgres) Pool() *pgxpool.Pool              { return p.pool }
func (p postgres) Replication() pgstore.Replication { return p.repl }

// A pool of one connection on a real PostgreSQL: its first acquire opens
// the connection, a second gives up at its deadline, and a third waits
// until the first comes back. The scrape tells each.
func TestProm_WatchPostgres(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.Require(t, cluster).NewDatabase(t, "prom_pool"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, err := prom.New(func() (float64, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	p.WatchPostgres(postgres{pool, pgstore.Replication{ReadOnlyErrors: 3, Unconfirmed: 2, Waiting: 1500 * time.Millisecond}})
	wantRepl := []string{
		`paymentsd_pg_read_only_errors_total 3`,
		`paymentsd_pg_standby_unconfirmed_total 2`,
		`paymentsd_pg_standby_wait_seconds 1.5`,
	}
	var gotRepl []string
	for _, prefix := range []string{"paymentsd_pg_read_only_", "paymentsd_pg_standby_"} {
		gotRepl = append(gotRepl, scrape(t, p, prefix)...)
	}
	if fmt.Sprint(gotRepl) != fmt.Sprint(wantRepl) {
		t.Errorf("replication:\n%s\nwant\n%s", strings.Join(gotRepl, "\n"), strings.Join(wantRepl, "\n"))
	}

	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := pool.Acquire(deadline); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an acquire from a pool whose one connection is held: %v, want its deadline", err)
	}
	want := []string{
		`paymentsd_pg_pool_connections{state="acquired"} 1`,
		`paymentsd_pg_pool_connections{state="constructing"} 0`,
		`paymentsd_pg_pool_connections{state="idle"} 0`,
	}
	if got := scrape(t, p, "paymentsd_pg_pool_connections{"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("while held:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		held.Release()
	}()
	waited, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited.Release()

	want = []string{
		`paymentsd_pg_pool_acquires_total 2`,
		`paymentsd_pg_pool_canceled_acquires_total 1`,
		`paymentsd_pg_pool_connections{state="acquired"} 0`,
		`paymentsd_pg_pool_connections{state="constructing"} 0`,
		`paymentsd_pg_pool_connections{state="idle"} 1`,
		`paymentsd_pg_pool_empty_acquires_total 2`, // the first opened the connection; the third waited for it
		`paymentsd_pg_pool_max_connections 1`,
	}
	var got []string
	for _, l := range scrape(t, p, "paymentsd_pg_pool_") {
		if !strings.HasPrefix(l, "paymentsd_pg_pool_empty_acquire_wait_seconds_total ") {
			got = append(got, l)
			continue
		}
		if s, err := strconv.ParseFloat(strings.Fields(l)[1], 64); err != nil || s <= 0 {
			t.Errorf("%s: want the time the second acquire waited", l)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
