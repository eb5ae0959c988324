package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// failoverRounds is the number of failovers of the failover tests:
// PAYMENTSD_FAILOVER_ROUNDS, else 1 (make test).
func failoverRounds() int { return max(envInt("PAYMENTSD_FAILOVER_ROUNDS", 1), 1) }

// servingWithin is the promise of a failover: every replica reports
// SERVING within it of the standby's promotion, without a restart.
const servingWithin = 10 * time.Second

// resumeWithin bounds the wait for the replicas' LISTEN connections and
// sweepers on a promoted primary: the notice listener reconnects with a
// backoff of up to 5 s, and the test's sweep interval is 500 ms.
const resumeWithin = 20 * time.Second

// failoverDB is the database of the failover tests.
const failoverDB = "paymentsd"

// sweepScope is the scope of the expired records the failover tests
// write on a promoted primary for the replicas' sweepers to delete: no
// client's principal.
const sweepScope = "failover-test-sweep"

// replicaAppName is replica i's application_name, by which the tests
// find its sessions on the database.
func replicaAppName(i int) string { return fmt.Sprintf("paymentsd-replica-%d", i) }

// failoverRun is what runFailover did and saw.
type failoverRun struct {
	load    *replicaLoad
	found   replicaFindings
	rounds  []failoverRound
	elapsed time.Duration
}

// failoverRound is one kill of the primary and promotion of the standby.
type failoverRound struct {
	killed       time.Time     // when the kill began
	promoted     time.Time     // when the promotion ended
	ackedBefore  int64         // keys answered before the kill
	toServing    time.Duration // promotion to every replica SERVING
	toListening  time.Duration // promotion to every replica LISTENing there
	toSwept      time.Duration // records expired on the promoted primary to none left
	notServingIn time.Duration // kill to every replica NOT_SERVING
}

// TestCrash_Failover_PostgreSQL runs three paymentsd replicas on a
// PostgreSQL primary with a synchronous standby, through a URL naming
// both with target_session_attrs=read-write, under the replica tests'
// load (each new key's create sent to two or three replicas at once, then
// again with the same body until it is answered). The primary is killed
// with SIGKILL, as its machine's loss would, and the standby promoted.
//
// While no primary answers, every replica reports NOT_SERVING; within 10 s
// of the promotion every one reports SERVING again, the same processes,
// each LISTENs for ended claims on the new primary (waiters are woken by
// notices again) and their sweepers delete records expired there. At the
// end every create any client saw acknowledged must be on the new
// primary, each key must have one intent, every stored intent must be a
// key's answer (0 orphans), and every answer must replay unchanged; a key
// whose answer the failover cut off replays or runs once.
//
// Size: failoverRounds (PAYMENTSD_FAILOVER_ROUNDS, else 1: about 15 s;
// about 15 s more each). After each failover but the last, the dead node
// is rebuilt as a synchronous standby of the new primary, on its old
// port, so the URL still names both.
func TestCrash_Failover_PostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	run := runFailover(t, pgtest.Synchronous, true)
	checked := len(run.load.keys) - len(run.found.missing)
	if len(run.found.missing) > 0 {
		t.Errorf("%d acknowledged creates are not on the new primary; want 0", len(run.found.missing))
	}
	var worst time.Duration
	for _, r := range run.rounds {
		worst = max(worst, r.toServing)
	}
	t.Logf("failover test (synchronous standby): %d failovers, %d acknowledged creates checked on the new primary, "+
		"%d keys with two intents, %d orphans, %d changed answers; %.1f s at most from promotion to SERVING; "+
		"%d requests, %d UNAVAILABLE, %d DEADLINE_EXCEEDED, %d ABORTED in use, %d keys whose answer was cut off replayed; %v in all",
		len(run.rounds), checked, len(run.found.twoIntents), len(run.found.orphans), run.load.changed.Load(), worst.Seconds(),
		run.load.requests.Load(), run.load.unavailable.Load(), run.load.deadlines.Load(), run.load.aborted.Load(),
		run.load.answersLost(), run.elapsed.Round(time.Millisecond))
}

// TestFailover_PostgreSQL_AsyncLoss is TestCrash_Failover_PostgreSQL
// with an asynchronous standby, as a measurement rather than a test: it
// counts the creates acknowledged to a client that the failover lost (a
// retry of such a key then runs it again, with a new intent). Set
// PAYMENTSD_ASYNC_FAILOVER=1 to run it, PAYMENTSD_FAILOVER_ROUNDS for more
// failovers in one run.
func TestFailover_PostgreSQL_AsyncLoss(t *testing.T) {
	if os.Getenv("PAYMENTSD_ASYNC_FAILOVER") != "1" {
		t.Skip("a measurement: set PAYMENTSD_ASYNC_FAILOVER=1 to run it")
	}
	run := runFailover(t, pgtest.Asynchronous, false)
	// A lost create was lost by the first failover after its answer
	// (which may arrive a moment after the kill began): its round.
	lost := make([]int, len(run.rounds))
	for key := range run.found.missing {
		at := run.load.keys[key].answeredAt
		for i, r := range run.rounds {
			if at.Before(r.promoted) {
				lost[i]++
				break
			}
		}
	}
	// The pace of acknowledgements at the kill: the creates at risk.
	lastSecond := make([]int, len(run.rounds))
	for _, k := range run.load.keys {
		for i, r := range run.rounds {
			if k.answeredAt.Before(r.killed) && r.killed.Sub(k.answeredAt) <= time.Second {
				lastSecond[i]++
			}
		}
	}
	var per []string
	for i, r := range run.rounds {
		per = append(per, fmt.Sprintf("round %d: %d lost, %d acknowledged in the second before the kill, SERVING %.1f s after the promotion",
			i, lost[i], lastSecond[i], r.toServing.Seconds()))
	}
	t.Logf("async failover measurement: %d failovers, %d acknowledged creates lost (%s); %d keys, %d keys with two intents, %d orphans, "+
		"%d changed answers (the lost keys run again); %v in all",
		len(run.rounds), len(run.found.missing), strings.Join(per, "; "), len(run.load.keys), len(run.found.twoIntents),
		len(run.found.orphans), run.load.changed.Load(), run.elapsed.Round(time.Millisecond))
}

// runFailover runs the failover tests' replicas, load and failovers on a
// pair in mode and the end checks. strict makes each anomaly an error;
// otherwise the first few are logged, and all counted.
func runFailover(t *testing.T, mode pgtest.Replication, strict bool) *failoverRun {
	began := time.Now()
	run := &failoverRun{}
	var anomalies atomic.Int64
	anomaly := func(format string, args ...any) {
		n := anomalies.Add(1)
		switch {
		case strict:
			t.Errorf(format, args...)
		case n <= 10:
			t.Logf("(measured, not failed) "+format, args...)
		}
	}
	p := pgtest.StartPair(t, mode)
	db := p.NewDatabase(t, failoverDB)
	var dbs [3]string
	for i := range dbs {
		dbs[i] = db + "&application_name=" + replicaAppName(i)
	}
	rs := &replicaSet{t: t, dbs: dbs, args: []string{"--db-pool", "8", "--sweep-interval", "500ms"}}
	t.Cleanup(func() {
		if t.Failed() {
			saveReplicaLogs(t, rs)
		}
	})
	for i := range 3 {
		rs.start(i)
	}
	started := rs.daemons()
	run.load = startReplicaLoad(t, rs, anomaly)

	rounds := failoverRounds()
	for round := range rounds {
		time.Sleep(time.Duration(1500+rand.IntN(1000)) * time.Millisecond)
		r := failoverRound{ackedBefore: run.load.answered.Load(), killed: time.Now()}
		p.KillPrimary(t)
		r.notServingIn = waitReplicasHealth(t, started, healthpb.HealthCheckResponse_NOT_SERVING, r.killed, resumeWithin)
		// Still so: the standby, which refuses writes, is no primary to
		// them.
		for i, d := range started {
			if s := healthStatus(t, d); s != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("round %d: replica %d reports %v while no primary answers; want NOT_SERVING", round, i, s)
			}
		}

		p.Promote(t)
		promoted := time.Now()
		r.promoted = promoted
		r.toServing = waitReplicasHealth(t, started, healthpb.HealthCheckResponse_SERVING, promoted, servingWithin)
		for i, d := range rs.daemons() {
			select {
			case <-d.exited:
				t.Fatalf("round %d: replica %d exited: %v\n%s", round, i, d.err, d.stderr())
			default:
			}
			if d != started[i] {
				t.Fatalf("round %d: replica %d was restarted", round, i)
			}
		}
		conn := connectPrimary(t, p)
		r.toListening = waitListeners(t, conn, promoted)
		r.toSwept = waitSwept(t, conn, round)
		conn.Close(context.Background())
		run.rounds = append(run.rounds, r)
		time.Sleep(time.Second) // load on the new primary
		t.Logf("round %d: primary killed with %d keys answered; every replica NOT_SERVING %.1f s after the kill began; standby promoted; "+
			"SERVING after %.1f s, LISTENing there after %.1f s, expired records swept %.1f s after they were written; %d keys answered",
			round, r.ackedBefore, r.notServingIn.Seconds(), r.toServing.Seconds(), r.toListening.Seconds(), r.toSwept.Seconds(),
			run.load.answered.Load())
		if round < rounds-1 {
			p.Rebuild(t)
		}
	}
	run.load.halt()
	run.load.answerAll()
	run.found = run.load.check()
	run.elapsed = time.Since(began)
	return run
}

// waitReplicasHealth waits until every one of ds has reported want, and
// returns the time since began; it fails t when that is longer than limit.
func waitReplicasHealth(t *testing.T, ds []*daemon, want healthpb.HealthCheckResponse_ServingStatus, began time.Time, limit time.Duration) time.Duration {
	t.Helper()
	seen := make([]bool, len(ds))
	for left := len(ds); left > 0; time.Sleep(20 * time.Millisecond) {
		for i, d := range ds {
			if !seen[i] && healthStatus(t, d) == want {
				seen[i] = true
				left--
			}
		}
		if took := time.Since(began); left > 0 && took > limit {
			t.Fatalf("%d of the %d replicas did not report %v within %v", left, len(ds), want, limit)
		}
	}
	return time.Since(began)
}

// connectPrimary connects to the pair's primary, the test's own view of
// the database.
func connectPrimary(t *testing.T, p *pgtest.Pair) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Primary().URL(failoverDB))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// waitListeners waits until every replica has a session on conn's server
// whose last statement was a LISTEN: its listener for ended claims, which
// wakes the waiters of --in-flight-wait. It returns the time since since.
func waitListeners(t *testing.T, conn *pgx.Conn, since time.Time) time.Duration {
	t.Helper()
	names := []string{replicaAppName(0), replicaAppName(1), replicaAppName(2)}
	for {
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(DISTINCT application_name) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = ANY($1) AND query LIKE 'LISTEN %'`, names).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == len(names) {
			return time.Since(since)
		}
		if time.Since(since) > resumeWithin {
			t.Fatalf("%d of the %d replicas LISTEN on the new primary %v after its promotion", n, len(names), resumeWithin)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSwept writes expired idempotency records on conn's server, as if
// written there long ago, and waits until the replicas' sweepers have
// deleted them; it returns how long that took. They are written straight
// into the table: a record of the clients' keys expiring during the test
// would run its key again.
func waitSwept(t *testing.T, conn *pgx.Conn, round int) time.Duration {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, `INSERT INTO idempotency_records
		(scope, key, fingerprint, fingerprint_scheme, state, attempt, claim_token, owner, lease_us, expire_time, result)
		SELECT $1, $2 || i, '\x00', 'test', 2, 1, '\x00', 'failover test', 0, now() - interval '1 hour', '\x00'
		FROM generate_series(1, 10) AS i`, sweepScope, fmt.Sprintf("round-%d-", round))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE scope = $1`, sweepScope).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return time.Since(began)
		}
		if time.Since(began) > resumeWithin {
			t.Fatalf("%d expired records still on the new primary %v after they were written: no replica sweeps there", n, resumeWithin)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
