package robustness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// The pods fault kinds (TestRobustness_Pods), beside a server's kill and
// its clients' connections cut.
const (
	// SIGKILL one pod's PostgreSQL, and start it again after the hold.
	faultPodKill = "pod-kill"
	// paymentsd move, the real command: a principal to its other pod,
	// under the load.
	faultMove = "principal-move"
)

var podsFaults = []string{faultPodKill, faultMove, faultEtcdKill, faultKill, faultCutClients}

// pods is what the pods runs share: a PostgreSQL cluster per pod and a
// three-member etcd. Each run has databases and a directory prefix of its
// own.
type pods struct {
	clusters [2]*pgtest.Cluster
	etcd     *etcdtest.Cluster
	bin      string // for paymentsd move
	file     string // the run's pods file
	prefix   string // the run's directory prefix
}

// podNames are the pods' names, by index.
var podNames = [2]string{"a", "b"}

func TestRobustness_Pods(t *testing.T) {
	s := readSettings(t)
	s.runs = envInt("PAYMENTSD_ROBUSTNESS_PODS_RUNS", s.runs)
	s.long = s.runs >= 4
	bin := binary(t, "")
	w := &pods{etcd: etcdtest.Start(t, 3), bin: bin}
	w.clusters[0] = podCluster(t)
	w.clusters[1] = podCluster(t)
	suite(t, s, func(i int) run {
		// No paymentsd release: it opens one database, not pods.
		return run{backend: "pods", bin: bin, kinds: podsFaults, pods: w, noRelease: true}
	})
}

// podCluster starts a PostgreSQL cluster for the test.
func podCluster(t *testing.T) *pgtest.Cluster {
	t.Helper()
	c, stop, err := pgtest.Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pods: PostgreSQL: %v", err)
		}
		t.Skipf("pods: PostgreSQL not available: %v", err)
	}
	t.Cleanup(stop)
	return c
}

// args makes the run of seed's databases, pods file and directory
// prefix, places principal 0 on pod a and principal 1 on pod b, and
// returns the servers' flags.
func (w *pods) args(t *testing.T, seed uint64, dir string) []string {
	t.Helper()
	var file strings.Builder
	for i, c := range w.clusters {
		u := c.NewDatabase(t, pgtest.DatabaseName(fmt.Sprintf("robustness pods %d", seed)))
		fmt.Fprintf(&file, "%s %s\n", podNames[i], u)
	}
	w.file = filepath.Join(dir, "pods")
	if err := os.WriteFile(w.file, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	w.prefix = fmt.Sprintf("/robustness-%d/", seed)
	cli := w.client(t)
	defer cli.Close()
	for p := range tokens {
		if _, err := cli.Put(context.Background(), w.prefix+"placement/"+url.PathEscape(devPrincipal(p)), `{"pod":"`+podNames[p%2]+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--pods", w.file, "--placement-etcd", strings.Join(w.etcd.Endpoints(), ","), "--placement-prefix", w.prefix}
}

func (w *pods) client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: w.etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// devPrincipal is the principal dev mode gives principal p's token.
func devPrincipal(p int) string {
	sum := sha256.Sum256([]byte(tokens[p]))
	return "dev:" + hex.EncodeToString(sum[:])
}

// injectPods runs a pods fault to its end, and reports whether f was one.
func (c *cluster) injectPods(f fault) (bool, error) {
	w := c.pods
	switch f.Kind {
	case faultPodKill:
		i := f.Target % 2
		c.note(f.Kind, "SIGKILL pod %s's PostgreSQL, start it again after %v", podNames[i], f.Hold)
		w.clusters[i].Kill(c.t)
		time.Sleep(f.Hold)
		w.clusters[i].StartAgain(c.t)
		c.note(f.Kind, "pod %s's PostgreSQL accepts connections again", podNames[i])
	case faultMove:
		return true, c.move(f.Target % len(tokens))
	case faultEtcdKill:
		m := w.etcd.Member(f.Target % 3)
		c.note(f.Kind, "SIGKILL etcd member %s, start it again after %v", m.Addr(), f.Hold)
		if err := m.Kill(); err != nil {
			return true, err
		}
		time.Sleep(f.Hold)
		if err := m.Start(); err != nil {
			return true, err
		}
		c.note(f.Kind, "etcd member %s runs again", m.Addr())
	default:
		return false, nil
	}
	return true, nil
}

// move moves principal p to the pod it is not on, with the real command.
func (c *cluster) move(p int) error {
	w := c.pods
	cli := w.client(c.t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), w.prefix+"placement/"+url.PathEscape(devPrincipal(p)))
	if err != nil || len(resp.Kvs) != 1 {
		return fmt.Errorf("reading principal %d's placement: %v (%d keys)", p, err, len(resp.Kvs))
	}
	to := podNames[0]
	if strings.Contains(string(resp.Kvs[0].Value), `"pod":"a"`) {
		to = podNames[1]
	}
	c.note(faultMove, "paymentsd move principal %d to pod %s", p, to)
	began := time.Now()
	out, err := exec.Command(w.bin, "move", "--principal", devPrincipal(p), "--to", to, "--pods", w.file,
		"--placement-etcd", strings.Join(w.etcd.Endpoints(), ","), "--placement-prefix", w.prefix).CombinedOutput()
	if err != nil {
		return fmt.Errorf("paymentsd move: %v\n%s", err, out)
	}
	c.note(faultMove, "principal %d lives on pod %s (the move took %v)", p, to, time.Since(began).Round(time.Millisecond))
	return nil
}
