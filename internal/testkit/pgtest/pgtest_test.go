package pgtest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A commit survives a crash restart and an open transaction does not; the
// database and its URL stay the same across it.
func TestRestart_CommittedKeptOpenTransactionLost(t *testing.T) {
	c := pgtest.Require(t, cluster)
	url := c.NewDatabase(t, pgtest.DatabaseName(t.Name()))
	if again := c.NewDatabase(t, pgtest.DatabaseName(t.Name())); again != url {
		t.Fatalf("second NewDatabase: %s, want %s", again, url)
	}
	if !strings.Contains(url, "@"+c.Addr()+"/") || !strings.HasSuffix(url, "?sslmode=disable") {
		t.Fatalf("URL %s: want host %s and sslmode=disable", url, c.Addr())
	}

	conn := pgtest.Connect(t, url)
	exec(t, conn, "CREATE TABLE t (v int)")
	exec(t, conn, "INSERT INTO t VALUES (1)")
	open := pgtest.Connect(t, url)
	exec(t, open, "BEGIN")
	exec(t, open, "INSERT INTO t VALUES (2)")

	c.Restart(t)

	if _, err := open.Exec(context.Background(), "COMMIT"); err == nil {
		t.Fatal("COMMIT on a connection from before the restart succeeded")
	}
	if n := count(t, pgtest.Connect(t, url)); n != 1 {
		t.Fatalf("after restart: %d rows, want 1 (the committed one)", n)
	}
}

// A frozen server does not answer; killed with SIGKILL, postmaster and
// children, it starts again on its data directory (recovering from its
// WAL) with its commits.
func TestFreezeKill_StartAgain_CommittedKept(t *testing.T) {
	c := pgtest.Require(t, cluster)
	url := c.NewDatabase(t, pgtest.DatabaseName(t.Name()))
	conn := pgtest.Connect(t, url)
	exec(t, conn, "CREATE TABLE t (v int)")
	exec(t, conn, "INSERT INTO t VALUES (1)")
	c.Freeze(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil || ctx.Err() == nil {
		t.Fatalf("a frozen server answered: %v", err)
	}
	c.Kill(t)
	c.StartAgain(t)
	if n := count(t, pgtest.Connect(t, url)); n != 1 {
		t.Fatalf("after the kill: %d rows, want 1", n)
	}
}

// The password in the URL is checked over TCP: a wrong one is refused.
func TestPasswordChecked(t *testing.T) {
	c := pgtest.Require(t, cluster)
	url := strings.Replace(c.URL("postgres"), pgtest.Password, "wrong", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connected with a wrong password")
	}
}

func TestDatabaseName(t *testing.T) {
	a, b := pgtest.DatabaseName("TestX/sub case"), pgtest.DatabaseName("TestX/sub-case")
	if a == b || a != pgtest.DatabaseName("TestX/sub case") {
		t.Fatalf("names %q and %q: want distinct and deterministic", a, b)
	}
	long := pgtest.DatabaseName(strings.Repeat("é-x", 100))
	for _, n := range []string{a, b, long, pgtest.DatabaseName("")} {
		if len(n) > 63 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			t.Fatalf("DatabaseName gave %q: not a valid short name", n)
		}
	}
}

// port is the server port conn is connected to: which node of a pair.
func port(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var p int
	if err := conn.QueryRow(context.Background(), "SELECT current_setting('port')::int").Scan(&p); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}

// A row committed on the primary of a synchronous pair is on the standby
// once the primary is killed and the standby promoted; the pair's URL
// then reaches the promoted node, writable. Rebuilt from it, the killed
// node follows it and takes over in turn, with both rows.
func TestPair_Synchronous_CommittedSurvivesFailover(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Synchronous)
	url := p.NewDatabase(t, "failover")
	first, second := p.Primary(), p.Standby()
	if !strings.Contains(url, first.Addr()+","+second.Addr()+"/") || !strings.Contains(url, "target_session_attrs=read-write") {
		t.Fatalf("URL %s: want both nodes and target_session_attrs=read-write", url)
	}
	conn := pgtest.Connect(t, url)
	if got := port(t, conn); !strings.HasSuffix(first.Addr(), ":"+got) {
		t.Fatalf("the URL reached port %s, want the primary %s", got, first.Addr())
	}
	var syncState string
	if err := conn.QueryRow(context.Background(), "SELECT sync_state FROM pg_stat_replication").Scan(&syncState); err != nil || syncState != "sync" {
		t.Fatalf("the standby's sync_state = %q, %v; want sync", syncState, err)
	}
	exec(t, conn, "CREATE TABLE t (v int)")
	exec(t, conn, "INSERT INTO t VALUES (1)")

	p.KillPrimary(t)
	p.Promote(t)
	if p.Primary() != second || p.Standby() != first {
		t.Fatal("after Promote, Primary is not the promoted node")
	}
	conn = pgtest.Connect(t, url)
	if got := port(t, conn); !strings.HasSuffix(second.Addr(), ":"+got) {
		t.Fatalf("after the failover the URL reached port %s, want the promoted %s", got, second.Addr())
	}
	if n := count(t, conn); n != 1 {
		t.Fatalf("after the failover: %d rows, want 1 (the committed one)", n)
	}
	exec(t, conn, "INSERT INTO t VALUES (2)")

	p.Rebuild(t)
	p.KillPrimary(t)
	p.Promote(t)
	conn = pgtest.Connect(t, url)
	if got := port(t, conn); !strings.HasSuffix(first.Addr(), ":"+got) {
		t.Fatalf("after the second failover the URL reached port %s, want the rebuilt %s", got, first.Addr())
	}
	if n := count(t, conn); n != 2 {
		t.Fatalf("after the second failover: %d rows, want 2", n)
	}
}

// An asynchronous pair's standby streams without the primary waiting for
// it, and a promoted one accepts writes.
func TestPair_Asynchronous_Streams(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Asynchronous)
	conn := pgtest.Connect(t, p.NewDatabase(t, "async"))
	var syncState string
	if err := conn.QueryRow(context.Background(), "SELECT sync_state FROM pg_stat_replication").Scan(&syncState); err != nil || syncState != "async" {
		t.Fatalf("the standby's sync_state = %q, %v; want async", syncState, err)
	}
	p.KillPrimary(t)
	p.Promote(t)
	exec(t, pgtest.Connect(t, p.URL("async")), "CREATE TABLE t (v int)")
}
