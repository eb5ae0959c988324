package main

import (
	"os"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// movedWithin bounds how long replicas take to leave an old primary left
// running after its synchronous standby was promoted: a probe's commit
// stalls for 5 s, then new connections prefer the other host. Under a
// loaded CI machine a replica whose pool the stalled commits fill may not
// see the stall until the next probe finds a connection: about 30 s was
// seen, 10 s alone.

const movedWithin = 60 * time.Second

// TestFailover_PostgreSQL_OldPrimaryLeftRunning promotes the synchronous
// standby while the old primary keeps running, writable and first in the
// URL: nothing fences it, as when the leader's Patroni dies and no
// watchdog stops its PostgreSQL. Three replicas run under load with
// duplicates across them. The old primary's commits wait for a standby
// that has gone. Calls caught there run out of time (--handler-timeout
// 5s) and their retries find the new primary. At last the old primary is
// fenced and rebuilt from the new one, as pg_rewind would, which discards
// what it kept only locally.
//
// No answer may come from the old primary's local commits: every create
// any client saw acknowledged must be on the new primary, with one intent
// per key and no orphan. Before paymentsd stopped cancelling such waits
// and proving what it replays, replicas stayed on the old primary and
// answered from commits the new primary never had.
func TestFailover_PostgreSQL_OldPrimaryLeftRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	began := time.Now()
	p := pgtest.StartPair(t, pgtest.Synchronous)
	rs := startReplicasOn(t, p.NewDatabase(t, failoverDB), "--handler-timeout", "5s")
	started := rs.daemons()
	load := startReplicaLoad(t, rs, nil)
	time.Sleep(2 * time.Second)

	old := p.Primary()
	ackedBefore := load.answered.Load()
	p.Promote(t) // the old primary runs on
	promoted := time.Now()
	conn := connectPrimary(t, p)
	toListening, moved := waitUntil(promoted, movedWithin, everyReplicaListens(t, conn))
	if !moved {
		t.Errorf("not every replica LISTENs on the new primary %v after its promotion, the old one left running", movedWithin)
	}
	toServing, serving := waitUntil(time.Now(), movedWithin, everyReplicaReports(t, started, healthpb.HealthCheckResponse_SERVING))
	if !serving {
		t.Errorf("not every replica reports SERVING %v after it listens on the new primary", movedWithin)
	}
	// Calls caught on the old primary run out of time and are retried.
	time.Sleep(8 * time.Second)
	old.Kill(t) // fenced at last
	p.Rebuild(t)
	time.Sleep(time.Second)

	load.halt()
	load.answerAll()
	found := load.check()
	if len(found.missing) > 0 {
		t.Errorf("%d acknowledged creates are not on the new primary; want 0", len(found.missing))
	}
	bin := "this build"
	if b := os.Getenv("PAYMENTSD_TEST_BINARY"); b != "" {
		bin = b
	}
	t.Logf("old primary left running (%s): %d keys answered before the promotion; every replica LISTENs on the new primary %.1f s after it, SERVING %.1f s later; "+
		"%d keys, %d acknowledged creates lost, %d keys with two intents, %d orphans, %d changed answers; "+
		"%d requests, %d UNAVAILABLE, %d DEADLINE_EXCEEDED, %d ABORTED in use; %v in all",
		bin, ackedBefore, toListening.Seconds(), toServing.Seconds(),
		len(load.keys), len(found.missing), len(found.twoIntents), len(found.orphans), load.changed.Load(),
		load.requests.Load(), load.unavailable.Load(), load.deadlines.Load(), load.aborted.Load(), time.Since(began).Round(time.Millisecond))
}
