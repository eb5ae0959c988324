package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/testkit/patroni"
)

// patroniServingWithin bounds the time from a fault to every replica
// serving from the leader again: Patroni's TTL (10 s) and loop, the
// promotion, and the replicas' 5 s to give up on an old primary. It is
// a liveness bound for a loaded machine, not a figure: make crashtest
// measured 24.8 s at the median and 77.6 s at worst beside CI's tests.
const patroniServingWithin = 150 * time.Second

// A patroniFault is one fault of a Patroni cluster's leader, l.
type patroniFault struct {
	name string
	// do faults the cluster. It returns what ends the fault once a new
	// leader, if any, serves (nil if nothing does).
	do func(ctx context.Context, c *patroni.Cluster, l *patroni.Member) (end func() error, err error)
	// newLeader: the fault takes another member to lead.
	newLeader bool
}

var (
	// The leader's Patroni dies and no watchdog stops its PostgreSQL,
	// which stays writable. Its commits wait for a standby that is
	// promoted; its Patroni, started again later, rewinds it.
	leaderPatroniKilled = patroniFault{"leader's Patroni killed, its PostgreSQL left running", func(_ context.Context, _ *patroni.Cluster, l *patroni.Member) (func() error, error) {
		return l.StartPatroni, l.KillPatroni()
	}, true}
	// The leader's PostgreSQL crashes; its Patroni restarts it, or
	// another member takes over.
	leaderPostgresKilled = patroniFault{"leader's PostgreSQL killed", func(_ context.Context, _ *patroni.Cluster, l *patroni.Member) (func() error, error) {
		return nil, l.KillPostgres()
	}, false}
	switchover = patroniFault{"patronictl switchover", func(ctx context.Context, c *patroni.Cluster, _ *patroni.Member) (func() error, error) {
		return nil, c.Switchover(ctx, "")
	}, true}
	// The leader's machine stops past the TTL, then goes on, its
	// PostgreSQL still the primary it was. Its Patroni is started afresh
	// rather than woken, and demotes it: Debian 12's Patroni 3.0.2, woken,
	// may take the leader key back from the member promoted meanwhile and
	// throw that member's commits away (patroni/patroni#2689, fixed in
	// 3.0.3), a loss no client of PostgreSQL can prevent.
	leaderPaused = patroniFault{"leader paused past the TTL", func(ctx context.Context, c *patroni.Cluster, l *patroni.Member) (func() error, error) {
		if err := l.Pause(); err != nil {
			return nil, err
		}
		if _, err := c.WaitLeader(ctx, l.Name()); err != nil {
			l.Resume()
			return nil, err
		}
		if err := l.KillPatroni(); err != nil {
			return nil, err
		}
		return l.StartPatroni, l.Resume()
	}, true}
	etcdMemberKilled = patroniFault{"one etcd member killed", func(ctx context.Context, c *patroni.Cluster, _ *patroni.Member) (func() error, error) {
		e, err := c.EtcdLeader(ctx)
		if err != nil {
			return nil, err
		}
		return e.Start, e.Kill()
	}, false}
)

// patroniSchedule is the faults of TestCrash_Patroni, in turn. make test
// runs each kind once; PAYMENTSD_PATRONI_ROUNDS=crashtest runs 10 leader
// kills (its Patroni or its PostgreSQL, in turn), 3 switchovers and 3
// pauses past the TTL, and one etcd member killed.
func patroniSchedule() []patroniFault {
	short := []patroniFault{leaderPatroniKilled, leaderPostgresKilled, switchover, leaderPaused, etcdMemberKilled}
	if os.Getenv("PAYMENTSD_PATRONI_ROUNDS") != "crashtest" {
		return short
	}
	var s []patroniFault
	for i := range 10 {
		s = append(s, []patroniFault{leaderPatroniKilled, leaderPostgresKilled}[i%2])
		if i%3 == 1 {
			s = append(s, switchover, leaderPaused)
		}
	}
	return append(s, etcdMemberKilled)
}

// TestCrash_Patroni runs three paymentsd replicas under load (duplicates
// across them) on a Patroni cluster of three PostgreSQL members in
// synchronous mode strict, with etcd, through the multi-host URL with
// target_session_attrs=read-write: no replica knows of Patroni. It faults
// the cluster in turn (patroniSchedule). After each fault every replica
// serves from the leader again, the same process, within
// patroniServingWithin; etcd losing a member changes nothing for them.
// Then, with strict mode, both standbys are stopped: a create is not
// acknowledged and health is NOT_SERVING; once they are back it is.
//
// At the end every create any client saw acknowledged replays unchanged,
// no key has two intents and no intent is an orphan.
func TestCrash_Patroni(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	began := time.Now()
	c := patroni.Start(t, patroni.Options{})
	rs := startReplicasOn(t, c.NewDatabase(t, failoverDB))
	started := rs.daemons()
	load := startReplicaLoad(t, rs, nil)

	var lines []string
	var worst time.Duration
	var serving []time.Duration
	for round, f := range patroniSchedule() {
		time.Sleep(2 * time.Second) // load on the leader
		took := patroniRound(t, c, started, f)
		serving = append(serving, took)
		worst = max(worst, took)
		lines = append(lines, fmt.Sprintf("%d %s: every replica serving from the leader %.1f s after", round, f.name, took.Seconds()))
		t.Logf("round %s; %d keys answered", lines[len(lines)-1], load.answered.Load())
	}
	strictNoStandby(t, c, started)

	load.halt()
	load.answerAll()
	found := load.check()
	if len(found.missing) > 0 {
		t.Errorf("%d acknowledged creates are not stored; want 0", len(found.missing))
	}
	t.Logf("Patroni: %d faults (%s); serving again in %.1f s at the median, %.1f s at worst; %d keys, %d acknowledged creates lost, "+
		"%d keys with two intents, %d orphans, %d changed answers; %d requests, %d UNAVAILABLE, %d DEADLINE_EXCEEDED, %d ABORTED in use; %v in all",
		len(serving), strings.Join(lines, "; "), medianDuration(serving).Seconds(), worst.Seconds(), len(load.keys), len(found.missing),
		len(found.twoIntents), len(found.orphans), load.changed.Load(), load.requests.Load(), load.unavailable.Load(),
		load.deadlines.Load(), load.aborted.Load(), time.Since(began).Round(time.Second))
}

// patroniRound faults c with f and waits until every replica of ds
// serves from the leader: it LISTENs there for ended claims and reports
// SERVING. It ends the fault and waits until the cluster is healthy
// again. It returns the time from the fault to serving.
func patroniRound(t *testing.T, c *patroni.Cluster, ds []*daemon, f patroniFault) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	faulted := time.Now()
	end, err := f.do(ctx, c, old)
	if err != nil {
		t.Fatalf("%s: %v\n%s", f.name, err, c.LogTail(40))
	}
	if f.newLeader {
		if _, err := c.WaitLeader(ctx, old.Name()); err != nil {
			t.Fatalf("%s: %v\n%s", f.name, err, c.LogTail(40))
		}
	}
	took, ok := waitUntil(faulted, patroniServingWithin, servingFrom(t, c, ds))
	if !ok {
		t.Fatalf("%s: not every replica serves from the leader %v after the fault\n%s", f.name, patroniServingWithin, c.LogTail(40))
	}
	if f.name == etcdMemberKilled.name {
		stillServing(t, ds, 5*time.Second)
	}
	if end != nil {
		if err := end(); err != nil {
			t.Fatalf("%s: ending it: %v", f.name, err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("after %s: %v\n%s", f.name, err, c.LogTail(40))
	}
	for i, d := range ds {
		d.wantRunning(t, fmt.Sprintf("(replica %d, after %s)", i, f.name))
	}
	return took
}

// servingFrom is a condition for waitUntil: every replica of ds LISTENs
// on the PostgreSQL of c's leader, whichever it is now, and reports
// SERVING.
func servingFrom(t *testing.T, c *patroni.Cluster, ds []*daemon) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		leader, err := c.Leader(ctx)
		if err != nil {
			return false // none yet
		}
		conn, err := pgx.Connect(ctx, leader.AdminURL(failoverDB))
		if err != nil {
			return false // it may be restarting
		}
		defer conn.Close(context.Background())
		if !everyReplicaListens(t, conn)() {
			return false
		}
		for _, d := range ds {
			if healthStatus(t, d) != healthpb.HealthCheckResponse_SERVING {
				return false
			}
		}
		return true
	}
}

// stillServing logs how many of the replicas' health answers were SERVING
// throughout d. It is a figure, not a check: on a loaded machine the
// leader's Patroni may miss its renewal in etcd's election and step down,
// which is Patroni's doing and no fault of the replicas'. The end checks
// hold either way.
func stillServing(t *testing.T, ds []*daemon, d time.Duration) {
	t.Helper()
	serving, asked := 0, 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, dm := range ds {
			asked++
			if healthStatus(t, dm) == healthpb.HealthCheckResponse_SERVING {
				serving++
			}
		}
	}
	t.Logf("one etcd member gone: %d of %d health answers SERVING over %v", serving, asked, d)
}

// strictNoStandby stops both standbys of c, which runs synchronous mode
// strict. A create then is not acknowledged, and every replica of ds
// reports NOT_SERVING. Once the standbys are back the create's retry is
// acknowledged, and replays.
func strictNoStandby(t *testing.T, c *patroni.Cluster, ds []*daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var standbys []*patroni.Member
	for _, m := range c.Members() {
		if m != leader {
			standbys = append(standbys, m)
		}
	}
	for _, m := range standbys {
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// A principal of its own: the load's end checks list its principals'
	// intents.
	req, key := seedRequest("4242"), "patroni-strict-no-standby"
	create := func(d *daemon, limit time.Duration) answer {
		ctx, cancel := context.WithTimeout(withCreds("patroni-strict-token", key), limit)
		defer cancel()
		return d.create(ctx, req)
	}
	if a := create(ds[0], 3*time.Second); a.err == nil {
		t.Errorf("a create with no standby in sync was acknowledged: %v", a.resp)
	} else if code := status.Code(a.err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("a create with no standby in sync: %v; want UNAVAILABLE or DEADLINE_EXCEEDED", a.err)
	}
	if _, ok := waitUntil(time.Now(), 30*time.Second, everyReplicaReports(t, ds, healthpb.HealthCheckResponse_NOT_SERVING)); !ok {
		t.Errorf("not every replica reported NOT_SERVING within 30 s of both standbys stopping")
	}
	for _, m := range standbys {
		if err := m.StartPatroni(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("standbys back: %v\n%s", err, c.LogTail(40))
	}
	var first answer
	for deadline := time.Now().Add(patroniServingWithin); ; time.Sleep(500 * time.Millisecond) {
		if first = create(ds[1], 10*time.Second); first.err == nil || time.Now().After(deadline) {
			break
		}
	}
	if first.err != nil {
		t.Fatalf("the create's retry with the standbys back: %v", first.err)
	}
	again := create(ds[2], 10*time.Second)
	if again.err != nil || !again.replayed() || !bytes.Equal(deterministic(t, again.resp), deterministic(t, first.resp)) {
		t.Errorf("the create replayed on another replica: %v (replayed %t); want the same answer", again.err, again.replayed())
	}
}

// medianDuration is the median of ds, 0 for none.
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
