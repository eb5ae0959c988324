// Package etcdtest starts a real etcd cluster on loopback for tests: n
// members, each a process with its own data directory, which a test kills,
// restarts on its data, and pauses. The placement directory's tests meet
// what production meets: elections, a lost quorum, a member that rejoins.
//
// The binary is Debian's etcd (apt-get install etcd-server). Without it
// Start skips the test, and fails it under CI=true. Every listener is on a
// free loopback port below the ephemeral range, never etcd's 2379/2380, so
// a system etcd or another test binary's cluster does not collide. The
// flags are those of the patroni kit's etcd (daemon/testkit/patroni).
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// startTimeout bounds the wait for a new cluster to be healthy.
const startTimeout = time.Minute

// errMissing marks a start that failed for want of the binary: a skip,
// except under CI.
var errMissing = errors.New("etcd not found on PATH (apt-get install etcd-server)")

// Cluster is n etcd members on loopback.
type Cluster struct {
	bin     string
	dir     string
	token   string
	members []*Member
}

// Start starts an n-member cluster in t.TempDir() and returns it once
// every member reports itself healthy. It skips the test without etcd
// (fails it under CI=true). The test's end kills every member.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c, stop, err := New(t.TempDir(), n)
	if errors.Is(err, errMissing) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcdtest: %v, and CI=true, so this test fails", err)
		}
		t.Skipf("etcdtest: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// New starts an n-member cluster in dir, for a program such as the bench
// that has no testing.TB. It returns once every member is healthy. stop
// kills every member; dir stays the caller's.
func New(dir string, n int) (c *Cluster, stop func() error, err error) {
	if n < 1 {
		return nil, nil, fmt.Errorf("etcdtest: %d members: want at least one", n)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, nil, errMissing
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, nil, err
	}
	c = &Cluster{bin: bin, dir: dir, token: fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), ports[0])}
	for i := range n {
		name := "etcd" + strconv.Itoa(i)
		c.members = append(c.members, &Member{c: c, name: name, dir: filepath.Join(dir, name),
			log: filepath.Join(dir, name+".log"), clientPort: ports[i], peerPort: ports[n+i]})
	}
	for _, m := range c.members {
		m.mu.Lock()
		err := m.start()
		m.mu.Unlock()
		if err != nil {
			c.halt()
			return nil, nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		c.halt()
		return nil, nil, fmt.Errorf("%w\n%s", err, c.LogTail(20))
	}
	return c, c.halt, nil
}

// Endpoints are the client URLs of every member, running or not, as a
// client is configured in production.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// Member is member i, from 0.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// WaitHealthy waits until every running member that is not paused reports
// itself healthy: it has a leader and serves reads. A restarted member
// passes once it has rejoined.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for _, m := range c.members {
		if !m.serving() {
			continue
		}
		if err := m.waitHealthy(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Leader waits until a member answers that it leads, and returns its
// index. Killed and paused members are not asked. Of two members that
// each think they lead, the one of the later term does.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		return -1, fmt.Errorf("etcdtest: %w", err)
	}
	defer cli.Close()
	for {
		if i := c.leader(ctx, cli); i >= 0 {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("etcdtest: no member leads: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leader asks each serving member once whether it leads, and returns the
// index of the one of the latest term that does, or -1.
func (c *Cluster) leader(ctx context.Context, cli *clientv3.Client) int {
	found, term := -1, uint64(0)
	for i, m := range c.members {
		if !m.serving() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.Endpoint())
		cancel()
		if err == nil && st.Leader == st.Header.MemberId && st.RaftTerm >= term {
			found, term = i, st.RaftTerm
		}
	}
	return found
}

// LogTail is the last n lines of every member's log, for a failure
// message.
func (c *Cluster) LogTail(n int) string {
	var b strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", m.name, m.log, tail(m.log, n))
	}
	return b.String()
}

// halt kills every member, at the end.
func (c *Cluster) halt() error {
	var errs []error
	for _, m := range c.members {
		errs = append(errs, m.halt())
	}
	return errors.Join(errs...)
}
