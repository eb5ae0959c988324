package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replication is how a Pair's standby confirms the primary's commits.
type Replication int

const (
	// Synchronous: a commit returns once the standby has flushed its WAL.
	// The primary has synchronous_standby_names = '*' and
	// synchronous_commit = on. Every commit acknowledged is on both servers.
	Synchronous Replication = iota + 1
	// Asynchronous: a commit returns once the primary has flushed its
	// WAL. The standby follows a moment later. A failover loses what was
	// acknowledged in that moment.
	Asynchronous
)

func (r Replication) String() string {
	switch r {
	case Synchronous:
		return "synchronous"
	case Asynchronous:
		return "asynchronous"
	}
	return fmt.Sprintf("Replication(%d)", int(r))
}

// Pair is a primary with a standby streaming its WAL, for tests of a
// failover. Both are throwaway clusters like the package's. A test calls
// KillPrimary, Promote, and Rebuild to fail over again. Each node keeps
// its port for the pair's life. URL, which names both, stays valid
// throughout.
type Pair struct {
	mode Replication

	mu      sync.Mutex
	nodes   [2]*Cluster
	primary int // index in nodes of the primary (dead once KillPrimary ran)
}

// StartPair starts a primary and a standby of it, removed when t ends. It
// returns once the standby streams; in Synchronous mode, once the primary
// waits for it. If they cannot be started the test is skipped. Under
// CI=true it fails, as with Require.
func StartPair(t testing.TB, mode Replication) *Pair {
	t.Helper()
	p := &Pair{mode: mode}
	t.Cleanup(p.remove)
	if err := p.start(); err != nil {
		if ci() {
			t.Fatalf("pgtest: a primary with a %v standby did not start, and CI=true: %v", mode, err)
		}
		t.Skipf("pgtest: a primary with a %v standby did not start: %v", mode, err)
	}
	return p
}

// NewPair starts a primary and a standby as StartPair does, outside a
// test: for a benchmark. It returns them with a stop func that removes
// both.
func NewPair(mode Replication) (*Pair, func(), error) {
	p := &Pair{mode: mode}
	stop := sync.OnceFunc(p.remove)
	if err := p.start(); err != nil {
		stop()
		return nil, nil, err
	}
	return p, stop, nil
}

func (p *Pair) start() error {
	for i := range p.nodes {
		c, err := newCluster()
		if err != nil {
			return err
		}
		p.nodes[i] = c
	}
	primary, standby := p.nodes[0], p.nodes[1]
	if err := primary.init(); err != nil {
		return err
	}
	if err := primary.startOnFreePort(); err != nil {
		return err
	}
	var err error
	if standby.port, err = freePort(); err != nil {
		return err
	}
	return p.follow(standby)
}

// remove stops and removes both nodes.
func (p *Pair) remove() {
	for _, c := range p.nodes {
		if c != nil {
			c.remove()
		}
	}
}

// Primary is the node that is the primary, the one that accepts writes.
// Between KillPrimary and Promote, it is the dead one.
func (p *Pair) Primary() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[p.primary]
}

// Standby is the other node. It is a standby, or the killed former
// primary until Rebuild makes it a standby again.
func (p *Pair) Standby() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[1-p.primary]
}

// URL returns the URL of database name, naming both nodes; it creates
// nothing. With target_session_attrs=read-write, a client tries them in
// order, and connects to whichever accepts writes. It contains the
// password.
func (p *Pair) URL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(User, Password),
		Host:     p.nodes[0].Addr() + "," + p.nodes[1].Addr(),
		Path:     "/" + name,
		RawQuery: "sslmode=disable&target_session_attrs=read-write",
	}
	return u.String()
}

// NewDatabase creates database name on the primary, as Cluster.NewDatabase
// does. It returns its URL naming both nodes.
func (p *Pair) NewDatabase(t testing.TB, name string) string {
	t.Helper()
	p.Primary().NewDatabase(t, name)
	return p.URL(name)
}

// KillPrimary kills the primary (Kill): a failover is then the standby's
// Promote.
func (p *Pair) KillPrimary(t testing.TB) {
	t.Helper()
	p.Primary().Kill(t)
}

// Promote promotes the standby, which becomes the pair's Primary. The
// former primary becomes its Standby, dead if KillPrimary killed it. If
// not, it is a second writable primary: split brain, for tests of that.
func (p *Pair) Promote(t testing.TB) {
	t.Helper()
	p.Standby().Promote(t)
	p.mu.Lock()
	p.primary = 1 - p.primary
	p.mu.Unlock()
}

// Rebuild makes the standby node, killed as a primary before, a standby
// of the primary again. A base backup of the primary replaces its data
// directory, as an HA manager reinitializes a failed node. It starts on
// its old port. Rebuild returns once it streams, ready for the next
// failover. In Synchronous mode, it also waits until the primary waits
// for it again.
func (p *Pair) Rebuild(t testing.TB) {
	t.Helper()
	s := p.Standby()
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if running {
		t.Fatal("pgtest: Rebuild: the standby node runs; kill it first")
	}
	if err := p.follow(s); err != nil {
		t.Fatal(err)
	}
}

// follow makes s, stopped, a standby of the primary on s.port. It takes a
// base backup with -R, which writes primary_conninfo and standby.signal.
// It adds the node's own settings and starts it. In Synchronous mode, it
// tells the primary to wait for it.
func (p *Pair) follow(s *Cluster) error {
	primary := p.Primary()
	name := "standby_" + strconv.Itoa(s.port)
	if err := os.RemoveAll(s.data); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	// Over TCP with the password, as a standby on another machine would.
	// --no-sync as initdb's: the copy is thrown away with the test.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s application_name=%s", primary.port, User, Password, name)
	if out, err := s.run("pg_basebackup", "-D", s.data, "-d", conninfo, "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return fmt.Errorf("pgtest: pg_basebackup from %s: %v\n%s", primary.Addr(), err, out)
	}
	// The base backup copies the primary's socket lock files, which name
	// its postmaster's pid. The copy's own server must not take them for a
	// live server's socket.
	locks, _ := filepath.Glob(filepath.Join(s.data, ".s.PGSQL.*"))
	for _, l := range locks {
		os.Remove(l)
	}
	// The copy has the primary's settings. Its socket goes in its own
	// directory, and it waits for no standby of its own. Promoted, it runs
	// alone until Rebuild gives it one, rather than hang every commit. An
	// HA manager's non-strict synchronous mode does the same.
	// postgresql.auto.conf is read last, so these lines win.
	conf := fmt.Sprintf("\nunix_socket_directories = '%s'\nsynchronous_standby_names = ''\n", s.data)
	if err := appendFile(filepath.Join(s.data, "postgresql.auto.conf"), conf); err != nil {
		return err
	}
	s.mu.Lock()
	err := s.startRetrying()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: connecting to the primary: %w", err)
	}
	defer conn.Close(context.Background())
	if err := waitReplication(ctx, conn, name, "streaming", "async"); err != nil {
		return err
	}
	if p.mode != Synchronous {
		return nil
	}
	// Only now, with the standby streaming. Set before, it would hold
	// every commit until the standby connects.
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return waitReplication(ctx, conn, name, "streaming", "sync")
}

// waitReplication waits until the primary reports the walsender of
// standby name in state with sync_state.
func waitReplication(ctx context.Context, conn *pgx.Conn, name, state, syncState string) error {
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = $1 AND state = $2 AND sync_state = $3`, name, state, syncState).Scan(&n)
		if err != nil {
			return fmt.Errorf("pgtest: waiting for standby %s to be %s and %s: %w", name, state, syncState, err)
		}
		if n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: standby %s is not %s and %s: %w", name, state, syncState, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill kills the server as a crash of its machine would. It sends SIGKILL
// to the postmaster (the pid in postmaster.pid) and every process it
// started. None then answers a client, finishes a commit or sends WAL.
// Its connections are reset and its port refuses new ones, so clients
// learn at once. (Freeze is a server that goes silent instead.) It returns
// once they are gone. StartAgain would recover it from its WAL; a Pair's
// Rebuild replaces it instead.
func (c *Cluster) Kill(t testing.TB) {
	t.Helper()
	c.bringDown(t, "Kill", c.kill)
}

func (c *Cluster) kill() error {
	pids, err := c.stopAll()
	if err != nil {
		return fmt.Errorf("pgtest: Kill: %w", err)
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		alive := 0
		for _, p := range pids {
			if !gone(p) {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: Kill: %d of the server's %d processes still run 30 s after SIGKILL", alive, len(pids))
		}
	}
	c.running, c.frozen = false, false
	return nil
}

// Freeze stops the server's processes with SIGSTOP, as a hung machine or a
// network partition would stop its answers. Connections stay open, and
// the kernel still accepts new ones. But the server says nothing, and no
// client learns that it is gone. Kill, Stop or the test's end kills it.
func (c *Cluster) Freeze(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running || c.frozen {
		t.Fatal("pgtest: Freeze: the server is not running")
	}
	if _, err := c.stopAll(); err != nil {
		t.Fatalf("pgtest: Freeze: %v", err)
	}
	c.frozen = true
}

// stopAll stops the postmaster and every process it started with SIGSTOP
// and returns their pids. Stopped first, the postmaster starts no process
// while its children are listed, and notices nothing.
func (c *Cluster) stopAll() ([]int, error) {
	pid, err := c.postmasterPID()
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("postmaster %d: %w", pid, err)
	}
	pids := append(children(pid), pid)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGSTOP)
	}
	return pids, nil
}

// waitReaped waits a while for a zombie postmaster, the one postmaster.pid
// names, to be reaped. A zombie answers kill(pid, 0). A server started on
// the data directory of a killed one would take its lock files for a live
// server's, and refuse to start. Init reaps it in a moment; a slower
// reaper is no reason to fail here.
func (c *Cluster) waitReaped() {
	pid, err := c.postmasterPID()
	if err != nil {
		return
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, state, ok := procStat(pid); !ok || state != "Z" {
			return
		}
	}
}

// postmasterPID is the pid on the first line of postmaster.pid.
func (c *Cluster) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("postmaster.pid starts with %q, not a pid", line)
	}
	return pid, nil
}

// children returns the pids of the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// gone reports whether process pid has exited. Either there is no such
// process, or a zombie its parent has not yet reaped. That parent is init,
// which may reap late.
func gone(pid int) bool {
	_, state, ok := procStat(pid)
	return !ok || state == "Z"
}

// procStat reads a process's parent and state from /proc/pid/stat.
func procStat(pid int) (ppid int, state string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	// So the fields are counted from its last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}

// Promote ends a standby's recovery. It is a primary that accepts writes
// when Promote returns; pg_ctl promote waits for that.
func (c *Cluster) Promote(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.run("pg_ctl", "-D", c.data, "-w", "-t", "120", "promote"); err != nil {
		t.Fatalf("pgtest: pg_ctl promote: %v\n%s\nserver log:\n%s", err, out, logTail(c.logFile(), 0))
	}
}

// PIDs returns the pids of the running server, for a test that traces
// them. The postmaster comes first, then every process it has started:
// backends, the WAL writer, the checkpointer. The robustness suite slows
// their fsyncs with strace.
func (c *Cluster) PIDs() ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pid, err := c.postmasterPID()
	if err != nil {
		return nil, err
	}
	return append([]int{pid}, children(pid)...), nil
}
