package main

// Health on PostgreSQL when the database cannot write: a full disk under
// a real PostgreSQL, with two replicas of the real binary on it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// TestPostgres_DiskFull_NotServingOnEveryReplicaThenBack fills the disk
// under PostgreSQL's data directory, WAL included, while two replicas
// serve. Creates then fail once a table or an index must grow. Reads still
// work, so only a write tells. Every replica whose create failed reports
// NOT_SERVING, for the server and for its service. Once the filler is
// deleted, every replica reports SERVING again, with no restart, and
// creates succeed. Every create answered OK is still stored: its key
// replays the same intent, and the intents stored are exactly those.
func TestPostgres_DiskFull_NotServingOnEveryReplicaThenBack(t *testing.T) {
	pgtest.Require(t, pgCluster) // skipped without PostgreSQL, failed under CI=true
	c, dir := startClusterOnTmpfs(t, "128m")
	url := c.NewDatabase(t, "paymentsd")
	conn := pgtest.Connect(t, url)
	// A checkpoint on a full disk stops PostgreSQL (PANIC), which then
	// does not start until space is freed. That is a database down, which
	// other tests cover. None is due in this test's minutes; this makes
	// sure of it.
	for _, sql := range []string{`ALTER SYSTEM SET checkpoint_timeout = '1h'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	replicas := []*daemon{start(t, spec{db: url}), start(t, spec{db: url})}
	acked := ackedCreates{}
	for i, d := range replicas {
		waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)
		if key := fmt.Sprintf("before-%d", i); !acked.create(t, d, key) {
			t.Fatalf("create %s before the disk is full failed", key)
		}
	}

	filler := fillUntilFull(t, dir)
	before := len(acked)
	failed := map[*daemon]string{} // a key whose create failed, per replica
	for i, d := range replicas {
		for n := 0; failed[d] == ""; n++ {
			if n == 1000 {
				t.Fatalf("replica %d: 1,000 creates succeeded on a full disk, want UNAVAILABLE once a table must grow", i)
			}
			if key := fmt.Sprintf("full-%d-%d", i, n); !acked.create(t, d, key) {
				failed[d] = key
			}
		}
	}
	began := time.Now()
	for i, d := range replicas {
		waitHealth(t, d, healthpb.HealthCheckResponse_NOT_SERVING)
		if s := serviceHealth(t, d, string(paymentsService)); s != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("replica %d: service %s is %v, want NOT_SERVING", i, paymentsService, s)
		}
		waitLogged(t, d, "the database cannot write", "SQLSTATE 53100")
	}
	t.Logf("%d creates answered OK on the full disk, then each replica's failed with %q; every replica NOT_SERVING %v after",
		len(acked)-before, createErrors(replicas), time.Since(began).Round(10*time.Millisecond))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	for _, d := range replicas {
		waitHealth(t, d, healthpb.HealthCheckResponse_SERVING)
	}
	t.Logf("every replica SERVING %v after the filler was deleted", time.Since(began).Round(10*time.Millisecond))
	for i, d := range replicas {
		for _, key := range []string{failed[d], fmt.Sprintf("after-%d", i)} {
			if !acked.create(t, d, key) {
				t.Errorf("replica %d: create %s once space is back failed", i, key)
			}
		}
	}
	acked.check(t, replicas)
}

// ackedCreates are the creates answered OK, by key, with their intents.
type ackedCreates map[string]string

// diskFullToken is the principal of the disk-full test's creates.
const diskFullToken = "disk-full-pg"

// create creates an intent on d under key, and reports whether it was
// answered OK. A create may fail only with UNAVAILABLE, which a client
// retries. Every key's body is the same.
func (acked ackedCreates) create(t *testing.T, d *daemon, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(withCreds(diskFullToken, key), 30*time.Second)
	defer cancel()
	a := d.create(ctx, seedRequest("100000000"))
	switch {
	case a.err == nil:
		acked[key] = intentID(a)
		return true
	case status.Code(a.err) != codes.Unavailable:
		t.Fatalf("create %s: %v, want OK or UNAVAILABLE", key, a.err)
	}
	return false
}

// check replays every create answered OK, on each replica in turn, and
// wants its intent back. The intents stored must be exactly those.
func (acked ackedCreates) check(t *testing.T, replicas []*daemon) {
	t.Helper()
	var want []string
	i := 0
	for key, id := range acked {
		d := replicas[i%len(replicas)]
		i++
		want = append(want, id)
		ctx, cancel := context.WithTimeout(withCreds(diskFullToken, key), 30*time.Second)
		a := d.create(ctx, seedRequest("100000000"))
		cancel()
		if a.err != nil || !a.replayed() || intentID(a) != id {
			t.Errorf("replay of %s: %v (replayed %t); want its intent %s replayed", key, a.err, a.replayed(), id)
		}
	}
	slices.Sort(want)
	if got := ids(replicas[0].list(t, diskFullToken)); !slices.Equal(got, want) {
		t.Errorf("intents stored %v; want exactly those answered OK %v", got, want)
	}
}

// waitLogged waits up to a minute for d to log a line that holds each of
// parts. Lines reach d.stderr() through a pipe, after the fact they log.
func waitLogged(t *testing.T, d *daemon, parts ...string) {
	t.Helper()
	holds := func(line string) bool {
		return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) })
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if slices.ContainsFunc(strings.Split(d.stderr(), "\n"), holds) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line holds %q after a minute:\n%s", parts, d.stderr())
		}
	}
}

// createErrors are the distinct errors the replicas logged for their
// failed creates.
func createErrors(replicas []*daemon) []string {
	var errs []string
	for _, d := range replicas {
		for _, l := range createLines(d) {
			if l.Err != "" && !slices.Contains(errs, l.Err) {
				errs = append(errs, l.Err)
			}
		}
	}
	return errs
}

// startClusterOnTmpfs starts a PostgreSQL cluster of the test's own. Its
// data directory, WAL included, is on a tmpfs of size (as mount's size=
// takes it), which the test can fill. It returns the cluster and the
// tmpfs. The cluster is removed and the tmpfs unmounted when the test ends.
func startClusterOnTmpfs(t *testing.T, size string) (*pgtest.Cluster, string) {
	t.Helper()
	// Under /tmp, which the postgres user can traverse: pgtest would
	// otherwise put the cluster elsewhere.
	dir, err := os.MkdirTemp("/tmp", "paymentsd-pghealth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v\n%s(the disk-full test needs root and mount)", size, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			exec.Command("umount", "-l", dir).Run() // do not leave it mounted
		}
	})
	// pgtest makes its clusters in os.TempDir(). Nothing else of the test,
	// nor paymentsd, writes there.
	t.Setenv("TMPDIR", dir)
	c, stop, err := pgtest.Start()
	if err != nil {
		t.Fatalf("a PostgreSQL cluster on a tmpfs: %v", err)
	}
	t.Cleanup(stop) // before the unmount: cleanups run last first
	entries, _ := os.ReadDir(dir)
	if !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "pgtest-") }) {
		t.Fatalf("the cluster is not on the tmpfs %s: %v", dir, entries)
	}
	return c, dir
}
