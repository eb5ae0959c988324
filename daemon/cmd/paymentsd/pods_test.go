package main

// paymentsd on two pods: two PostgreSQL clusters, each principal placed
// on one by a directory in a real three-member etcd.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/daemon/storehealth"
	"github.com/paymentsd/paymentsd/daemon/testkit/etcdtest"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/wire"
)

// podsWorld is what the pods tests run on: pod a a database on the
// package's cluster, pod b one on a cluster of its own (so that it can be
// killed alone), and a three-member etcd.
type podsWorld struct {
	etcd     *etcdtest.Cluster
	clusters map[string]*pgtest.Cluster
	urls     map[string]string
	file     string // the pods file
}

func newPodsWorld(t *testing.T) *podsWorld {
	t.Helper()
	a := pgtest.Require(t, pgCluster)
	b, stop, err := pgtest.Start()
	if err != nil {
		t.Fatalf("pod b's PostgreSQL: %v", err)
	}
	t.Cleanup(stop)
	w := &podsWorld{etcd: etcdtest.Start(t, 3), clusters: map[string]*pgtest.Cluster{"a": a, "b": b}, urls: map[string]string{}}
	var file strings.Builder
	for _, pod := range []string{"a", "b"} {
		w.urls[pod] = w.clusters[pod].NewDatabase(t, pgtest.DatabaseName(t.Name()+"/"+pod))
		fmt.Fprintf(&file, "%s %s\n", pod, w.urls[pod])
	}
	w.file = filepath.Join(t.TempDir(), "pods")
	if err := os.WriteFile(w.file, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// spec is a replica's on w.
func (w *podsWorld) spec() spec {
	return spec{pods: w.file, args: []string{"--placement-etcd", strings.Join(w.etcd.Endpoints(), ","), "--db-pool", "4"}}
}

// principalsOn returns the tokens of n principals that a directory of
// pods a and b of weight 1 places on pod.
func principalsOn(pod string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		token := fmt.Sprintf("merchant-%d", i)
		if got, _ := placement.Choose(devPrincipal(token), map[string]int{"a": 1, "b": 1}, nil); got == pod {
			out = append(out, token)
		}
	}
	return out
}

// intentsOn returns the intent ids pod's database holds, by owner's
// token (of those the test gives).
func (w *podsWorld) intentsOn(t *testing.T, pod string, tokens ...string) map[string][]string {
	t.Helper()
	tokenOf := map[string]string{}
	for _, token := range tokens {
		tokenOf[devPrincipal(token)] = token
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, w.urls[pod])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT owner, id FROM payment_intents ORDER BY owner, id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for rows.Next() {
		var owner, id string
		if err := rows.Scan(&owner, &id); err != nil {
			t.Fatal(err)
		}
		out[tokenOf[owner]] = append(out[tokenOf[owner]], id)
	}
	return out
}

// TestPods_PrincipalsSpread_ReplayOnAnyReplica: principals of both pods
// create on one replica; the other replays each key's answer byte for
// byte and lists the same intents; each principal's intents are all in
// its pod's database.
func TestPods_PrincipalsSpread_ReplayOnAnyReplica(t *testing.T) {
	w := newPodsWorld(t)
	one, two := start(t, w.spec()), start(t, w.spec())
	principals := append(principalsOn("a", 3), principalsOn("b", 3)...)
	for _, p := range principals {
		first := one.createSeed(p, "k1", "100000000")
		again := two.createSeed(p, "k1", "100000000")
		if first.err != nil || again.err != nil || !again.replayed() {
			t.Fatalf("%s: create %v, then on the other replica %v (replayed %t)", p, first.err, again.err, again.replayed())
		}
		if string(deterministic(t, first.resp)) != string(deterministic(t, again.resp)) {
			t.Errorf("%s: the other replica's replay differs:\n%v\n%v", p, first.resp, again.resp)
		}
		if got := two.list(t, p); len(got) != 1 || got[0].Id != first.resp.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id {
			t.Errorf("%s: the other replica lists %v", p, got)
		}
	}
	a, b := w.intentsOn(t, "a", principals...), w.intentsOn(t, "b", principals...)
	for i, p := range principals {
		home, away := a, b
		if i >= 3 {
			home, away = b, a
		}
		if len(home[p]) != 1 || len(away[p]) != 0 {
			t.Errorf("%s: %d intents on its pod, %d on the other; want 1 and 0", p, len(home[p]), len(away[p]))
		}
	}
}

// TestPods_ConcurrentFirstCreates_ThreeReplicas_PlacedOnce: the first
// creates of new principals arrive on three replicas at once, the same
// key and other keys. Each principal is placed once, on one pod, and has
// one intent per key.
func TestPods_ConcurrentFirstCreates_ThreeReplicas_PlacedOnce(t *testing.T) {
	w := newPodsWorld(t)
	ds := []*daemon{start(t, w.spec()), start(t, w.spec()), start(t, w.spec())}
	principals := []string{"racer-1", "racer-2", "racer-3", "racer-4"}
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for _, p := range principals {
		for i, d := range ds {
			for j := range 3 {
				wg.Go(func() {
					<-begin
					key := []string{"same", fmt.Sprintf("own-%d-%d", i, j)}[j%2]
					for attempt := 0; ; attempt++ {
						a := d.createSeed(p, key, "100000000")
						if a.err == nil || attempt == 50 {
							if a.err != nil {
								t.Errorf("%s %s on replica %d: %v", p, key, i, a.err)
							}
							return
						}
						time.Sleep(20 * time.Millisecond) // ABORTED: the same key in flight elsewhere
					}
				})
			}
		}
	}
	close(begin)
	wg.Wait()
	a, b := w.intentsOn(t, "a", principals...), w.intentsOn(t, "b", principals...)
	for _, p := range principals {
		// Keys: "same" once, and own-i-1 for i in 0..2: 4 distinct.
		if n, m := len(a[p]), len(b[p]); !(n == 4 && m == 0 || n == 0 && m == 4) {
			t.Errorf("%s: %d intents on pod a, %d on pod b; want 4 on one pod, none on the other", p, n, m)
		}
	}
}

// TestPods_EtcdUnreachable_PlacedServed_NewRefusedWithRetryDelay: every
// etcd member killed, then paused. A principal already placed creates
// and reads on; a new one is refused UNAVAILABLE with a retry delay
// (HTTP: 503 with Retry-After). With etcd back, the new one is placed.
func TestPods_EtcdUnreachable_PlacedServed_NewRefusedWithRetryDelay(t *testing.T) {
	w := newPodsWorld(t)
	s := w.spec()
	s.http = true
	d := start(t, s)
	if a := d.createSeed("known", "k0", "100000000"); a.err != nil {
		t.Fatal(a.err)
	}
	for _, fault := range []struct {
		name     string
		down, up func(*etcdtest.Member) error
	}{{"killed", (*etcdtest.Member).Kill, (*etcdtest.Member).Start}, {"paused", (*etcdtest.Member).Pause, (*etcdtest.Member).Resume}} {
		for i := range 3 {
			if err := fault.down(w.etcd.Member(i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			if a := d.createSeed("known", fmt.Sprintf("%s-%d", fault.name, i), "100000000"); a.err != nil {
				t.Errorf("etcd %s: a placed principal's create: %v", fault.name, a.err)
			}
		}
		if got := d.list(t, "known"); len(got) < 6 {
			t.Errorf("etcd %s: the placed principal lists %d intents", fault.name, len(got))
		}
		newcomer := "new-while-" + fault.name
		wantRefusedWithDelay(t, d, newcomer)
		if h := d.httpCreate(t, newcomer, "h1", seedBody); h.status != http.StatusServiceUnavailable || h.header.Get("Retry-After") != "1" {
			t.Errorf("etcd %s: a new principal over HTTP: %d, Retry-After %q; want 503 and 1", fault.name, h.status, h.header.Get("Retry-After"))
		}
		for i := range 3 {
			if err := fault.up(w.etcd.Member(i)); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err = d.createSeed(newcomer, "k1", "100000000").err; err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("etcd back after %s: the new principal's create: %v", fault.name, err)
		}
	}
}

// wantRefusedWithDelay checks that principal's create is refused
// UNAVAILABLE, IDEMPOTENCY_SCOPE_UNAVAILABLE, with a RetryInfo of 1s.
func wantRefusedWithDelay(t *testing.T, d *daemon, principal string) {
	t.Helper()
	a := d.createSeed(principal, "k1", "100000000")
	var delay time.Duration
	for _, detail := range status.Convert(a.err).Details() {
		if ri, ok := detail.(*errdetails.RetryInfo); ok {
			delay = ri.RetryDelay.AsDuration()
		}
	}
	if status.Code(a.err) != codes.Unavailable || reason(a.err) != wire.ReasonScopeUnavailable || delay != time.Second {
		t.Errorf("a new principal with etcd down: %v (reason %q, retry after %v); want UNAVAILABLE %s after 1s",
			a.err, reason(a.err), delay, wire.ReasonScopeUnavailable)
	}
}

// loadReplicas starts three replicas on w, and clients creating with
// duplicates racing across them for the principals of tokens.
func (w *podsWorld) loadReplicas(t *testing.T, tokens []string) *replicaLoad {
	t.Helper()
	rs := &replicaSet{t: t, pods: w.file, args: w.spec().args}
	t.Cleanup(func() {
		if t.Failed() {
			saveReplicaLogs(t, rs)
		}
	})
	for i := range 3 {
		rs.start(i)
	}
	return startReplicaLoadAs(t, rs, tokens, nil)
}

// podsRounds is the number of rounds of TestCrash_Pods_OnePodKilled:
// PAYMENTSD_PODS_ROUNDS if set, else 2 (make test: about 15 s).
func podsRounds() int { return envInt("PAYMENTSD_PODS_ROUNDS", 2) }

// TestCrash_Pods_OnePodKilled: three replicas on two pods, clients
// creating with duplicates racing across replicas for two principals on
// each pod. Round after round, pod b's PostgreSQL is killed with SIGKILL
// under load, and started again. Pod a's principals see no failed call
// (no UNAVAILABLE, no timeout) throughout; pod b's recover; at the end
// every key has one intent, its answer's, on every replica, none lost and
// none an orphan.
func TestCrash_Pods_OnePodKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	w := newPodsWorld(t)
	onA, onB := principalsOn("a", 2), principalsOn("b", 2)
	load := w.loadReplicas(t, append(onA, onB...))
	rounds := podsRounds()
	for range rounds {
		time.Sleep(time.Second)
		w.clusters["b"].Kill(t)
		time.Sleep(2 * time.Second)
		w.clusters["b"].StartAgain(t)
		time.Sleep(time.Second)
	}
	load.halt()
	load.answerAll()
	found := load.check()
	load.mu.Lock()
	failed := load.failedOf
	load.mu.Unlock()
	for _, token := range onA {
		if failed[token] != 0 {
			t.Errorf("pod a's principal %s saw %d failed calls while pod b was killed; want 0", token, failed[token])
		}
	}
	t.Logf("pods crash test: %d rounds of pod b killed; %d keys, %d requests; failed calls of pod b's principals %d, %d; "+
		"of pod a's %d, %d; %d acknowledged lost, %d keys with two intents, %d orphans",
		rounds, len(load.keys), load.requests.Load(), failed[onB[0]], failed[onB[1]], failed[onA[0]], failed[onA[1]],
		len(found.missing), len(found.twoIntents), len(found.orphans))
}

// TestPods_PodDown_HealthAndMetricsByPod: with pod b's PostgreSQL down,
// paymentsd serves (pod a does), reports paymentsd.pod.b NOT_SERVING and
// paymentsd.pod.a SERVING, and its metrics say which pod is down; with b
// back, b serves again.
func TestPods_PodDown_HealthAndMetricsByPod(t *testing.T) {
	w := newPodsWorld(t)
	s := w.spec()
	s.metrics = true
	d := start(t, s)
	for _, token := range []string{principalsOn("a", 1)[0], principalsOn("b", 1)[0]} {
		if a := d.createSeed(token, "k", "100000000"); a.err != nil {
			t.Fatal(a.err)
		}
	}
	w.clusters["b"].Stop(t)
	waitPodHealth(t, d, "b", healthpb.HealthCheckResponse_NOT_SERVING)
	if got := serviceHealth(t, d, storehealth.PodService("a")); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("pod a with pod b down: %v, want SERVING", got)
	}
	if got := healthStatus(t, d); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("the server with pod b down: %v, want SERVING: pod a serves", got)
	}
	m := d.scrape(t)
	for name, want := range map[string]float64{
		`paymentsd_pod_up{pod="a"}`: 1, `paymentsd_pod_up{pod="b"}`: 0, `paymentsd_placement_directory_up`: 1,
		`paymentsd_placement_places_total`: 2, `paymentsd_pg_pool_max_connections{pod="a"}`: 4,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %t), want %v", name, got, ok, want)
		}
	}
	w.clusters["b"].StartAgain(t)
	waitPodHealth(t, d, "b", healthpb.HealthCheckResponse_SERVING)
}

// waitPodHealth waits until d reports pod's health as want.
func waitPodHealth(t *testing.T, d *daemon, pod string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got := serviceHealth(t, d, storehealth.PodService(pod))
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s reported %v, want %v", pod, got, want)
		}
	}
}

// runMove runs paymentsd move of principal (dev mode: the token's) to pod
// to, and fails t unless it exits 0.
func (w *podsWorld) runMove(t *testing.T, token, to string) {
	t.Helper()
	cmd := exec.Command(paymentsdBinary, w.moveArgs(token, to)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("paymentsd move %s to %s: %v\n%s", token, to, err, out)
	}
}

func (w *podsWorld) moveArgs(token, to string) []string {
	return []string{"move", "--principal", devPrincipal(token), "--to", to, "--pods", w.file,
		"--placement-etcd", strings.Join(w.etcd.Endpoints(), ",")}
}

// killMoveAt runs paymentsd move and kills it with SIGKILL once it logs
// step: the move stops at that step or soon after it.
func (w *podsWorld) killMoveAt(t *testing.T, token, to, step string) {
	t.Helper()
	cmd := exec.Command(paymentsdBinary, w.moveArgs(token, to)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"step":"`+step+`"`) {
			cmd.Process.Kill()
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("paymentsd move ended before its step %s was logged", step)
	}
}

// TestPods_MoveUnderLoad: three replicas on two pods, clients creating
// with duplicates racing across replicas for two principals on each pod.
// One of pod a's principals is moved to pod b by the real command, which
// is first killed with SIGKILL once it has fenced the source and then run
// again; then it is moved back. At the end every key has one intent, its
// every answer the same bytes, none lost and no orphan; the moved
// principal's rows are all on pod a, and pod b keeps only its fence.
func TestPods_MoveUnderLoad(t *testing.T) {
	w := newPodsWorld(t)
	onA, onB := principalsOn("a", 2), principalsOn("b", 2)
	load := w.loadReplicas(t, append(onA, onB...))
	moved := onA[0]
	time.Sleep(time.Second)
	w.killMoveAt(t, moved, "b", "fence")
	time.Sleep(500 * time.Millisecond)
	w.runMove(t, moved, "b")
	time.Sleep(time.Second)
	if got := w.intentsOn(t, "a", moved)[moved]; len(got) != 0 {
		t.Errorf("pod a holds %d intents of the moved principal after its move to b", len(got))
	}
	w.runMove(t, moved, "a")
	time.Sleep(time.Second)
	load.halt()
	load.answerAll()
	found := load.check()
	if got := w.intentsOn(t, "b", moved)[moved]; len(got) != 0 {
		t.Errorf("pod b holds %d intents of the principal moved back to a", len(got))
	}
	load.mu.Lock()
	failed := load.failedOf
	load.mu.Unlock()
	t.Logf("move under load: %d keys, %d requests; failed calls of the moved principal %d, of the others %d %d %d; "+
		"%d acknowledged lost, %d keys with two intents, %d orphans",
		len(load.keys), load.requests.Load(), failed[moved], failed[onA[1]], failed[onB[0]], failed[onB[1]],
		len(found.missing), len(found.twoIntents), len(found.orphans))
}

// TestPods_OperatorCommands_FindThePrincipalsPod: paymentsd record,
// intents and release, given the pods file and the directory, read the
// principal's own pod; a principal placed nowhere has nothing.
func TestPods_OperatorCommands_FindThePrincipalsPod(t *testing.T) {
	w := newPodsWorld(t)
	d := start(t, w.spec())
	token := principalsOn("b", 1)[0]
	created := d.createSeed(token, "k1", "100000000")
	if created.err != nil {
		t.Fatal(created.err)
	}
	id := created.resp.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id
	pods := []string{"--pods", w.file, "--placement-etcd", strings.Join(w.etcd.Endpoints(), ",")}
	run := func(args ...string) (string, error) {
		out, err := exec.Command(paymentsdBinary, append(args, pods...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("record", "--principal", devPrincipal(token), "--key", "k1"); err != nil || !strings.Contains(out, id) {
		t.Errorf("record of a key on pod b: %v\n%s", err, out)
	}
	if out, err := run("intents", "--principal", devPrincipal(token), "--json"); err != nil || !strings.Contains(out, id) {
		t.Errorf("intents of a principal on pod b: %v\n%s", err, out)
	}
	if out, err := run("release", "--principal", devPrincipal(token), "--key", "k1"); err == nil || !strings.Contains(out, "refused") {
		t.Errorf("release of a created intent's key: %v, want refused\n%s", err, out)
	}
	if out, err := run("record", "--principal", devPrincipal("nobody"), "--key", "k1"); err == nil || !strings.Contains(out, "no record") {
		t.Errorf("record of a principal placed nowhere: %v, want no record\n%s", err, out)
	}
}
