package pgtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

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

	conn := connect(t, url)
	exec(t, conn, "CREATE TABLE t (v int)")
	exec(t, conn, "INSERT INTO t VALUES (1)")
	open := connect(t, url)
	exec(t, open, "BEGIN")
	exec(t, open, "INSERT INTO t VALUES (2)")

	c.Restart(t)

	if _, err := open.Exec(context.Background(), "COMMIT"); err == nil {
		t.Fatal("COMMIT on a connection from before the restart succeeded")
	}
	if n := count(t, connect(t, url)); n != 1 {
		t.Fatalf("after restart: %d rows, want 1 (the committed one)", n)
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
