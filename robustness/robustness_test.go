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

	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
	"github.com/paymentsd/paymentsd/interceptor/wire"
	"github.com/paymentsd/paymentsd/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/testkit/pgtest"
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
	backend  string // "bbolt" or "postgres"
	bin      string
	seed     uint64
	duration time.Duration
	clients  int
	kinds    []string // fault kinds to draw from; none: no faults
	forced   string
	pair     *pgtest.Pair
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
	timing     string // how long the load, the finish and the check took
	takeovers  int    // the servers' log lines of a takeover ("idempotency":"takeover")
	releases   int    // paymentsd release runs
	released   int    // of which released the key
	superseded int    // answers ABORTED, IDEMPOTENCY_ATTEMPT_SUPERSEDED
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
	var ops, stored, orphans, takeovers, superseded, durableRuns, releases, released int
	faults := map[string]int{}
	var backend string
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
		backend = r.backend
		o := r.do(t)
		ops += len(o.ops)
		stored += o.stored
		orphans += len(o.orphans)
		takeovers += o.takeovers
		superseded += o.superseded
		releases += o.releases
		released += o.released
		nfaults := 0
		for k, n := range o.counts {
			faults[k] += n
			nfaults += n
		}
		if len(o.violations) > 0 {
			dir := report(t, r, o)
			t.Fatalf("%s run %d: %d violations; replay with PAYMENTSD_ROBUSTNESS_SEED=%d PAYMENTSD_ROBUSTNESS_RUNS=1 (the fault schedule and operations, not their timing); report in %s; the first:\n%s",
				r.backend, i, len(o.violations), r.seed, dir, strings.Join(o.violations[:min(len(o.violations), 10)], "\n"))
		}
		if os.Getenv("PAYMENTSD_ROBUSTNESS_KEEP") != "" {
			t.Logf("%s run %d: report kept in %s", r.backend, i, report(t, r, o))
		}
		t.Logf("%s run %d (seed %d, %s claims): %d operations, %d faults, %d takeovers, %d superseded, %d releases (%d released), %d intents stored, 0 orphans, 0 violations (%v)",
			r.backend, i, r.seed, r.claims(), len(o.ops), nfaults, o.takeovers, o.superseded, o.releases, o.released, o.stored, o.timing)
	}
	var kinds []string
	for k, n := range faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(kinds)
	t.Logf("robustness %s: %d runs (%d with durable claims), %d operations, faults %s, takeovers %d, superseded %d, releases %d (%d released), intents %d, orphans %d, violations 0",
		backend, s.runs, durableRuns, ops, strings.Join(kinds, " "), takeovers, superseded, releases, released, stored, orphans)
	// A takeover needs a durable claim and a worker that stops past its
	// lease: the suite's long version must show some, or the path they
	// take is no longer tested.
	if s.long && durableRuns > 0 && takeovers == 0 {
		t.Errorf("robustness %s: %d runs with durable claims and no takeover: a paused or killed worker's claim was never taken over", backend, durableRuns)
	}
	if s.long && durableRuns < s.runs && released == 0 {
		t.Errorf("robustness %s: %d releases and none released a key: the path of a released key was never taken", backend, releases)
	}
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
	c := &cluster{t: t, h: h, pair: r.pair, counts: map[string]int{}, durable: r.durable, w: w, clientBase: r.clients + 1}
	inFlightWait := []string{"0s", "300ms"}[rng.IntN(2)]
	args := []string{"--lease", lease.String(), "--in-flight-wait", inFlightWait}
	n := 1
	if r.backend == "postgres" {
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
	} else {
		args = append(args, "--db", filepath.Join(dir, "paymentsd.db"))
	}
	db := args[len(args)-1]
	var o outcome
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
		for _, f := range schedule(rng, r.kinds, r.forced, n, r.duration) {
			time.Sleep(time.Until(start.Add(f.At)))
			if err := c.inject(f); err != nil {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("seed %d: fault %s: %v", r.seed, f.Kind, err)
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
	o.faults, o.counts = c.log, c.counts
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
