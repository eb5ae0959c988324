package patroni_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/daemon/testkit/patroni"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// wait is every step's deadline: generous, since a loaded machine makes
// each election, rewind and restart slower, never wrong.
const wait = 3 * time.Minute

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(ctx(t), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx(t), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// insert adds a row through the cluster's URL, on whichever member leads.
func insert(t *testing.T, c *patroni.Cluster, v int) {
	t.Helper()
	insertInto(t, c.URL(db), v)
}

func insertInto(t *testing.T, url string, v int) {
	t.Helper()
	ctx := ctx(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", v); err != nil {
		t.Fatal(err)
	}
}

// state is the process's state letter in /proc: "T" when stopped, "" when
// gone.
func state(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if f[0] == "Z" {
		return ""
	}
	return f[0]
}

func postmaster(t *testing.T, m *patroni.Member) int {
	t.Helper()
	pid, err := m.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func leader(t *testing.T, c *patroni.Cluster) *patroni.Member {
	t.Helper()
	l, err := c.Leader(ctx(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, c.LogTail(30))
	}
	return l
}

func healthy(t *testing.T, c *patroni.Cluster) {
	t.Helper()
	if err := c.WaitHealthy(ctx(t)); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTail(30))
	}
}

// standby checks that m, once healthy, is a replica again.
func standby(t *testing.T, c *patroni.Cluster, m *patroni.Member) {
	t.Helper()
	healthy(t, c)
	if role, err := m.Role(ctx(t)); err != nil || role == patroni.RoleLeader {
		t.Fatalf("%s: role %q, %v; want a replica\n%s", m.Name(), role, err, c.LogTail(40))
	}
}

const db = "kit"

// One cluster goes through every fault in turn; each step leaves it
// healthy for the next. At the end, no process of it is left.
func TestPatroni_StartSwitchoverKill(t *testing.T) {
	var pids []int
	var dir string
	t.Run("cluster", func(t *testing.T) {
		c := patroni.Start(t, patroni.Options{})
		dir = c.Dir()
		logMemory(t, c)
		for _, step := range []struct {
			name string
			run  func(*testing.T, *patroni.Cluster)
		}{
			{"Healthy", stepHealthy},
			{"RowOnSyncStandby", stepRowOnSyncStandby},
			{"Switchover", stepSwitchover},
			{"KillPostgresLeader", stepKillPostgres},
			{"KillPatroniLeader", stepKillPatroni},
			{"EtcdLeaderKilled", stepEtcd},
			{"StopStandbysStrict", stepStop},
			{"PauseSyncStandby", stepPause},
		} {
			began := time.Now()
			ok := t.Run(step.name, func(t *testing.T) { step.run(t, c) })
			t.Logf("%s: %v", step.name, time.Since(began).Round(time.Millisecond))
			if !ok {
				break
			}
		}
		pids = c.PIDs()
	})
	if dir == "" {
		return // skipped
	}
	for _, pid := range pids {
		if s := state(pid); s != "" {
			t.Errorf("pid %d (state %s) outlived the cluster", pid, s)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s outlived the cluster: %v", dir, err)
	}
}

// logMemory logs the cluster's resident memory: RSS counts the shared
// buffers once per process that touched them, PSS shares them out.
func logMemory(t *testing.T, c *patroni.Cluster) {
	var rss, pss int
	pids := c.PIDs()
	for _, pid := range pids {
		rss += kB(filepath.Join("/proc", strconv.Itoa(pid), "status"), "VmRSS:")
		pss += kB(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"), "Pss:")
	}
	t.Logf("%d processes, RSS %d MiB, PSS %d MiB", len(pids), rss/1024, pss/1024)
}

func kB(path, field string) int {
	b, _ := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}

// Start returned one leader, one synchronous standby and one replica, and
// a URL naming all three members.
func stepHealthy(t *testing.T, c *patroni.Cluster) {
	var roles []string
	for _, m := range c.Members() {
		role, err := m.Role(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		roles = append(roles, role)
		if !strings.Contains(c.URL(db), m.Addr()) {
			t.Errorf("URL %s does not name %s at %s", c.URL(db), m.Name(), m.Addr())
		}
	}
	slices.Sort(roles)
	if want := []string{patroni.RoleLeader, patroni.RoleReplica, patroni.RoleSyncStandby}; !slices.Equal(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
	if !strings.Contains(c.URL(db), "target_session_attrs=read-write") {
		t.Errorf("URL %s: want target_session_attrs=read-write", c.URL(db))
	}
	// The settings etcd holds for the cluster, as Patroni serves them.
	resp, err := http.Get("http://" + c.Members()[0].APIAddr() + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var config struct {
		TTL                   int  `json:"ttl"`
		LoopWait              int  `json:"loop_wait"`
		RetryTimeout          int  `json:"retry_timeout"`
		MaximumLagOnFailover  int  `json:"maximum_lag_on_failover"`
		SynchronousMode       bool `json:"synchronous_mode"`
		SynchronousModeStrict bool `json:"synchronous_mode_strict"`
		PostgreSQL            struct {
			UsePgRewind bool `json:"use_pg_rewind"`
		} `json:"postgresql"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&config); err != nil {
		t.Fatal(err)
	}
	if config.TTL != patroni.TTL || config.LoopWait != patroni.LoopWait || config.RetryTimeout != patroni.RetryTimeout ||
		config.MaximumLagOnFailover != patroni.MaximumLagOnFailover || !config.SynchronousMode ||
		!config.SynchronousModeStrict || !config.PostgreSQL.UsePgRewind {
		t.Errorf("GET /config: %+v", config)
	}
}

// A commit that waits for remote_apply is visible on the synchronous
// standby the moment it returns: that standby is the one the leader
// waits for.
func stepRowOnSyncStandby(t *testing.T, c *patroni.Cluster) {
	url := c.NewDatabase(t, db)
	if again := c.NewDatabase(t, db); again != url {
		t.Fatalf("second NewDatabase: %s, want %s", again, url)
	}
	conn := pgtest.Connect(t, url)
	var user string
	if err := conn.QueryRow(ctx(t), "SELECT current_user").Scan(&user); err != nil || user != patroni.AppUser {
		t.Fatalf("current_user %q, %v; want %s", user, err, patroni.AppUser)
	}
	exec(t, conn, "CREATE TABLE t (v int)")
	exec(t, conn, "SET synchronous_commit = remote_apply")
	exec(t, conn, "INSERT INTO t VALUES (1)")
	sync, err := c.SyncStandby(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	sconn := pgtest.Connect(t, sync.AdminURL(db))
	var recovery bool
	if err := sconn.QueryRow(ctx(t), "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil || !recovery {
		t.Fatalf("%s: pg_is_in_recovery %v, %v; want a standby", sync.Name(), recovery, err)
	}
	if n := count(t, sconn); n != 1 {
		t.Fatalf("%s, the synchronous standby: %d rows, want 1", sync.Name(), n)
	}
}

// A switchover to the synchronous standby makes it the leader; the URL
// follows it, and the old leader becomes a replica.
func stepSwitchover(t *testing.T, c *patroni.Cluster) {
	old := leader(t, c)
	sync, err := c.SyncStandby(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Switchover(ctx(t), sync.Name()); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTail(30))
	}
	if l := leader(t, c); l != sync {
		t.Fatalf("leader %s after a switchover to %s", l.Name(), sync.Name())
	}
	conn := pgtest.Connect(t, c.URL(db))
	var port int
	if err := conn.QueryRow(ctx(t), "SELECT inet_server_port()").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(sync.Addr(), ":"+strconv.Itoa(port)) {
		t.Errorf("the URL connected to port %d, not the new leader %s", port, sync.Addr())
	}
	insert(t, c, 2)
	standby(t, c, old)
}

// PostgreSQL killed on the leader: Patroni restarts it, and there is a
// leader again, with every commit.
func stepKillPostgres(t *testing.T, c *patroni.Cluster) {
	l := leader(t, c)
	pid := postmaster(t, l)
	if err := l.KillPostgres(); err != nil {
		t.Fatal(err)
	}
	if s := state(pid); s != "" {
		t.Fatalf("postmaster %d still there (%s) after KillPostgres", pid, s)
	}
	healthy(t, c)
	t.Logf("leader %s after killing %s's PostgreSQL", leader(t, c).Name(), l.Name())
	if again := postmaster(t, l); again == pid {
		t.Fatalf("%s's postmaster is still %d", l.Name(), pid)
	}
	if n := count(t, pgtest.Connect(t, c.URL(db))); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
	insert(t, c, 3)
}

// The leader's Patroni killed: its PostgreSQL runs on, still a primary,
// until the lock expires and the synchronous standby takes over. Started
// again, its Patroni demotes it, and it rejoins as a replica.
func stepKillPatroni(t *testing.T, c *patroni.Cluster) {
	old := leader(t, c)
	pid := postmaster(t, old)
	if err := old.KillPatroni(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next, err := c.WaitLeader(ctx(t), old.Name())
	if err != nil {
		t.Fatalf("%v\n%s", err, c.LogTail(30))
	}
	t.Logf("%s leads %v after %s's Patroni was killed (TTL %d s)", next.Name(), time.Since(killed).Round(time.Millisecond), old.Name(), patroni.TTL)
	if s := state(pid); s == "" {
		t.Fatalf("%s's postmaster %d died with its Patroni", old.Name(), pid)
	}
	var recovery bool
	if err := pgtest.Connect(t, old.AdminURL(db)).QueryRow(ctx(t), "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil || recovery {
		t.Fatalf("%s without Patroni: pg_is_in_recovery %v, %v; want the primary still", old.Name(), recovery, err)
	}
	// Not through the URL: the old primary, first in it perhaps, takes
	// writes it cannot commit, with no synchronous standby of its own.
	insertInto(t, next.AdminURL(db), 4)
	if err := old.StartPatroni(); err != nil {
		t.Fatal(err)
	}
	standby(t, c, old)
	if s := state(pid); s != "" {
		t.Fatalf("%s's old postmaster %d still runs (%s) after rejoining", old.Name(), pid, s)
	}
	if n := count(t, pgtest.Connect(t, c.URL(db))); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
}

// etcd's leader killed: etcd elects another, Patroni's client moves to a
// live member, and nothing else changes. The leader keeps its lock and
// its PostgreSQL through more than a TTL.
func stepEtcd(t *testing.T, c *patroni.Cluster) {
	l := leader(t, c)
	pid := postmaster(t, l)
	e, err := c.EtcdLeader(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	// Writes throughout a TTL and a retry_timeout: a lost lock or a
	// demotion shows within that.
	for v, end := 100, time.Now().Add((patroni.TTL+patroni.RetryTimeout)*time.Second); time.Now().Before(end); v++ {
		insert(t, c, v)
		if now := leader(t, c); now != l {
			t.Fatalf("leader %s after killing %s, was %s", now.Name(), e.Name(), l.Name())
		}
	}
	healthy(t, c)
	if now, again := leader(t, c), postmaster(t, l); now != l || again != pid {
		t.Fatalf("after killing %s: leader %s (pid %d), was %s (pid %d)", e.Name(), now.Name(), again, l.Name(), pid)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	healthy(t, c)
}

// Both standbys stopped: with synchronous_mode_strict the leader's
// commits wait for a standby (wait event SyncRep), and go through once
// one is back.
func stepStop(t *testing.T, c *patroni.Cluster) {
	l := leader(t, c)
	sync, err := c.SyncStandby(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members() {
		if m != l && m != sync {
			if err := m.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, err := m.PostmasterPID(); err == nil {
				t.Fatalf("%s's PostgreSQL runs after Stop", m.Name())
			}
			healthy(t, c) // the leader and its synchronous standby
		}
	}
	if err := sync.Stop(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx := ctx(t)
	go func() {
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err == nil {
			_, err = conn.Exec(ctx, "INSERT INTO t VALUES (5)")
			conn.Close(context.Background())
		}
		done <- err
	}()
	waitSyncRep(t, l)
	select {
	case err := <-done:
		t.Fatalf("a commit with no standby returned (%v)", err)
	default:
	}
	for _, m := range c.Members() {
		if m != l {
			if err := m.StartPatroni(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting commit: %v", err)
	}
	healthy(t, c)
}

// waitSyncRep waits until a backend on l waits for a synchronous standby.
func waitSyncRep(t *testing.T, l *patroni.Member) {
	t.Helper()
	conn := pgtest.Connect(t, l.AdminURL("postgres"))
	for ctx := ctx(t); ; {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no commit waits for a synchronous standby")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// The synchronous standby paused (SIGSTOP): its Patroni's keys expire,
// and the leader makes the other replica synchronous, so commits go on.
// Resumed, it streams again. (Not the leader: Debian's Patroni 3.0.2,
// woken, may take its expired lock back; see Resume.)
func stepPause(t *testing.T, c *patroni.Cluster) {
	l := leader(t, c)
	sync, err := c.SyncStandby(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	pid := postmaster(t, sync)
	if err := sync.Pause(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	insertInto(t, l.AdminURL(db), 6) // returns once another standby confirms it
	next, err := c.SyncStandby(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if next == sync || next == l {
		t.Fatalf("synchronous standby %s while %s is paused", next.Name(), sync.Name())
	}
	if err := sync.Resume(); err != nil {
		t.Fatal(err)
	}
	healthy(t, c)
	if s := state(pid); s == "T" {
		t.Fatalf("resumed postmaster %d still stopped", pid)
	}
	// Streaming, it replays what it missed a moment later.
	conn := pgtest.Connect(t, sync.AdminURL(db))
	for ctx := ctx(t); ; {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE v = 6").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s, resumed: the row written during its pause never arrived", sync.Name())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitStopped waits until SIGSTOP has stopped pid: the signal is
// delivered when the process next runs.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for ctx := ctx(t); state(pid) != "T"; {
		select {
		case <-ctx.Done():
			t.Fatalf("paused postmaster %d in state %q, want T", pid, state(pid))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
