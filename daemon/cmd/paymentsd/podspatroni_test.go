package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	"github.com/paymentsd/paymentsd/daemon/testkit/patroni"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// TestCrash_Pods_Patroni: two pods, each a Patroni cluster of three
// PostgreSQL members in synchronous mode strict with an etcd of its own,
// and the placement directory in a third etcd. Under load on two
// principals of each pod, pod b's leader PostgreSQL is killed, round after
// round, and Patroni fails it over. Pod a's principals see no failed call;
// at the end every key has one intent, none lost, no orphan. It starts
// six PostgreSQL members: make crashtest runs it
// (PAYMENTSD_PATRONI_ROUNDS=crashtest), make test does not.
func TestCrash_Pods_Patroni(t *testing.T) {
	if os.Getenv("PAYMENTSD_PATRONI_ROUNDS") != "crashtest" {
		t.Skip("make crashtest runs it (PAYMENTSD_PATRONI_ROUNDS=crashtest): two Patroni clusters")
	}
	clusters := map[string]*patroni.Cluster{"a": patroni.Start(t, patroni.Options{}), "b": patroni.Start(t, patroni.Options{})}
	w := &podsWorld{etcd: etcdtest.Start(t, 3), urls: map[string]string{}}
	var file strings.Builder
	for _, pod := range []string{"a", "b"} {
		w.urls[pod] = clusters[pod].NewDatabase(t, pgtest.DatabaseName(t.Name()+"/"+pod))
		fmt.Fprintf(&file, "%s %s\n", pod, w.urls[pod])
	}
	w.file = filepath.Join(t.TempDir(), "pods")
	if err := os.WriteFile(w.file, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	onA, onB := principalsOn("a", 2), principalsOn("b", 2)
	load := w.loadReplicas(t, append(onA, onB...))
	rounds := podsRounds()
	for round := range rounds {
		time.Sleep(2 * time.Second)
		failOver(t, clusters["b"], round)
	}
	time.Sleep(2 * time.Second)
	load.halt()
	load.answerAll()
	found := load.check()
	load.mu.Lock()
	failed := load.failedOf
	load.mu.Unlock()
	for _, token := range onA {
		if failed[token] != 0 {
			t.Errorf("pod a's principal %s saw %d failed calls while pod b failed over; want 0", token, failed[token])
		}
	}
	t.Logf("pods on Patroni: %d failovers of pod b; %d keys, %d requests; failed calls of pod b's principals %d, %d; "+
		"of pod a's %d, %d; %d acknowledged lost, %d keys with two intents, %d orphans",
		rounds, len(load.keys), load.requests.Load(), failed[onB[0]], failed[onB[1]], failed[onA[0]], failed[onA[1]],
		len(found.missing), len(found.twoIntents), len(found.orphans))
}

// failOver kills c's leader PostgreSQL and waits until the cluster is
// healthy again under a leader.
func failOver(t *testing.T, c *patroni.Cluster, round int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.KillPostgres(); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("round %d: after the leader's PostgreSQL was killed: %v\n%s", round, err, c.LogTail(40))
	}
}
