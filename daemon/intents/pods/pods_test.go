package pods_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/intents"
	"github.com/paymentsd/paymentsd/daemon/intents/intenttest"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pods"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/once/oncetest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage/storagetest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// world is what a router's test runs on: a real etcd, and the
// PostgreSQL cluster of each pod.
type world struct {
	etcd     *etcdtest.Cluster
	clusters map[string]*pgtest.Cluster // pod name → its cluster
}

// newWorld starts a one-member etcd, and puts pods a and b on the
// package's cluster.
func newWorld(t *testing.T) world {
	t.Helper()
	c := pgtest.Require(t, cluster)
	return world{etcd: etcdtest.Start(t, 1), clusters: map[string]*pgtest.Cluster{"a": c, "b": c}}
}

// open opens a router over w's pods, a replica's: each pod a database
// named after dir on its cluster, the directory under a prefix of dir's.
// Opening dir again finds the same data. The suites simulate time, so
// the pods take the caller's clock.
func (w world) open(t *testing.T, dir string) *pods.Router {
	t.Helper()
	dc := placement.Config{Endpoints: w.etcd.Endpoints(), Prefix: prefixOf(dir), RequestTimeout: time.Second}
	claimant := pgstore.NewClaimantID()
	var list []config.Pod
	for _, name := range []string{"a", "b"} {
		list = append(list, config.Pod{Name: name, URL: w.clusters[name].NewDatabase(t, pgtest.DatabaseName(dir+"/"+name))})
	}
	r, err := pods.Open(context.Background(), list, dc, func(ctx context.Context, p config.Pod) (intents.Backend, error) {
		return pgintents.Open(ctx, p.URL, &pgstore.Options{CallerClock: true, LockTimeout: 100 * time.Millisecond, ClaimantID: claimant})
	})
	if err != nil {
		t.Fatalf("pods.Open: %v", err)
	}
	return r
}

// prefixOf is the directory's prefix of a router opened on dir.
func prefixOf(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "/t" + hex.EncodeToString(sum[:6]) + "/"
}

// The conformance suites, over two pods: the router is a store as any
// other, whichever pod each scope lands on.
func TestConformance(t *testing.T) {
	w := newWorld(t)
	storagetest.RunTests(t, func(t *testing.T, dir string) storagetest.Store {
		return w.open(t, dir).Records().(storagetest.Store)
	})
}

func TestOnce(t *testing.T) {
	w := newWorld(t)
	oncetest.RunTests(t, func(t *testing.T, dir string) storagetest.Store {
		return w.open(t, dir).Records().(storagetest.Store)
	})
}

func TestIntents(t *testing.T) {
	w := newWorld(t)
	intenttest.RunTests(t, func(t *testing.T, dir string) intenttest.Backend {
		r := w.open(t, dir)
		return intenttest.Backend{Intents: r.Intents(), Records: r.Records(), Close: r.Close}
	})
}
