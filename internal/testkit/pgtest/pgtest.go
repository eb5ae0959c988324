// Package pgtest starts a real PostgreSQL for tests and removes it
// afterwards. The PostgreSQL store is then tested against the server it
// runs on in production, not against a fake. Crashes are tested too
// (Restart).
//
// Each test binary (package) gets its own cluster. It lives in a fresh
// temporary directory on its own loopback port, so `go test ./...` may run
// packages in parallel. Binaries are found on PATH, else in the newest
// /usr/lib/postgresql/*/bin (Debian's place). PostgreSQL refuses to run as
// root. When the tests run as root, the cluster runs as the postgres user
// through runuser.
//
// A package's TestMain is usually just:
//
//	var cluster *pgtest.Cluster
//
//	func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }
//
// and each test that needs the server starts with
// c := pgtest.Require(t, cluster).
//
// A test of a failover starts a Pair of its own. That is a primary with a
// streaming standby, synchronous or not, to kill and promote.
package pgtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
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

// User and Password are what the tests connect as. The password is real:
// host connections use scram-sha-256. Tests can thus check it never leaks
// into logs, errors or metrics.
const (
	User     = "postgres"
	Password = "pgtest-secret"
)

// runAs is the account the server runs as when the tests run as root.
const runAs = "postgres"

// dirPrefix names the cluster directories, and the owner's pid follows it.
// A later Start can then remove the clusters of test binaries that died
// without stopping theirs: a go test timeout, a kill.
const dirPrefix = "pgtest-"

// Cluster is a throwaway PostgreSQL server.
type Cluster struct {
	bin  string // directory of initdb, pg_ctl and postgres
	root string // temporary directory: data/ and the password file
	data string // data directory; the server log is data/server.log
	port int
	cred *credential // nil when not root: commands run as ourselves

	mu      sync.Mutex // serializes Stop, StartAgain and NewDatabase
	running bool
	frozen  bool // by Freeze: running, but nothing answers
}

// credential is the account to run the server as, for chown.
type credential struct{ uid, gid int }

// startErr is why Main could not start the package's cluster, for Require's
// skip message.
var startErr error

// Start starts a cluster for the tests of a package. It returns it with a
// stop func for TestMain to call after m.Run. When PostgreSQL cannot be
// started (binaries missing, ...) it returns an error. Callers decide what
// to do (see Require).
func Start() (*Cluster, func(), error) {
	c, err := newCluster()
	if err != nil {
		return nil, nil, err
	}
	stop := sync.OnceFunc(c.remove)
	if err := c.init(); err != nil {
		stop()
		return nil, nil, err
	}
	if err := c.startOnFreePort(); err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

// newCluster finds the binaries and the account to run them as. It makes
// the cluster's root directory, which init or a base backup fills.
func newCluster() (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(runAs)
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root, PostgreSQL needs the %q user to run as: %w", runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &credential{uid, gid}
	}
	base := os.TempDir()
	if c.cred != nil && !traversable(base) {
		base = "/tmp" // the postgres user must reach the data directory
	}
	sweep(base)
	c.root, err = os.MkdirTemp(base, fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c.data = filepath.Join(c.root, "data")
	if c.cred != nil {
		if err := os.Chown(c.root, c.cred.uid, c.cred.gid); err != nil {
			os.RemoveAll(c.root)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	return c, nil
}

// remove stops the server if it runs and removes its directory.
func (c *Cluster) remove() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		if err := c.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the cluster: %v\n", err)
		}
	}
	os.RemoveAll(c.root)
}

// startOnFreePort starts the server on a free port. Another package's
// cluster, say, may take a port between our probe and the server's bind.
// So it tries a few.
func (c *Cluster) startOnFreePort() error {
	var err error
	for try := 0; ; try++ {
		if c.port, err = freePort(); err == nil {
			err = c.start()
		}
		if err == nil || !errors.Is(err, errAddrInUse) || try == 4 {
			return err
		}
	}
}

// Main is the TestMain body most packages want. It starts the cluster,
// runs the tests, stops the cluster, and exits. When the cluster cannot
// start under CI (CI=true), it prints why and exits 1. A missing
// PostgreSQL then fails the run, never a silent skip. Elsewhere it prints
// a clear line, and the tests that call Require are skipped.
func Main(m *testing.M, c **Cluster) { os.Exit(Run(m, c)) }

// Run is Main without the exit, for a TestMain with work of its own after
// the tests. It returns m.Run's code.
func Run(m *testing.M, c **Cluster) int {
	if port, err := strconv.Atoi(os.Getenv(parentEnv)); err == nil {
		*c = &Cluster{port: port, running: true} // a child of a test: its parent's cluster
		return m.Run()
	}
	cluster, stop, err := Start()
	if err == nil {
		// A test that runs its own binary again, to kill it, hands the
		// child this cluster.
		os.Setenv(parentEnv, strconv.Itoa(cluster.port))
	}
	if err != nil {
		why := strings.TrimPrefix(err.Error(), "pgtest: ")
		if ci() {
			fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL did not start and CI=true, so this run fails: %s\n", why)
			return 1
		}
		fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL did not start; the tests that need it are SKIPPED: %s\n", why)
		startErr = err
	}
	*c = cluster
	code := m.Run()
	if stop != nil {
		stop()
	}
	return code
}

// parentEnv hands a test binary's cluster to the copies of it that its
// tests start. A copy uses the cluster and never stops it.
const parentEnv = "PAYMENTSD_PGTEST_PARENT_PORT"

// Connect opens a connection of the test's own to url, a cluster's or a
// pair's database. The test checks or holds with it what the code under
// test does not. It fails t if that takes over 30 s. The connection is
// closed when t ends.
func Connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Require returns the package's cluster or skips the test. It never skips
// under CI, where Main has already failed. A nil cluster there is a
// TestMain that does not call Main, and fails the test.
func Require(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	if c != nil {
		return c
	}
	if ci() {
		t.Fatalf("pgtest: no cluster under CI=true (does TestMain call pgtest.Main?): %v", startErr)
	}
	if startErr != nil {
		t.Skipf("pgtest: PostgreSQL not available: %v", startErr)
	}
	t.Skip("pgtest: no cluster (does TestMain call pgtest.Main?)")
	return nil
}

func ci() bool { return os.Getenv("CI") == "true" }

var validName = regexp.MustCompile(`^[A-Za-z0-9_]{1,63}$`)

// NewDatabase creates a database named name if it does not exist, and
// returns its URL. The URL contains the password. A name is at most 63
// letters, digits and underscores; see DatabaseName for arbitrary strings.
// Calling it twice with one name returns the same database. A test can
// thus reopen its data.
func (c *Cluster) NewDatabase(t testing.TB, name string) string {
	t.Helper()
	url, err := c.CreateDatabase(name)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// CreateDatabase is NewDatabase for code without a testing.TB, such as a
// benchmark driver. It returns the error instead of failing a test.
func (c *Cluster) CreateDatabase(name string) (string, error) {
	if !validName.MatchString(name) {
		return "", fmt.Errorf("pgtest: database name %q: want 1 to 63 letters, digits or underscores (see DatabaseName)", name)
	}
	// One at a time. CREATE DATABASE copies template1, and fails if another
	// session is in it. Two creates of one name race on the catalog.
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: connecting to create database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P04" {
		err = nil // duplicate_database: reopen it
	}
	if err != nil {
		return "", fmt.Errorf("pgtest: creating database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// DatabaseName derives a valid database name from any string, a test's
// name say. It keeps s's letters and digits, lowercased and cut short, to
// stay readable in logs. A hash of all of s follows, so distinct strings
// get distinct names. The same s always gives the same name.
func DatabaseName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() == 30 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(s))
	return "t_" + b.String() + "_" + hex.EncodeToString(sum[:6])
}

// URL returns the URL of database name (no creation). It contains the
// password: do not log it where the password must not appear.
func (c *Cluster) URL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(User, Password),
		Host:     c.Addr(),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr is host:port of the server.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// Restart stops the server with pg_ctl's immediate mode, and starts it
// again on the same port. That is a crash: in-flight transactions are
// lost, and WAL replayed at start. It returns once the server accepts
// connections.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.Stop(t)
	c.StartAgain(t)
}

// Stop stops the server in immediate mode, a crash, without restarting it.
// Tests see what clients do while the database is down. StartAgain brings
// it back.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	c.bringDown(t, "Stop", c.stop)
}

// bringDown runs how, which stops the running server, for operation op.
func (c *Cluster) bringDown(t testing.TB, op string, how func() error) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		t.Fatalf("pgtest: %s: the server is not running", op)
	}
	if err := how(); err != nil {
		t.Fatal(err)
	}
}

// StartAgain starts a server stopped by Stop, on the same port. It returns
// once the server accepts connections.
func (c *Cluster) StartAgain(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		t.Fatal("pgtest: StartAgain: the server is running")
	}
	c.waitReaped() // after Kill
	if err := c.startRetrying(); err != nil {
		t.Fatal(err)
	}
}

// startRetrying starts the server on its port. Someone else may hold the
// port for a moment (see freePort). It retries for a while rather than
// fail on a coincidence. The caller holds c.mu or owns c alone.
func (c *Cluster) startRetrying() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.start()
		if err == nil || !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// init makes the data directory: trust on the unix socket, scram-sha-256
// with Password over TCP. A password in the URL is thus really checked.
func (c *Cluster) init() error {
	pwfile := filepath.Join(c.root, "pwfile")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(pwfile, c.cred.uid, c.cred.gid); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	// --no-sync: the cluster is thrown away, so its creation need not be
	// durable. The server itself keeps fsync on.
	out, err := c.run("initdb", "-D", c.data, "-U", User, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	// Appended settings override initdb's. Connections are TCP on loopback;
	// the socket lives in the data directory, not /var/run/postgresql.
	// After a Restart (a crash), the server syncs its data directory
	// before recovery. It does so with syncfs, in one call. A fsync of
	// every file took longer than a minute on a loaded machine.
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
fsync = on
synchronous_commit = on
recovery_init_sync_method = syncfs
max_connections = 300
shared_buffers = 128MB
logging_collector = off
log_min_messages = warning
`, c.data)
	return appendFile(filepath.Join(c.data, "postgresql.conf"), conf)
}

// errAddrInUse marks a start that failed only because the port was taken.
var errAddrInUse = errors.New("address already in use")

// start runs pg_ctl start on c.port and waits until the server accepts
// connections. The caller holds c.mu or owns c alone.
func (c *Cluster) start() error {
	logfile := c.logFile()
	size := fileSize(logfile) // show only this start's part of the log
	out, err := c.run("pg_ctl", "-D", c.data, "-l", logfile, "-o", "-p "+strconv.Itoa(c.port), "-w", "-t", "180", "start")
	if err != nil {
		tail := logTail(logfile, size)
		if strings.Contains(tail, "already in use") {
			err = fmt.Errorf("%w (%v)", errAddrInUse, err)
		}
		return fmt.Errorf("pgtest: pg_ctl start on port %d: %w\n%s\nserver log:\n%s", c.port, err, out, tail)
	}
	c.running = true
	return nil
}

// stop stops the server in immediate mode, like a crash. It takes no
// checkpoint and waits for no client. The caller holds c.mu.
func (c *Cluster) stop() error {
	if c.frozen {
		return c.kill() // pg_ctl's signal would wait for it in vain
	}
	out, err := c.run("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	c.running = false
	return nil
}

func (c *Cluster) logFile() string { return filepath.Join(c.data, "server.log") }

// run runs a PostgreSQL program, as the postgres user when we are root.
func (c *Cluster) run(prog string, args ...string) ([]byte, error) {
	return runIn(c.root, c.cred != nil, filepath.Join(c.bin, prog), args...)
}

func runIn(dir string, asPostgres bool, path string, args ...string) ([]byte, error) {
	if asPostgres {
		args = append([]string{"-u", runAs, "--", path}, args...)
		path = "runuser"
	}
	cmd := exec.Command(path, args...)
	// A directory the server's user can enter; the test's is not always
	// one. The wait for output pipes is bounded, should pg_ctl's server
	// ever keep them open.
	cmd.Dir = dir
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

// findBin finds the directory of initdb, pg_ctl and postgres: PATH first,
// else the newest /usr/lib/postgresql/*/bin. Symlinks are followed so that
// the three come from one installation.
func findBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); complete(dir) {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	// Newest first by major version: "15" beats "9.6".
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
		return v
	}
	slices.SortFunc(matches, func(a, b string) int {
		if va, vb := version(a), version(b); va != vb {
			if va > vb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, m := range matches {
		if dir := filepath.Dir(m); complete(dir) {
			return dir, nil
		}
	}
	return "", errors.New("pgtest: PostgreSQL not found: no initdb on PATH or in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

func complete(dir string) bool {
	for _, prog := range []string{"initdb", "pg_ctl", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, prog)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// freePort picks a loopback port that is free now. It prefers ports below
// the kernel's ephemeral range. Any client's outgoing connection may take
// a port from that range while the server is down in Restart. A probe
// with :0 is the fallback.
func freePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low > 11000 {
		for range 20 {
			p := 10000 + rand.IntN(low-10000)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// traversable reports whether every directory from dir up to / lets others
// through. The postgres user needs that to reach a data directory there.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// sweep stops and removes the clusters left in base by test binaries that
// died without stopping them. Their pid, in the directory's name, is gone.
// Killed runs thus do not pile up servers.
func sweep(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		root := filepath.Join(base, e.Name())
		data := filepath.Join(root, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			if bin, err := findBin(); err == nil {
				runIn(root, os.Geteuid() == 0, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
			}
		}
		os.RemoveAll(root)
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail is the server log written since offset from, at most its last 4
// KiB. It says why a start failed.
func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	if from > int64(len(b)) {
		from = 0
	}
	b = b[from:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// appendFile appends s to the file at path.
func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_, err = f.WriteString(s)
	if err2 := f.Close(); err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}
