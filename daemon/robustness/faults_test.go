package robustness

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/testkit/patroni"
	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// The fault kinds, each for the backends it applies to.
const (
	faultKill       = "kill"        // SIGKILL a server, then start it again
	faultPause      = "pause"       // SIGSTOP a server for longer than its lease, then SIGCONT
	faultCutClients = "cut-clients" // reset every client connection to a server
	faultSlowFsync  = "slow-fsync"  // delay every fdatasync and fsync of a bbolt server, or of the PostgreSQL primary's processes, by 400 ms (strace)
	faultCutDB      = "cut-db"      // reset every connection between the servers and PostgreSQL
	faultPGRestart  = "pg-restart"  // crash the PostgreSQL primary (immediate stop) and start it again
	faultFailover   = "failover"    // kill the primary, promote its synchronous standby
)

var (
	boltFaults     = []string{faultKill, faultPause, faultCutClients, faultSlowFsync}
	postgresFaults = []string{faultKill, faultPause, faultCutClients, faultCutDB, faultPGRestart, faultFailover, faultSlowFsync}
)

// lease is the servers' --lease: short, so that a pause outlasts it.
const lease = time.Second

// fault is one planned fault: when, what, on which server, for how long;
// a Patroni fault's Variant says which way (patroni_test.go).
type fault struct {
	At      time.Duration
	Kind    string
	Target  int
	Hold    time.Duration
	Variant string
}

// schedule plans a run's faults from rng: forced first (so that runs in
// turn cover every kind), then one about every three seconds of random
// kinds, all within the first 80% of the run.
func schedule(rng *rand.Rand, kinds []string, forced string, servers int, d time.Duration) []fault {
	n := 1 + int(d/(3*time.Second))
	var out []fault
	for i := range n {
		k := forced
		if i > 0 || k == "" {
			k = kinds[rng.IntN(len(kinds))]
		}
		at := d/10 + time.Duration(rng.Int64N(int64(d*7/10)))
		out = append(out, fault{At: at, Kind: k, Target: rng.IntN(servers), Hold: time.Duration(200+rng.IntN(1300)) * time.Millisecond})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// faultEvent is one line of the fault log.
type faultEvent struct {
	T    int64 // ns since the run began
	Kind string
	What string
}

func (e faultEvent) String() string {
	return fmt.Sprintf("%10.3fs %-11s %s", float64(e.T)/1e9, e.Kind, e.What)
}

// cluster is what a run's faults act on.
type cluster struct {
	t        *testing.T
	h        *history
	servers  []*server
	proxies  [][2]*faultproxy.Proxy // per server: gRPC, HTTP
	dbProxes []*faultproxy.Proxy    // per PostgreSQL node
	pair     *pgtest.Pair
	patroni  *patroni.Cluster
	pods     *pods
	seed     uint64

	// For the bursts of a pause on a run with durable claims (burst):
	durable    bool
	w          *workload
	clientBase int // the bursts' client ids start here
	burstKeys  atomic.Int64

	mu     sync.Mutex
	log    []faultEvent
	counts map[string]int // faults injected, by kind
	// variants counts the faults of a kind with variants by
	// "kind/variant" (leader-kill/patroni), apart from counts.
	variants map[string]int
}

func (c *cluster) note(kind, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, faultEvent{c.h.now(), kind, fmt.Sprintf(format, args...)})
}

// inject runs one fault to its end: every server runs and answers again
// when it returns (a failover's replicas find the new primary themselves).
func (c *cluster) inject(f fault) error {
	s := c.servers[f.Target%len(c.servers)]
	if f.Kind != faultFailover || !failedOver[c.pair] {
		c.mu.Lock()
		c.counts[f.Kind]++
		if f.Variant != "" {
			c.variants[f.Kind+"/"+f.Variant]++
		}
		c.mu.Unlock()
	}
	if c.patroni != nil {
		return c.injectPatroni(f)
	}
	if c.pods != nil {
		if handled, err := c.injectPods(f); handled {
			return err
		}
	}
	switch f.Kind {
	case faultKill:
		c.note(f.Kind, "SIGKILL %s (pid %d), start again after %v", s.name, s.pid(), f.Hold)
		s.kill()
		time.Sleep(f.Hold)
		if err := s.restart(); err != nil {
			return err
		}
		c.note(f.Kind, "%s runs again (pid %d)", s.name, s.pid())
	case faultPause:
		d := lease + f.Hold
		var b *burst
		if c.durable && len(c.servers) > 1 {
			// Time to take the paused claims over (takeover_test.go).
			d += 500 * time.Millisecond
			b = c.startBurst(f.Target % len(c.servers))
		}
		c.note(f.Kind, "SIGSTOP %s (pid %d) for %v (lease %v)", s.name, s.pid(), d, lease)
		s.signal(syscall.SIGSTOP)
		stopped := time.Now()
		if b != nil {
			time.Sleep(lease + 100*time.Millisecond)
			other := c.servers[(f.Target+1)%len(c.servers)]
			n, fresh := b.takeOver((f.Target+1)%len(c.servers), stopped.Add(d-100*time.Millisecond))
			c.note(f.Kind, "the %d creates %s had not answered sent again to %s: %d ran fresh there", n, s.name, other.name, fresh)
		}
		time.Sleep(time.Until(stopped.Add(d)))
		s.signal(syscall.SIGCONT)
		c.note(f.Kind, "SIGCONT %s", s.name)
		if b != nil {
			b.wait()
		}
	case faultCutClients:
		p := c.proxies[f.Target%len(c.proxies)]
		p[0].CutAll()
		p[1].CutAll()
		c.note(f.Kind, "reset the client connections of %s; again after %v", s.name, f.Hold)
		time.Sleep(f.Hold)
		p[0].CutAll()
		p[1].CutAll()
	case faultCutDB:
		for _, p := range c.dbProxes {
			p.CutAll()
		}
		c.note(f.Kind, "reset every connection to PostgreSQL")
	case faultPGRestart:
		c.note(f.Kind, "PostgreSQL primary %s: immediate stop, start", c.pair.Primary().Addr())
		c.pair.Primary().Restart(c.t)
		c.note(f.Kind, "PostgreSQL primary accepts connections again")
	case faultFailover:
		if failedOver[c.pair] {
			c.note(f.Kind, "skipped: the standby of the last failover is not rebuilt yet")
			return nil
		}
		c.note(f.Kind, "kill the PostgreSQL primary %s, promote the standby after %v", c.pair.Primary().Addr(), f.Hold)
		c.pair.KillPrimary(c.t)
		time.Sleep(f.Hold)
		c.pair.Promote(c.t)
		failedOver[c.pair] = true
		c.note(f.Kind, "promoted %s", c.pair.Primary().Addr())
	case faultSlowFsync:
		// bbolt: the server. PostgreSQL: the primary's postmaster (-f:
		// the backends it starts meanwhile too) and every process it has
		// started, the WAL writer and the backends that flush the WAL
		// at commit among them.
		name, pids := s.name, []int{s.pid()}
		if c.pair != nil {
			var err error
			if pids, err = c.pair.Primary().PIDs(); err != nil {
				return err
			}
			name = fmt.Sprintf("the PostgreSQL primary %s (%d processes)", c.pair.Primary().Addr(), len(pids))
		}
		detach, err := slowFsync(pids, 400*time.Millisecond)
		if err != nil {
			return err
		}
		c.note(f.Kind, "strace on %s: every fdatasync and fsync 400ms late, for %v", name, 2*f.Hold)
		time.Sleep(2 * f.Hold)
		detach()
		c.note(f.Kind, "strace detached from %s", name)
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	return nil
}

// slowFsync attaches strace to every thread of pids (and, -f, to the
// processes and threads they start), delaying each fdatasync and fsync,
// and returns the func that detaches it. It returns once the kernel names
// a tracer for each of their threads.
func slowFsync(pids []int, delay time.Duration) (detach func(), err error) {
	us := strconv.FormatInt(delay.Microseconds(), 10)
	args := []string{"-f", "-o", "/dev/null", "-e", "trace=fdatasync,fsync",
		"-e", "inject=fdatasync:delay_enter=" + us, "-e", "inject=fsync:delay_enter=" + us}
	for _, pid := range pids {
		args = append(args, "-p", strconv.Itoa(pid))
	}
	cmd := exec.Command("strace", args...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("strace (apt-get install strace): %w", err)
	}
	detach = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if tracedAll(pids) {
			return detach, nil
		}
	}
	detach()
	return nil, fmt.Errorf("strace did not attach to every thread of pids %v", pids)
}

// tracedAll reports whether every thread of pids has a tracer; a process
// that has ended meanwhile (a backend whose connection closed) counts as
// traced.
func tracedAll(pids []int) bool {
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && !traced(pid) {
			return false
		}
	}
	return true
}

// traced reports whether every thread of pid has a tracer
// (/proc/PID/task/*/status, TracerPid).
func traced(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil || !strings.Contains(string(b), "TracerPid:\t") || strings.Contains(string(b), "TracerPid:\t0\n") {
			return false
		}
	}
	return true
}

// needStrace fails under CI, and otherwise drops the strace fault, when
// strace is missing.
func needStrace(t *testing.T, kinds []string) []string {
	if _, err := exec.LookPath("strace"); err == nil {
		return kinds
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("strace is missing and CI=true: apt-get install strace")
	}
	t.Log("strace is missing (apt-get install strace): the slow-fsync fault is left out")
	var out []string
	for _, k := range kinds {
		if k != faultSlowFsync {
			out = append(out, k)
		}
	}
	return out
}
