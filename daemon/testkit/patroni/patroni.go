// Package patroni starts a real Patroni cluster on loopback for tests:
// three etcd members and three PostgreSQL members under Patroni, in
// synchronous mode. A failover test then meets what production meets:
// leader elections through etcd, a synchronous standby, pg_rewind and
// clients that follow the leader through a multi-host URL.
//
// Binaries come from Debian's packages (patroni, etcd-server,
// etcd-client, postgresql). Without them Start skips the test, and fails
// it under CI=true. PostgreSQL refuses root: when the tests run as root,
// Patroni and so PostgreSQL run as the postgres user; etcd runs as the
// test. Every listener is on its own free loopback port below the
// ephemeral range, never etcd's 2379/2380, so a system etcd or another
// test binary's cluster does not collide.
//
// A test starts one cluster and shares it between its steps: a start
// takes tens of seconds. The helpers that fault it (KillPostgres,
// KillPatroni, Pause, Stop, Etcd(i).Kill, Switchover) return errors
// rather than fail a test, so that any test, subtest or goroutine may
// call them; those that wait take a context for their deadline.
package patroni

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The cluster's roles. The passwords are real: TCP connections use
// scram-sha-256, so a test can check none leaks.
const (
	Superuser           = "postgres"
	SuperuserPassword   = "patroni-super-secret"
	ReplicationUser     = "replicator"
	ReplicationPassword = "patroni-repl-secret"
	AppUser             = "app" // owns the databases NewDatabase creates
	AppPassword         = "patroni-app-secret"
)

// runAs is the account Patroni runs as when the tests run as root.
const runAs = "postgres"

// dirPrefix names the cluster directories, and the owner's pid follows
// it. A later Start can then remove the clusters of test binaries that
// died without stopping theirs.
const dirPrefix = "patronikit-"

// Options change a cluster from the defaults.
type Options struct {
	// NotStrict turns synchronous_mode_strict off. With no synchronous
	// standby left, the leader then commits alone instead of waiting.
	NotStrict bool
	// Timeout bounds Start's wait for a healthy cluster. Zero is 3
	// minutes: the first start runs initdb and two base backups.
	Timeout time.Duration
}

// Cluster is three etcd members and three PostgreSQL members under
// Patroni, removed at the test's end.
type Cluster struct {
	opts       Options
	root       string // temporary directory of everything the cluster writes
	pgBin      string // directory of initdb, pg_ctl, postgres
	patroniBin string
	ctlBin     string
	etcdBin    string
	cred       *syscall.Credential // nil when not root
	ctlConf    string
	http       *http.Client

	etcds   []*Etcd
	members []*Member

	dbMu sync.Mutex // serializes CREATE DATABASE, which copies template1
}

// errMissing marks a start that failed for want of a binary: a skip,
// except under CI.
var errMissing = errors.New("missing binary")

// Start starts a cluster and returns it healthy: one leader, two
// streaming replicas, one of them the synchronous standby. It skips the
// test when a binary is missing (fails under CI=true). It fails it with
// the logs' tails if the cluster is not healthy within opts.Timeout.
// The test's end kills every process and removes the directory.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	c, err := newCluster(opts)
	if errors.Is(err, errMissing) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v, and CI=true, so this test fails", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		began := time.Now()
		if err := c.teardown(); err != nil {
			t.Error(err)
		}
		t.Logf("patroni: cluster torn down in %v", time.Since(began).Round(time.Millisecond))
	})
	began := time.Now()
	if err := c.boot(); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTail(40))
	}
	t.Logf("patroni: cluster healthy in %v (in %s)", time.Since(began).Round(time.Millisecond), c.root)
	return c
}

// newCluster finds the binaries, makes the directory and lays the
// members out on free ports. It starts nothing.
func newCluster(opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	if err := c.findBins(); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(runAs)
		if err != nil {
			return nil, fmt.Errorf("patroni: running as root, PostgreSQL needs the %q user to run as: %w", runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	base := os.TempDir()
	if c.cred != nil && !traversable(base) {
		base = "/tmp" // the postgres user must reach the data directories
	}
	sweep(base)
	var err error
	if c.root, err = os.MkdirTemp(base, fmt.Sprintf("%s%d-", dirPrefix, os.Getpid())); err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	if err := c.layOut(); err != nil {
		os.RemoveAll(c.root)
		return nil, err
	}
	return c, nil
}

// layOut names the members, gives each its ports and directory and writes
// the configurations.
func (c *Cluster) layOut() error {
	ports, err := freePorts(12)
	if err != nil {
		return err
	}
	if err := c.chown(c.root); err != nil {
		return err
	}
	for i := range 3 {
		name := "etcd" + strconv.Itoa(i)
		c.etcds = append(c.etcds, &Etcd{c: c, name: name, dir: filepath.Join(c.root, name),
			log: filepath.Join(c.root, name+".log"), clientPort: ports[i], peerPort: ports[3+i]})
	}
	for i := range 3 {
		name := "pg" + strconv.Itoa(i)
		dir := filepath.Join(c.root, name)
		m := &Member{c: c, name: name, dir: dir, data: filepath.Join(dir, "data"),
			conf: filepath.Join(dir, "patroni.yml"), log: filepath.Join(c.root, name+".log"),
			port: ports[6+i], apiPort: ports[9+i]}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("patroni: %w", err)
		}
		if err := c.chown(dir); err != nil {
			return err
		}
		if err := c.writeConfig(m); err != nil {
			return err
		}
		c.members = append(c.members, m)
	}
	c.ctlConf = filepath.Join(c.root, "patronictl.yml")
	if err := os.WriteFile(c.ctlConf, fmt.Appendf(nil, ctlConfig, c.etcdHosts()), 0o644); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	return nil
}

// boot starts etcd, then the three Patronis, which race for the
// initialize key: the winner runs initdb, the others take base backups of
// it. Once healthy, the application's role is created.
func (c *Cluster) boot() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	for _, e := range c.etcds {
		e.mu.Lock()
		err := e.start()
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, e := range c.etcds {
		if err := e.waitHealthy(ctx); err != nil {
			return err
		}
	}
	for _, m := range c.members {
		if err := m.StartPatroni(); err != nil {
			return err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return err
	}
	return c.createAppUser(ctx)
}

// createAppUser creates the application's role on the leader. Its
// password is checked over TCP like any client's.
func (c *Cluster) createAppUser(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.adminURL("postgres"))
	if err != nil {
		return fmt.Errorf("patroni: connecting to the leader: %w", err)
	}
	defer conn.Close(context.Background())
	sql := fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", pgx.Identifier{AppUser}.Sanitize(), AppPassword)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("patroni: creating role %s: %w", AppUser, err)
	}
	return nil
}

// teardown kills every process of the cluster and removes its
// directory. Patroni goes first, lest it restart what is killed. It
// returns an error naming any process still running after that.
func (c *Cluster) teardown() error {
	// The members at once: each may wait seconds for its PostgreSQL.
	errc := make(chan error, len(c.members))
	for _, m := range c.members {
		go func() { errc <- m.halt() }()
	}
	var errs []error
	for range c.members {
		errs = append(errs, <-errc)
	}
	for _, e := range c.etcds {
		errs = append(errs, e.halt())
	}
	// A tool a killed Patroni ran (pg_basebackup, pg_rewind) may be left.
	if left := killStray(c.root + "/"); len(left) > 0 {
		errs = append(errs, fmt.Errorf("patroni: processes of the cluster still run after SIGKILL: %v", describe(left)))
	}
	errs = append(errs, os.RemoveAll(c.root))
	return errors.Join(errs...)
}

// describe lists pids with their command lines, for an error.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		fmt.Fprintf(&b, "\n  %d %s", pid, cmdline(pid))
	}
	return b.String()
}

// URL is the application user's URL of database db, naming all three
// members. With target_session_attrs=read-write a client tries them in
// turn and keeps the one that accepts writes: the leader, wherever it
// is. connect_timeout, per member, keeps a paused member from holding a
// connect forever. The URL contains the password.
func (c *Cluster) URL(db string) string {
	return c.url(url.UserPassword(AppUser, AppPassword), db)
}

// adminURL is URL for the superuser.
func (c *Cluster) adminURL(db string) string {
	return c.url(url.UserPassword(Superuser, SuperuserPassword), db)
}

func (c *Cluster) url(user *url.Userinfo, db string) string {
	hosts := make([]string, len(c.members))
	for i, m := range c.members {
		hosts[i] = m.Addr()
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     user,
		Host:     strings.Join(hosts, ","),
		Path:     "/" + db,
		RawQuery: "sslmode=disable&target_session_attrs=read-write&connect_timeout=10",
	}
	return u.String()
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_]{1,63}$`)

// NewDatabase creates database name on the leader, owned by the
// application user, unless it exists, and returns its URL (URL) once
// every running member has it. A name is 1 to 63 letters, digits and
// underscores (pgtest.DatabaseName makes one of any string). It fails t
// if that takes over a minute.
func (c *Cluster) NewDatabase(t testing.TB, name string) string {
	t.Helper()
	if !validName.MatchString(name) {
		t.Fatalf("patroni: database name %q: want 1 to 63 letters, digits or underscores", name)
	}
	c.dbMu.Lock()
	defer c.dbMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.adminURL("postgres"))
	if err != nil {
		t.Fatalf("patroni: connecting to the leader to create database %s: %v", name, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" OWNER "+pgx.Identifier{AppUser}.Sanitize())
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P04" {
		err = nil // duplicate_database: reopen it
	}
	if err != nil {
		t.Fatalf("patroni: creating database %s: %v", name, err)
	}
	// pgx stops at the first member that says the database does not exist
	// (3D000) instead of trying the next, and a replica replays CREATE
	// DATABASE a moment after the leader commits it. So every member has
	// it before the URL is handed out.
	for _, m := range c.members {
		if !m.awake() {
			continue
		}
		if err := poll(ctx, "database "+name+" on "+m.name, func() (bool, string) {
			conn, err := pgx.Connect(ctx, m.AdminURL(name))
			if err != nil {
				return false, err.Error()
			}
			conn.Close(context.Background())
			return true, ""
		}); err != nil {
			t.Fatal(err)
		}
	}
	return c.URL(name)
}

// Members are the three PostgreSQL members, pg0 to pg2, in a fixed order.
func (c *Cluster) Members() []*Member { return slices.Clone(c.members) }

// Member is the member named name, or nil.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// Etcd is etcd member i, 0 to 2.
func (c *Cluster) Etcd(i int) *Etcd { return c.etcds[i] }

// Dir is the cluster's directory: each member's log (pg0.log, with its
// PostgreSQL's), each etcd's, the configurations and data.
func (c *Cluster) Dir() string { return c.root }

// LogTail is the last n lines of every member's and etcd's log and
// patronictl list, for a test's failure message.
func (c *Cluster) LogTail(n int) string {
	var b strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", m.name, m.log, tail(m.log, n))
	}
	for _, e := range c.etcds {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", e.name, e.log, tail(e.log, n/4))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.patronictl(ctx, "list")
	fmt.Fprintf(&b, "--- patronictl list (%v):\n%s", err, out)
	return b.String()
}

// PIDs are the cluster's processes now: etcd, Patroni, PostgreSQL and any
// tool they run. A test records them to check that none outlives the
// cluster.
func (c *Cluster) PIDs() []int {
	pids := mentioning(c.root + "/")
	for _, m := range c.members {
		if pid, pgid, err := m.postmaster(); err == nil {
			pids = append(pids, inGroup(pgid)...) // backends name no directory
			pids = append(pids, children(pid)...)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// chown gives path to the account Patroni runs as.
func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	return nil
}

// patronictl runs patronictl with the cluster's configuration.
func (c *Cluster) patronictl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.ctlBin, append([]string{"-c", c.ctlConf}, args...)...)
	cmd.Dir = c.root
	cmd.Env = minimalEnv(c.root)
	cmd.WaitDelay = 10 * time.Second
	return cmd.CombinedOutput()
}

// minimalEnv is the environment of every process the kit starts. The
// test's own could steer them: PATRONI_* and ETCD_* variables override
// their configuration, PG* ones libpq's defaults.
func minimalEnv(home string) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
}
