package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/wire"
)

// Two replicas on one database answer as one: a create on either is
// replayed by the other, and its key reused for another request is a
// mismatch on both.
func TestPostgres_TwoReplicas_OneTruth(t *testing.T) {
	url := postgresURL(t)
	a, b := start(t, spec{db: url}), start(t, spec{db: url})
	ctx := withCreds("merchant-demo", "order-1001")

	first := a.create(ctx, seedRequest("100000000"))
	if first.err != nil {
		t.Fatalf("create on replica A: %v", first.err)
	}
	id := intentID(first)
	again := b.create(ctx, seedRequest("100000000"))
	if again.err != nil || !again.replayed() {
		t.Fatalf("retry on replica B = %v (replayed %t), want the replay", again.err, again.replayed())
	}
	if got := intentID(again); got != id {
		t.Errorf("replica B replayed intent %s, want %s", got, id)
	}
	for name, d := range map[string]*daemon{"A": a, "B": b} {
		other := d.create(ctx, seedRequest("999000000"))
		if status.Code(other.err) != codes.FailedPrecondition || reason(other.err) != wire.ReasonKeyReused {
			t.Errorf("reused key on replica %s = %v, want FAILED_PRECONDITION %s", name, other.err, wire.ReasonKeyReused)
		}
		if got := d.list(t, "merchant-demo"); len(got) != 1 || got[0].Id != id {
			t.Errorf("replica %s lists %v, want only %s", name, got, id)
		}
	}
}

// While the database is down, paymentsd reports NOT_SERVING and answers
// UNAVAILABLE without running anything; once it is back, SERVING and
// creates work again. The password of its URL never reaches its log.
func TestPostgres_DatabaseDown_NotServingThenBack_PasswordNeverLogged(t *testing.T) {
	c := pgtest.Require(t, pgCluster)
	url := postgresURL(t)
	d := start(t, spec{db: url})
	waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)

	c.Stop(t)
	started := false
	defer func() {
		if !started {
			c.StartAgain(t)
		}
	}()
	waitHealth(t, d, healthpb.HealthCheckResponse_NOT_SERVING)
	ctx, cancel := context.WithTimeout(withCreds("merchant-demo", "while-down"), 20*time.Second)
	defer cancel()
	if a := d.create(ctx, seedRequest("100000000")); status.Code(a.err) != codes.Unavailable {
		t.Errorf("create with the database down = %v, want UNAVAILABLE", a.err)
	}

	c.StartAgain(t)
	started = true
	waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)
	a := d.createSeed("merchant-demo", "while-down", "100000000")
	if a.err != nil || a.replayed() {
		t.Errorf("create after the database came back = %v (replayed %t), want a fresh create", a.err, a.replayed())
	}
	if err := d.stop(t); err != nil {
		t.Errorf("exit: %v", err)
	}
	if log := d.stderr(); strings.Contains(log, pgtest.Password) {
		t.Errorf("the database password is in the log:\n%s", log)
	}
}

// A wrong password, or no database, fails at start with a message that
// says so and does not contain the password.
func TestPostgres_BadURL_FailsAtStartWithoutPassword(t *testing.T) {
	url := postgresURL(t)
	wrong := strings.Replace(url, pgtest.Password, "wrong-secret-xyzzy", 1)
	d := start(t, spec{db: wrong, noWait: true})
	d.exitCode(t, 30*time.Second) // a wrong password fails at start
	log := d.stderr()
	if d.err == nil || !strings.Contains(log, "password authentication failed") || strings.Contains(log, "xyzzy") {
		t.Errorf("exit %v, log:\n%s\nwant a failure naming the password check, without the password", d.err, log)
	}
}

// The libpq environment variables fill in what the URL leaves out, as pgx
// reads them: here the password, from PGPASSWORD.
func TestPostgres_PasswordFromEnvironment(t *testing.T) {
	url := strings.Replace(postgresURL(t), ":"+pgtest.Password+"@", "@", 1)
	if strings.Contains(url, pgtest.Password) {
		t.Fatalf("URL %s still has the password", url)
	}
	t.Setenv("PGPASSWORD", pgtest.Password) // the daemon inherits the environment
	d := start(t, spec{db: url})
	if a := d.createSeed("merchant-demo", "env-password", "100000000"); a.err != nil {
		t.Fatalf("create: %v", a.err)
	}
}

// Health means paymentsd's tables answer, not only the database: with the
// intents table renamed, every create would fail, and paymentsd reports
// NOT_SERVING; with it back, SERVING again, without a restart.
func TestPostgres_TableRenamed_NotServingThenBack(t *testing.T) {
	url := postgresURL(t)
	d := start(t, spec{db: url})
	waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)
	conn := pgtest.Connect(t, url)
	exec := func(sql string) {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER TABLE payment_intents RENAME TO payment_intents_moved`)
	waitHealth(t, d, healthpb.HealthCheckResponse_NOT_SERVING)
	exec(`ALTER TABLE payment_intents_moved RENAME TO payment_intents`)
	waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)
	if a := d.createSeed("merchant-demo", "after-rename", "100000000"); a.err != nil {
		t.Errorf("a create with the table back: %v", a.err)
	}
}

// The URL's settings are honoured: with search_path the tables live in
// that schema, not in public, and with pool_max_conns=3 a burst of 30
// concurrent creates opens at most 3 pooled connections (and the
// listener's), where --db-pool's default would open 20.
func TestPostgres_URLSettings_SchemaAndPoolSize(t *testing.T) {
	url := postgresURL(t)
	ctx := context.Background()
	conn := pgtest.Connect(t, url)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA paymentsd`); err != nil {
		t.Fatal(err)
	}
	d := start(t, spec{db: url + "&search_path=paymentsd&pool_max_conns=3"})
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			if a := d.createSeed("merchant-demo", fmt.Sprintf("burst-%d", i), "100000000"); a.err != nil {
				t.Errorf("create %d: %v", i, a.err)
			}
		})
	}
	wg.Wait()
	var inSchema, inPublic *string
	var conns int
	err := conn.QueryRow(ctx, `SELECT to_regclass('paymentsd.payment_intents')::text, to_regclass('public.idempotency_records')::text,
		(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid())`).Scan(&inSchema, &inPublic, &conns)
	if err != nil {
		t.Fatal(err)
	}
	if inSchema == nil || inPublic != nil {
		t.Errorf("tables in paymentsd: %v, in public: %v; want paymentsd alone", inSchema != nil, inPublic != nil)
	}
	if conns > 4 {
		t.Errorf("%d connections to the database after a burst of 30 creates, want at most 4 (pool_max_conns=3, and the listener)", conns)
	}
	if got := len(d.list(t, "merchant-demo")); got != 30 {
		t.Errorf("%d intents, want 30", got)
	}
}
