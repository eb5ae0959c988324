package robustness

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/testkit/patroni"
	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeBinaries()
	os.Exit(code)
}

// settings are the knobs of a test's runs, from the environment: go test
// alone runs one short run per backend (make test); make robustness sets
// more and longer.
type settings struct {
	seed     uint64
	runs     int
	duration time.Duration
	clients  int
	// long is make robustness's suite (several runs), which must show
	// what a single short run may miss by chance: takeovers.
	long bool
}

func readSettings(t *testing.T) settings {
	s := settings{seed: uint64(time.Now().UnixNano()), runs: envInt("PAYMENTSD_ROBUSTNESS_RUNS", 1),
		duration: 12 * time.Second, clients: envInt("PAYMENTSD_ROBUSTNESS_CLIENTS", 8)}
	if v := os.Getenv("PAYMENTSD_ROBUSTNESS_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &s.seed); err != nil {
			t.Fatalf("PAYMENTSD_ROBUSTNESS_SEED=%q: %v", v, err)
		}
	}
	s.long = s.runs >= 4
	if v := os.Getenv("PAYMENTSD_ROBUSTNESS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("PAYMENTSD_ROBUSTNESS_DURATION=%q: %v", v, err)
		}
		s.duration = d
	}
	return s
}

// run is one run's setting: the backend, the binary, the seed that
// plans its operations and faults, and the fault kind it must include.
type run struct {
	backend  string // "bbolt", "postgres" or "patroni"
	bin      string
	seed     uint64
	duration time.Duration
	clients  int
	kinds    []string // fault kinds to draw from; none: no faults
	forced   string
	pair     *pgtest.Pair
	patroni  *patroni.Cluster // the backend "patroni"'s cluster
	pods     *pods            // the backend "pods"'s clusters and etcd
	pause    string           // its leader-pauses' way (patroni_test.go)
	// durable: bin was built with robustness_durable, so that creates and
	// cancels take durable claims with leases (cmd/paymentsd,
	// transactional_durable.go), which a pause past the lease lets
	// another replica take over.
	durable bool
	// noRelease: no paymentsd release during the run.
	noRelease bool
}

// durableTag is the build tag of the binary whose claims are durable.
const durableTag = "robustness_durable"

// durableSeed says whether the run of seed uses the durable binary: every
// other seed, so that a suite's runs alternate.
func durableSeed(seed uint64) bool { return seed%2 == 1 }

// replay is the environment that replays r's schedule alone.
func (r run) replay() string {
	switch r.backend {
	case "patroni":
		return fmt.Sprintf("PAYMENTSD_ROBUSTNESS_SEED=%d PAYMENTSD_ROBUSTNESS_PATRONI_RUNS=1", r.seed)
	case "pods":
		return fmt.Sprintf("PAYMENTSD_ROBUSTNESS_SEED=%d PAYMENTSD_ROBUSTNESS_PODS_RUNS=1", r.seed)
	}
	return fmt.Sprintf("PAYMENTSD_ROBUSTNESS_SEED=%d PAYMENTSD_ROBUSTNESS_RUNS=1", r.seed)
}

// claims names the kind of claim r's binary takes, for its log lines.
func (r run) claims() string {
	if r.durable {
		return "durable"
	}
	return "transactional"
}

// outcome is what a run found.
type outcome struct {
	ops        []*op
	faults     []faultEvent
	violations []string
	illegal    [][]porcupine.Operation // porcupine's failing partitions
	stored     int
	orphans    []string
	doubled    []string
	logs       []string // the servers' log files
	counts     map[string]int
	variants   map[string]int // faults by kind/variant (patroni_test.go)
	clusterLog []string       // the Patroni cluster's logs, for the report
	timing     string         // how long the load, the finish and the check took
	takeovers  int            // the servers' log lines of a takeover ("idempotency":"takeover")
	releases   int            // paymentsd release runs
	released   int            // of which released the key
	superseded int            // answers ABORTED, IDEMPOTENCY_ATTEMPT_SUPERSEDED
}

func TestRobustness_Bolt(t *testing.T) {
	s := readSettings(t)
	kinds := needStrace(t, boltFaults)
	suite(t, s, func(i int) run {
		return run{backend: "bbolt", bin: binary(t, ""), kinds: kinds}
	})
}

func TestRobustness_Postgres(t *testing.T) {
	s := readSettings(t)
	// One pair for every run, each run on a database of its own: a
	// synchronous standby, so that a failover loses nothing acknowledged.
	pair := pgtest.StartPair(t, pgtest.Synchronous)
	kinds := needStrace(t, postgresFaults)
	suite(t, s, func(i int) run {
		return run{backend: "postgres", bin: binary(t, ""), kinds: kinds, pair: pair}
	})
}

// suite runs s.runs runs made by mk, fails on the first that finds a
// violation (with its seed and report), and logs the summary line.
func suite(t *testing.T, s settings, mk func(i int) run) {
	began := time.Now()
	var ops, stored, orphans, takeovers, superseded, durableRuns, releases, released int
	faults, variants := map[string]int{}, map[string]int{}
	var backend string
	pauses := false    // a kind that pauses paymentsd past its lease is drawn from
	releasing := false // a run sends paymentsd release
	for i := range s.runs {
		r := mk(i)
		r.seed, r.duration, r.clients = s.seed+uint64(i), s.duration, s.clients
		if r.durable = durableSeed(r.seed); r.durable {
			r.bin = binary(t, durableTag)
			durableRuns++
		}
		// The seed picks the kind a run must include, so that the runs of
		// one suite, whose seeds follow each other, take every kind in
		// turn, and one seed alone replays its run's whole schedule.
		if len(r.kinds) > 0 {
			r.forced = r.kinds[r.seed%uint64(len(r.kinds))]
		}
		pauses = pauses || slices.Contains(r.kinds, faultPause)
		releasing = releasing || !r.noRelease
		backend = r.backend
		o := r.do(t)
		ops += len(o.ops)
		stored += o.stored
		orphans += len(o.orphans)
		takeovers += o.takeovers
		superseded += o.superseded
		releases += o.releases
		released += o.released
		nfaults, unknown := 0, 0
		for k, n := range o.counts {
			faults[k] += n
			nfaults += n
		}
		for k, n := range o.variants {
			variants[k] += n
		}
		for _, x := range o.ops {
			if x.Unknown {
				unknown++
			}
		}
		if len(o.violations) > 0 {
			dir := report(t, r, o)
			t.Fatalf("%s run %d: %d violations; replay with %s (the fault schedule and operations, not their timing); report in %s; the first:\n%s",
				r.backend, i, len(o.violations), r.replay(), dir, strings.Join(o.violations[:min(len(o.violations), 10)], "\n"))
		}
		if os.Getenv("PAYMENTSD_ROBUSTNESS_KEEP") != "" {
			t.Logf("%s run %d: report kept in %s", r.backend, i, report(t, r, o))
		}
		t.Logf("%s run %d (seed %d, %s claims): %d operations (%d unknown outcomes), %d faults (%s), %d takeovers, %d superseded, %d releases (%d released), %d intents stored, 0 orphans, 0 violations (%v)",
			r.backend, i, r.seed, r.claims(), len(o.ops), unknown, nfaults, faultKinds(o.counts, o.variants), o.takeovers, o.superseded, o.releases, o.released, o.stored, o.timing)
	}
	t.Logf("robustness %s: %d runs (%d with durable claims), %d operations, faults %s, takeovers %d, superseded %d, releases %d (%d released), intents %d, orphans %d, violations 0 (%v)",
		backend, s.runs, durableRuns, ops, faultKinds(faults, variants), takeovers, superseded, releases, released, stored, orphans, time.Since(began).Round(time.Second))
	// A takeover needs a durable claim and a worker that stops past its
	// lease: the suite's long version must show some, or the path they
	// take is no longer tested. Only the pause of a server makes sure of
	// one (takeover_test.go).
	if s.long && pauses && durableRuns > 0 && takeovers == 0 {
		t.Errorf("robustness %s: %d runs with durable claims and no takeover: a paused or killed worker's claim was never taken over", backend, durableRuns)
	}
	if s.long && releasing && durableRuns < s.runs && released == 0 {
		t.Errorf("robustness %s: %d releases and none released a key: the path of a released key was never taken", backend, releases)
	}
}

// faultKinds is counts as "kind=n ...", sorted, each kind's variants
// after it: "leader-kill=3 (patroni 1, postgres 2)".
func faultKinds(counts, variants map[string]int) string {
	var kinds []string
	for k, n := range counts {
		d := fmt.Sprintf("%s=%d", k, n)
		var vs []string
		for kv, m := range variants {
			if v, ok := strings.CutPrefix(kv, k+"/"); ok {
				vs = append(vs, fmt.Sprintf("%s %d", v, m))
			}
		}
		if len(vs) > 0 {
			slices.Sort(vs)
			d += " (" + strings.Join(vs, ", ") + ")"
		}
		kinds = append(kinds, d)
	}
	slices.Sort(kinds)
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, " ")
}

// do runs r: servers, proxies, clients and faults for r.duration, then
// the finish (every key asked again, every intent listed), then the
// checks.
func (r run) do(t *testing.T) outcome {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(r.seed, 0))
	h := newHistory()
	w := newWorkload()
	c := &cluster{t: t, h: h, pair: r.pair, patroni: r.patroni, pods: r.pods, seed: r.seed, counts: map[string]int{}, variants: map[string]int{},
		durable: r.durable, w: w, clientBase: r.clients + 1}
	inFlightWait := []string{"0s", "300ms"}[rng.IntN(2)]
	args := []string{"--lease", lease.String(), "--in-flight-wait", inFlightWait}
	n := 1
	var o outcome
	switch r.backend {
	case "patroni":
		// Through the cluster's multi-host URL, as a deployment on
		// Patroni without a proxy reaches it: target_session_attrs
		// read-write finds the leader wherever it is.
		n = 3
		if err := c.within("a healthy cluster at the run's start", r.patroni.WaitHealthy); err != nil {
			t.Fatal(err)
		}
		u := r.patroni.NewDatabase(t, pgtest.DatabaseName(fmt.Sprintf("robustness %d", r.seed)))
		args = append(args, "--db", u)
		o.clusterLog = patroniLogs(r.patroni)
	case "pods":
		n = 3
		args = append(args, r.pods.args(t, r.seed, dir)...)
	case "postgres":
		n = 3
		if err := c.rebuildIfFailedOver(); err != nil {
			t.Fatal(err)
		}
		db := pgtest.DatabaseName(fmt.Sprintf("robustness %d", r.seed))
		r.pair.NewDatabase(t, db)
		// Each node behind a proxy, so that a fault can cut the servers'
		// connections to it; the URL names both, as a deployment's does.
		var hosts []string
		for _, node := range []*pgtest.Cluster{r.pair.Primary(), r.pair.Standby()} {
			p, err := faultproxy.New(node.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			c.dbProxes = append(c.dbProxes, p)
			hosts = append(hosts, p.Addr())
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(pgtest.User, pgtest.Password), Host: strings.Join(hosts, ","),
			Path: "/" + db, RawQuery: "sslmode=disable&target_session_attrs=read-write"}
		args = append(args, "--db", u.String())
	default:
		args = append(args, "--db", filepath.Join(dir, "paymentsd.db"))
	}
	db := args[len(args)-1]
	for i := range n {
		name := fmt.Sprintf("%s-%d", r.backend, i)
		logPath := filepath.Join(dir, name+".log")
		o.logs = append(o.logs, logPath)
		s := startServer(t, name, r.bin, logPath, args...)
		g, err := faultproxy.New(s.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		hp, err := faultproxy.New(s.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close(); hp.Close() })
		c.servers = append(c.servers, s)
		c.proxies = append(c.proxies, [2]*faultproxy.Proxy{g, hp})
	}
	c.note("start", "%d %s server(s), %s claims, --lease %v --in-flight-wait %s, %d clients, seed %d", n, r.backend, r.claims(), lease, inFlightWait, r.clients, r.seed)

	// The clients, until stop.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range r.clients {
		p := c.proxies[i%n]
		ep, err := dialEndpoint(p[0].Addr(), p[1].Addr())
		if err != nil {
			t.Fatal(err)
		}
		if r.durable {
			ep.timeout = durableCallTimeout
		}
		wg.Go(func() {
			defer ep.close()
			w.client(i, rand.New(rand.NewPCG(r.seed, uint64(i)+1)), ep, h, &stop)
		})
	}
	if !r.noRelease {
		p := c.proxies[0]
		ep, err := dialEndpoint(p[0].Addr(), p[1].Addr())
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer ep.close()
			c.releaser(rand.New(rand.NewPCG(r.seed, 1<<32)), w, ep, r.bin, db, r.duration, &stop, r.durable)
		})
	}

	// The faults, from the test's goroutine (pgtest fails the test from it).
	start := time.Now()
	if len(r.kinds) > 0 {
		var plan []fault
		if r.patroni != nil {
			plan = patroniSchedule(rng, r.seed, r.kinds, r.forced, r.pause, r.duration)
		} else {
			plan = schedule(rng, r.kinds, r.forced, n, r.duration)
		}
		for i, f := range plan {
			time.Sleep(time.Until(start.Add(f.At)))
			// A Patroni fault lasts until the cluster has recovered: one
			// whose turn comes late, those before it having taken long,
			// would only lengthen the run. The forced one always runs.
			if r.patroni != nil && i > 0 && time.Since(start) > r.duration*8/10 {
				c.note(f.Kind, "skipped (%s): its turn came %v into the run, past 80%% of it", f.Variant, time.Since(start).Round(time.Second))
				continue
			}
			if err := c.inject(f); err != nil {
				stop.Store(true)
				wg.Wait()
				// The history so far is checked still: what the
				// servers answered up to the fault that did not end.
				o.ops, o.faults, o.counts, o.variants = h.snapshot(), c.log, c.counts, c.variants
				o.violations = append([]string{fmt.Sprintf("fault %s %s: %v", f.Kind, f.Variant, err)}, crossChecks(o.ops)...)
				// porcupine's time grows with the lists a long fault's
				// load adds: tens of minutes past 40,000 operations.
				if len(o.ops) <= maxPartialCheck {
					o.illegal = linearize(t, o.ops)
				} else {
					t.Logf("seed %d: %d operations before the fault that did not end: too many to check with porcupine (at most %d)", r.seed, len(o.ops), maxPartialCheck)
				}
				for _, part := range o.illegal {
					o.violations = append(o.violations, fmt.Sprintf("not linearizable: %s (%d operations)", partitionOf(part[0].Input.(*op)), len(part)))
				}
				t.Fatalf("seed %d: fault %s %s: %v\n%d violations in the %d operations before it (no finish, no orphan count): %v\nreplay with %s; report in %s",
					r.seed, f.Kind, f.Variant, err, len(o.violations)-1, len(o.ops), o.violations[1:min(len(o.violations), 11)], r.replay(), report(t, r, o))
			}
		}
	}
	time.Sleep(time.Until(start.Add(r.duration)))
	stop.Store(true)
	wg.Wait()
	c.note("stop", "clients stopped; finishing")
	loaded := time.Now()

	// The finish, with no faults: every key used is asked again with both
	// bodies, until each gets an answer it can know, so that the result of
	// every create whose outcome was unknown is known; then every intent
	// is listed, page by page.
	ep, err := dialEndpoint(c.servers[0].grpcAddr, c.servers[0].httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.close()
	finisher := r.clients
	for _, k := range w.keysUsed() {
		for body := range 2 {
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
				x := &op{Client: finisher, Face: "grpc", Kind: opCreate, Principal: k.principal, Key: keyName(k.key), Body: body}
				x.Call = h.now()
				ep.do(x)
				x.Return = h.now()
				h.add(x)
				if !x.Unknown && x.Code != codes.Aborted {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("seed %d: finish: %s has no answer after a minute: %s", r.seed, keyName(k.key), x)
				}
			}
		}
	}
	stored := map[int][]*paymentsv1.PaymentIntent{}
	for p := range tokens {
		x := &op{Client: finisher, Face: "grpc", Kind: opList, Principal: p}
		x.Call = h.now()
		all, err := ep.listAll(p)
		x.Return = h.now()
		if err != nil {
			t.Fatalf("seed %d: finish: list: %v", r.seed, err)
		}
		x.Intents = all
		h.add(x)
		stored[p] = all
		o.stored += len(all)
	}
	for _, s := range c.servers {
		s.kill()
	}

	finished := time.Now()
	o.ops = h.snapshot()
	o.faults, o.counts, o.variants = c.log, c.counts, c.variants
	o.violations = append(o.violations, crossChecks(o.ops)...)
	o.orphans, o.doubled = orphans(o.ops, stored)
	for _, s := range o.orphans {
		o.violations = append(o.violations, "orphan intent: "+s)
	}
	for _, s := range o.doubled {
		o.violations = append(o.violations, "key with two intents: "+s)
	}
	for _, x := range o.ops {
		switch {
		case x.Reason == wire.ReasonAttemptSuperseded:
			o.superseded++
		case x.Kind == opRelease:
			o.releases++
			if x.Code == codes.OK {
				o.released++
			}
		}
	}
	for _, l := range o.logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		o.takeovers += strings.Count(string(b), `"idempotency":"takeover"`)
	}
	// A transactional claim commits with its writes and answer, never in
	// flight on its own: nothing is ever left to take over.
	if !r.durable && o.takeovers > 0 {
		o.violations = append(o.violations, fmt.Sprintf("%d takeovers logged by a build whose creates and cancels are transactional", o.takeovers))
	}
	o.illegal = linearize(t, o.ops)
	for _, part := range o.illegal {
		o.violations = append(o.violations, fmt.Sprintf("not linearizable: %s (%d operations)", partitionOf(part[0].Input.(*op)), len(part)))
	}
	o.timing = fmt.Sprintf("load %v, finish %v, check %v", loaded.Sub(start).Round(time.Millisecond),
		finished.Sub(loaded).Round(time.Millisecond), time.Since(finished).Round(time.Millisecond))
	return o
}

// maxPartialCheck is the most operations a run that ends at a fault
// checks with porcupine.
const maxPartialCheck = 20000

// linearize checks the history with porcupine, partition by partition,
// and returns the partitions it found no linearization of.
func linearize(t *testing.T, ops []*op) [][]porcupine.Operation {
	var illegal [][]porcupine.Operation
	for _, part := range model.Partition(porcupineHistory(ops)) {
		switch porcupine.CheckOperationsTimeout(model, part, 30*time.Second) {
		case porcupine.Illegal:
			illegal = append(illegal, part)
		case porcupine.Unknown:
			t.Errorf("porcupine gave up on %s (%d operations) after 30s", partitionOf(part[0].Input.(*op)), len(part))
		}
	}
	return illegal
}

// listAll lists every intent of principal p, page by page, over gRPC.
func (e *endpoint) listAll(p int) ([]*paymentsv1.PaymentIntent, error) {
	var all []*paymentsv1.PaymentIntent
	req := &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000}
	for deadline := time.Now().Add(time.Minute); ; {
		ctx, cancel := e.grpcContext(p, "")
		resp, err := e.rpc.ListPaymentIntents(ctx, req)
		cancel()
		if err != nil {
			if time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return nil, err
		}
		all = append(all, resp.PaymentIntents...)
		if req.PageToken = resp.NextPageToken; req.PageToken == "" {
			return all, nil
		}
	}
}

// rebuildIfFailedOver makes the pair whole again after a failover of an
// earlier run; the check is on the pair, not the cluster, which is new
// each run.
func (c *cluster) rebuildIfFailedOver() error {
	if failedOver[c.pair] {
		c.pair.Rebuild(c.t)
		failedOver[c.pair] = false
	}
	return nil
}

// failedOver holds the pairs whose standby a failover left dead, to be
// rebuilt before the next run.
var failedOver = map[*pgtest.Pair]bool{}
