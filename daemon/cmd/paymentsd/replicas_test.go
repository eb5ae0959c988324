package main

// Replicas of paymentsd on one PostgreSQL database: the set of processes,
// started again like a supervisor does, and the crash test that kills
// them under load (replicaload_test.go is the load).

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// replicaRounds is the number of rounds of TestCrash_Replicas_PostgreSQL:
// PAYMENTSD_REPLICA_ROUNDS if set, else PAYMENTSD_CRASH_ROUNDS capped at
// maxReplicaRounds (make crashtest's 200 rounds of this test would take
// the better part of an hour), else 6 (make test: about half a minute).
func replicaRounds() int {
	if n := envInt("PAYMENTSD_REPLICA_ROUNDS", 0); n > 0 {
		return n
	}
	return min(envInt("PAYMENTSD_CRASH_ROUNDS", 6), maxReplicaRounds)
}

// maxReplicaRounds caps PAYMENTSD_CRASH_ROUNDS for the replica test: 30
// rounds of about 2 s of load take a few minutes.
const maxReplicaRounds = 30

// replicaCallTimeout bounds each call of the replica test's clients: a
// call that outlasts it is retried like any other failure.
const replicaCallTimeout = 5 * time.Second

// replicaSet is the three paymentsd processes of the replica test. A slot
// is nil while its process is down; a restarted one listens on a new port,
// and clients find it here.
type replicaSet struct {
	t    *testing.T
	dbs  [3]string // --db of each: replica 2's goes through the proxy
	pods string    // --pods of each, in place of dbs
	args []string

	mu    sync.Mutex
	live  [3]*daemon
	all   []replicaProcess // every process started, for the logs
	fails int              // starts that exited before listening
}

// replicaProcess is a process started as replica i.
type replicaProcess struct {
	i int
	d *daemon
}

// start starts replica i and waits until it listens. A replica whose
// database connection is cut while it connects and migrates exits, as it
// should; like a supervisor, start tries again (replica 2 only: the others'
// connections are never cut, and the database is up while replicas start).
func (rs *replicaSet) start(i int) {
	t := rs.t
	t.Helper()
	// Tries are bounded by time, not count: on a loaded machine a start
	// takes longer than the 300 ms between cuts more often.
	for began := time.Now(); ; {
		d := start(t, spec{db: rs.dbs[i], pods: rs.pods, args: append(rs.args[:len(rs.args):len(rs.args)], replicaArgs(i)...), noWait: true})
		rs.mu.Lock()
		rs.all = append(rs.all, replicaProcess{i, d})
		rs.mu.Unlock()
		if err := d.awaitServing(t); err != nil {
			if i == 2 && time.Since(began) < time.Minute {
				rs.mu.Lock()
				rs.fails++
				rs.mu.Unlock()
				t.Logf("replica %d exited while starting (its connections are cut), starting it again: %v", i, replicaLastLine(d.stderr()))
				continue
			}
			t.Fatalf("replica %d exited while starting: %v\n%s", i, d.err, d.stderr())
		}
		rs.mu.Lock()
		rs.live[i] = d
		rs.mu.Unlock()
		return
	}
}

// replicaArgs are replica i's own flags: replica 2, whose connections are
// cut, also makes a duplicate wait for the request in flight (woken by
// LISTEN/NOTIFY on a connection that is cut too); 0 and 1 answer ABORTED
// at once.
func replicaArgs(i int) []string {
	if i == 2 {
		return []string{"--in-flight-wait", "1s"}
	}
	return nil
}

// kill kills replica i with SIGKILL.
func (rs *replicaSet) kill(i int) {
	rs.mu.Lock()
	d := rs.live[i]
	rs.live[i] = nil
	rs.mu.Unlock()
	d.kill()
}

// pick returns up to n distinct live replicas, at random.
func (rs *replicaSet) pick(n int) []*daemon {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var ds []*daemon
	for _, d := range rs.live {
		if d != nil {
			ds = append(ds, d)
		}
	}
	rand.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds[:min(n, len(ds))]
}

func (rs *replicaSet) daemons() []*daemon {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.live[:])
}

func replicaLastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// saveReplicaLogs writes the log of every replica process the test started
// to a directory that outlives the test, for the evidence of a failure.
func saveReplicaLogs(t *testing.T, rs *replicaSet) {
	dir, err := os.MkdirTemp("", "paymentsd-replicas-logs-")
	if err != nil {
		t.Logf("saving the replicas' logs: %v", err)
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for n, s := range rs.all {
		name := filepath.Join(dir, fmt.Sprintf("%02d-replica%d-pid%d.log", n, s.i, s.d.cmd.Process.Pid))
		if err := os.WriteFile(name, []byte(s.d.stderr()), 0o600); err != nil {
			t.Logf("saving the replicas' logs: %v", err)
			return
		}
	}
	t.Logf("the logs of the %d replica processes started are in %s", len(rs.all), dir)
}

// TestCrash_Replicas_PostgreSQL runs three paymentsd replicas on one
// PostgreSQL database, replica 2 through a proxy that cuts its database
// connections at random, and sends every key's create to two or three
// replicas at the same moment, retrying it (same key, same body) on a
// random live replica until an answer arrives. Round after round one
// replica is killed with SIGKILL under load and started again on a new
// port; once every ten rounds (in the middle round of a shorter run)
// PostgreSQL itself crashes (immediate shutdown) and restarts under load.
//
// On PostgreSQL a create's claim, intent and answer commit in one
// transaction, whichever replica runs it, so at the end every key must
// have exactly one intent, its every answer the same bytes, every stored
// intent some key's answer (0 orphans), and every replica must read and
// list the same intents.
//
// Size: replicaRounds (PAYMENTSD_REPLICA_ROUNDS, else PAYMENTSD_CRASH_ROUNDS
// capped at 30, else 6 rounds: about 30 s; make crashtest's 30 rounds take
// a few minutes).
func TestCrash_Replicas_PostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	c := pgtest.Require(t, pgCluster)
	rounds := replicaRounds()
	began := time.Now()

	db := c.NewDatabase(t, pgtest.DatabaseName(t.Name()+" "+began.Format(time.RFC3339Nano)))
	proxy, err := faultproxy.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	proxied, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxied.Host = proxy.Addr()
	rs := &replicaSet{t: t, dbs: [3]string{db, db, proxied.String()}, args: []string{"--db-pool", "8"}}
	t.Cleanup(func() {
		if t.Failed() {
			saveReplicaLogs(t, rs)
		}
	})
	for i := range 3 {
		rs.start(i)
	}
	proxy.CutEvery(300 * time.Millisecond)
	load := startReplicaLoad(t, rs, nil)

	// The chaos: a replica killed each round, the database crashed now and
	// then, the proxy cutting all along.
	kills, pgRestarts := 0, 0
	for round := range rounds {
		before := load.answered.Load()
		pause := time.Duration(1500+rand.IntN(1000)) * time.Millisecond
		pgRestart := round%10 == min(rounds, 10)/2
		if pgRestart {
			time.Sleep(pause / 2)
			c.Restart(t)
			pgRestarts++
			time.Sleep(pause / 2)
		} else {
			time.Sleep(pause)
		}
		victim := round % 3
		rs.kill(victim)
		kills++
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond) // clients meet it dead
		rs.start(victim)
		what := fmt.Sprintf("replica %d killed and restarted", victim)
		if pgRestart {
			what += ", PostgreSQL restarted"
		}
		t.Logf("round %d: %s; %d keys answered", round, what, load.answered.Load()-before)
	}
	load.halt()
	proxy.CutEvery(0)
	cuts := proxy.Cuts()
	loadTime := time.Since(began)
	unanswered := len(load.keys) - int(load.answered.Load()) // left to answerAll

	load.answerAll()
	found := load.check()

	// A create's claim commits with its intent and answer, never in flight
	// on its own, so no claim is ever left for a retry to take over.
	takeovers := 0
	rs.mu.Lock()
	for _, s := range rs.all {
		takeovers += strings.Count(s.d.stderr(), `"idempotency":"takeover"`)
	}
	fails := rs.fails
	rs.mu.Unlock()
	if takeovers > 0 {
		t.Errorf("%d takeovers logged; a transactional create leaves no claim in flight to take over", takeovers)
	}
	if cuts == 0 {
		t.Errorf("the proxy cut no connection: replica 2 was never cut off")
	}

	t.Logf("replica test: %d rounds, %d keys, %d requests, %d kills, %d PostgreSQL restarts, %d connections cut by the proxy "+
		"(%d starts of replica 2 cut short), %d replays, %d ABORTED in use, %d UNAVAILABLE, %d DEADLINE_EXCEEDED, "+
		"%d keys unanswered when the chaos stopped, %d keys whose storing run's answer was lost, "+
		"%d takeovers, %d orphan intents; %v of chaos, %v in all",
		rounds, len(load.keys), load.requests.Load(), kills, pgRestarts, cuts, fails, load.replays.Load(), load.aborted.Load(),
		load.unavailable.Load(), load.deadlines.Load(), unanswered, load.answersLost(), takeovers, len(found.orphans),
		loadTime.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}
