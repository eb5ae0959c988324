package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/daemon/testkit/patroni"
)

// The Patroni fault kinds (TestRobustness_Patroni). Each faults the
// cluster, not paymentsd, whose three replicas know of no Patroni: they
// reach the leader through the multi-host URL, target_session_attrs
// read-write. A fault returns once the cluster is healthy again (a leader,
// its synchronous standby and the third member streaming) and every
// server reports SERVING, and the load has run patroniSettle on it, so
// that the next fault starts from a recovered cluster.
const (
	// SIGKILL the leader's PostgreSQL, which its Patroni restarts (or
	// another member takes over); or, in turn, the leader's Patroni with
	// its PostgreSQL left running as a primary, whose commits then wait
	// for a standby that is promoted once the lock expires. That Patroni
	// is started again after the fault's hold: it demotes its PostgreSQL
	// and rewinds it.
	faultLeaderKill = "leader-kill"
	// patronictl switchover: a clean hand-over to the synchronous standby.
	faultSwitchover = "switchover"
	// SIGSTOP the leader, Patroni and PostgreSQL, past the TTL: until
	// another member leads. Then SIGCONT: its PostgreSQL wakes a primary
	// still, with the servers' connections of before the pause, until its
	// Patroni demotes it and it rejoins (see pauseRestart).
	faultLeaderPause = "leader-pause"
	// SIGKILL an etcd member (Raft's leader or a follower), and start it
	// again after the fault's hold.
	faultEtcdKill = "etcd-kill"
)

// patroniFaults names leader-kill twice: a run forces the kind of index
// seed%5, and the leader-kill of index 0 kills PostgreSQL, that of index
// 1 Patroni. So five runs in a row force every kind and both ways of
// killing the leader.
var patroniFaults = []string{faultLeaderKill, faultLeaderKill, faultSwitchover, faultLeaderPause, faultEtcdKill}

// The ways of a leader-kill (fault.Variant), in turn in a run.
const (
	killPostgres = "postgres"
	killPatroni  = "patroni"
)

// The ways of a leader-pause (fault.Variant), by the Patroni installed.
// A leader that Patroni before 3.0.3 wakes with SIGCONT may put the leader
// key back over the new leader's (patroni/patroni#2689, fixed in 3.0.3;
// Debian 12 ships 3.0.2). Its Patroni, woken, renews its expired lease
// and, from the cluster view it had cached before the pause, puts the key
// unconditionally. The member that took over, promoted already to a new
// timeline, demotes itself. Both were primaries for a moment, and the
// standbys, which hold the new timeline's history, may never stream from
// the old leader again. With synchronous_mode_strict its commits then
// wait for ever. Restarting that Patroni did not always repair it, since
// it failed to update the synchronous standby's key. So with Patroni
// before 3.0.3 the stopped Patroni is killed before SIGCONT, which wakes
// PostgreSQL alone, and is then started again: a fresh Patroni reads the
// new leader and demotes and rewinds its PostgreSQL.
const (
	pauseResume  = "resume"          // SIGCONT wakes Patroni and PostgreSQL
	pauseRestart = "patroni-restart" // SIGCONT wakes PostgreSQL; Patroni is started again
)

// patroniWakesStale reports whether the Patroni on PATH is older than
// 3.0.3 (patroni --version), or says no version: one whose woken leader
// may take the key back.
func patroniWakesStale(t *testing.T) bool {
	out, err := exec.Command("patroni", "--version").Output()
	var v [3]int
	if err == nil {
		_, err = fmt.Sscanf(strings.TrimSpace(string(out)), "patroni %d.%d.%d", &v[0], &v[1], &v[2])
	}
	if err != nil {
		t.Logf("patroni --version: %q, %v: leader-pause restarts the woken leader's Patroni", out, err)
		return true
	}
	return v[0] < 3 || v[0] == 3 && v[1] == 0 && v[2] < 3
}

const (
	// patroniScale: a Patroni run lasts this many times the suite's
	// duration (60 s by default), since one fault and the recovery after
	// it take 10 to 40 s (Patroni's TTL is 10 s).
	patroniScale = 5
	// patroniSpacing plans a fault per patroniSpacing of a run, the first
	// one forced; a fault whose turn comes after 80% of the run, the ones
	// before it having taken long, is skipped.
	patroniSpacing = 45 * time.Second
	// patroniWait bounds each wait of a fault (a new leader, a healthy
	// cluster, every server SERVING): far longer than any takes on a
	// loaded machine. Only a deadline missed fails the run.
	patroniWait = 3 * time.Minute
	// patroniSettle is the load on the recovered cluster after a fault.
	patroniSettle = 3 * time.Second
)

// TestRobustness_Patroni runs the suite on three paymentsd replicas on a
// Patroni cluster (testkit/patroni: three etcd members and three
// PostgreSQL members in synchronous mode strict, TTL 10 s), through its
// multi-host URL, under the Patroni fault kinds. One cluster serves every
// run, each run on a database of its own.
//
// PAYMENTSD_ROBUSTNESS_PATRONI_RUNS sets its runs (default
// PAYMENTSD_ROBUSTNESS_RUNS); each lasts patroniScale times
// PAYMENTSD_ROBUSTNESS_DURATION, plus what its last fault takes past it.
func TestRobustness_Patroni(t *testing.T) {
	s := readSettings(t)
	s.runs = envInt("PAYMENTSD_ROBUSTNESS_PATRONI_RUNS", s.runs)
	s.long = s.runs >= 4
	s.duration *= patroniScale
	bin := binary(t, "") // built while nothing else loads the machine
	pc := patroni.Start(t, patroni.Options{})
	pause := pauseResume
	if patroniWakesStale(t) {
		pause = pauseRestart
	}
	suite(t, s, func(i int) run {
		return run{backend: "patroni", bin: bin, kinds: patroniFaults, patroni: pc, pause: pause}
	})
}

// patroniSchedule plans a Patroni run's faults from rng: forced first,
// then random kinds, one per patroniSpacing of the run. Each is a time it
// may not start before: a fault lasts until the cluster has recovered.
// The leader-kills alternate their way, the first as its forced slot
// says (see patroniFaults); a leader-pause's way is pause's.
func patroniSchedule(rng *rand.Rand, seed uint64, kinds []string, forced, pause string, d time.Duration) []fault {
	n := 1 + int(d/patroniSpacing)
	way := int(seed%uint64(len(kinds))) % 2
	var out []fault
	for i := range n {
		k := forced
		if i > 0 || k == "" {
			k = kinds[rng.IntN(len(kinds))]
		}
		f := fault{At: d/10 + time.Duration(i)*(d*7/10)/time.Duration(n) + time.Duration(rng.Int64N(int64(d/10))),
			Kind: k, Target: rng.IntN(2), Hold: time.Duration(2000+rng.IntN(6000)) * time.Millisecond}
		etcdWay := []string{"leader", "follower"}[rng.IntN(2)]
		switch k {
		case faultLeaderKill:
			f.Variant = []string{killPostgres, killPatroni}[way]
			way ^= 1
		case faultEtcdKill:
			f.Variant = etcdWay
		case faultLeaderPause:
			f.Variant = pause
		}
		out = append(out, f)
	}
	return out
}

// within runs wait with a deadline of patroniWait, and names what was
// awaited, with the cluster's logs, when it fails.
func (c *cluster) within(what string, wait func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), patroniWait)
	defer cancel()
	if err := wait(ctx); err != nil {
		return fmt.Errorf("%s: %w\n%s", what, err, c.patroni.LogTail(40))
	}
	return nil
}

// leader is the cluster's leader, waited for.
func (c *cluster) leader() (*patroni.Member, error) {
	var l *patroni.Member
	err := c.within("the leader", func(ctx context.Context) (err error) {
		l, err = c.patroni.Leader(ctx)
		return err
	})
	return l, err
}

// injectPatroni runs one Patroni fault to its end: the cluster healthy
// again, every server SERVING, and patroniSettle of load after.
func (c *cluster) injectPatroni(f fault) error {
	pc := c.patroni
	if err := c.within("a healthy cluster before the fault", pc.WaitHealthy); err != nil {
		return err
	}
	l, err := c.leader()
	if err != nil {
		return err
	}
	began := time.Now()
	since := func() time.Duration { return time.Since(began).Round(100 * time.Millisecond) }
	switch {
	case f.Kind == faultLeaderKill && f.Variant == killPostgres:
		c.note(f.Kind, "SIGKILL the PostgreSQL of the leader %s; its Patroni restarts it", l.Name())
		if err := l.KillPostgres(); err != nil {
			return err
		}
		nl, err := c.leader()
		if err != nil {
			return err
		}
		c.note(f.Kind, "%s leads, %v after the kill", nl.Name(), since())
	case f.Kind == faultLeaderKill && f.Variant == killPatroni:
		c.note(f.Kind, "SIGKILL the Patroni of the leader %s; its PostgreSQL runs on as a primary", l.Name())
		if err := l.KillPatroni(); err != nil {
			return err
		}
		var nl *patroni.Member
		if err := c.within("a leader other than "+l.Name(), func(ctx context.Context) (err error) {
			nl, err = pc.WaitLeader(ctx, l.Name())
			return err
		}); err != nil {
			return err
		}
		c.note(f.Kind, "%s leads, %v after the kill; %s's PostgreSQL still runs as a primary", nl.Name(), since(), l.Name())
		// The servers move to the new leader while the old primary still
		// accepts connections (its commits wait for ever): noted, not
		// required, since the old primary may hold them for a while.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := c.waitServing(ctx)
		cancel()
		if err != nil {
			c.note(f.Kind, "not every server SERVING %v after the kill, the old primary still running: %v", since(), err)
			c.t.Logf("seed %d: leader-kill (Patroni of %s): %v", c.seed, l.Name(), err)
		} else {
			c.note(f.Kind, "every server SERVING %v after the kill, the old primary still running", since())
		}
		time.Sleep(f.Hold)
		if err := l.StartPatroni(); err != nil {
			return err
		}
		c.note(f.Kind, "%s's Patroni started again, %v after the kill: it demotes its PostgreSQL and rewinds it", l.Name(), since())
	case f.Kind == faultSwitchover:
		c.note(f.Kind, "patronictl switchover from the leader %s", l.Name())
		if err := c.within("the switchover", func(ctx context.Context) error { return pc.Switchover(ctx, "") }); err != nil {
			return err
		}
		nl, err := c.leader()
		if err != nil {
			return err
		}
		c.note(f.Kind, "%s leads, %v after the switchover began", nl.Name(), since())
	case f.Kind == faultLeaderPause:
		c.note(f.Kind, "SIGSTOP the leader %s, Patroni and PostgreSQL, until another member leads", l.Name())
		if err := l.Pause(); err != nil {
			return err
		}
		var nl *patroni.Member
		err := c.within("a leader other than the paused "+l.Name(), func(ctx context.Context) (err error) {
			nl, err = pc.WaitLeader(ctx, l.Name())
			return err
		})
		if err != nil {
			l.Resume()
			return err
		}
		c.note(f.Kind, "%s leads, %v after the pause", nl.Name(), since())
		if f.Variant == pauseRestart {
			// Killed while stopped, it never runs on its old view.
			if err := l.KillPatroni(); err != nil {
				l.Resume()
				return err
			}
			c.note(f.Kind, "SIGKILL %s's stopped Patroni (Patroni before 3.0.3 wakes on a stale view, patroni/patroni#2689)", l.Name())
		}
		if err := l.Resume(); err != nil {
			return err
		}
		if f.Variant == pauseRestart {
			c.note(f.Kind, "SIGCONT %s's PostgreSQL, %v after the pause: a primary again, without Patroni", l.Name(), since())
			if err := l.StartPatroni(); err != nil {
				return err
			}
			c.note(f.Kind, "%s's Patroni started again: it demotes its PostgreSQL and rewinds it", l.Name())
		} else {
			c.note(f.Kind, "SIGCONT %s, %v after the pause: it demotes itself and rejoins", l.Name(), since())
		}
	case f.Kind == faultEtcdKill:
		var e *patroni.Etcd
		if err := c.within("the etcd leader", func(ctx context.Context) (err error) {
			e, err = pc.EtcdLeader(ctx)
			return err
		}); err != nil {
			return err
		}
		if f.Variant == "follower" {
			var followers []*patroni.Etcd
			for i := range 3 {
				if pc.Etcd(i) != e {
					followers = append(followers, pc.Etcd(i))
				}
			}
			e = followers[f.Target%len(followers)]
		}
		c.note(f.Kind, "SIGKILL etcd member %s (%s), start it again after %v", e.Name(), f.Variant, f.Hold)
		if err := e.Kill(); err != nil {
			return err
		}
		time.Sleep(f.Hold)
		if err := e.Start(); err != nil {
			return fmt.Errorf("starting %s again: %w\n%s", e.Name(), err, pc.LogTail(40))
		}
		c.note(f.Kind, "%s healthy again, %v after the kill", e.Name(), since())
	default:
		return fmt.Errorf("unknown Patroni fault %s %q", f.Kind, f.Variant)
	}
	if err := c.within("a healthy cluster after the fault", pc.WaitHealthy); err != nil {
		return err
	}
	nl, err := c.leader()
	if err != nil {
		return err
	}
	c.note(f.Kind, "cluster healthy, %s leads, %v after the fault began", nl.Name(), since())
	if err := c.within("every server SERVING after the fault", c.waitServing); err != nil {
		return err
	}
	c.note(f.Kind, "every server SERVING, %v after the fault began", since())
	time.Sleep(patroniSettle)
	return nil
}

// waitServing waits until each server has answered grpc.health.v1 with
// SERVING, and a create or cancel of one of its clients called from now
// on with OK: a write of its own on the leader, not a SERVING left from
// before the fault. Until ctx ends.
func (c *cluster) waitServing(ctx context.Context) error {
	from := c.h.now()
	serving := make([]bool, len(c.servers))
	last := make([]string, len(c.servers))
	for {
		wrote := c.wroteSince(from)
		all := true
		for i, s := range c.servers {
			if !serving[i] {
				st, err := healthOf(ctx, s.grpcAddr)
				serving[i] = err == nil && st == healthpb.HealthCheckResponse_SERVING
				last[i] = fmt.Sprintf("%s: %v %v", s.name, st, err)
			}
			if serving[i] && !wrote[i] {
				last[i] = s.name + ": SERVING, no write answered OK yet"
			}
			all = all && serving[i] && wrote[i]
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not every server serves: %w; last: %v", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// wroteSince says, per server, whether one of its clients (client i
// sends to server i%n) has had a create or cancel called at from or
// later answered OK.
func (c *cluster) wroteSince(from int64) []bool {
	wrote := make([]bool, len(c.servers))
	for _, o := range c.h.snapshot() {
		if o.Client < c.clientBase-1 && o.Call >= from && o.Code == codes.OK && !o.Unknown && (o.Kind == opCreate || o.Kind == opCancel) {
			wrote[o.Client%len(c.servers)] = true
		}
	}
	return wrote
}

// healthOf asks the server at addr for its grpc.health.v1 status.
func healthOf(ctx context.Context, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	return h.Status, nil
}

// patroniLogs are the cluster's logs, for a failing run's report: each
// member's (Patroni's and its PostgreSQL's) and each etcd's.
func patroniLogs(pc *patroni.Cluster) []string {
	var out []string
	for _, m := range pc.Members() {
		out = append(out, filepath.Join(pc.Dir(), m.Name()+".log"))
	}
	for i := range 3 {
		out = append(out, filepath.Join(pc.Dir(), pc.Etcd(i).Name()+".log"))
	}
	return out
}
