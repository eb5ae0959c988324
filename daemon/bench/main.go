// Command bench drives `make bench`. It starts paymentsd (and its builds
// without the idempotency interceptor, and without the limits) on loopback.
// It loads it with ghz or, on the HTTP face, a Go client. It prints a table
// of medians over several runs, with the ratios the benchmark targets name.
// Each run gets a fresh server and data file.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

var (
	paymentsd = flag.String("paymentsd", "bin/paymentsd", "the paymentsd binary")
	baseline  = flag.String("baseline", "bin/paymentsd-baseline", "paymentsd built with -tags benchbaseline")
	nolimits  = flag.String("nolimits", "bin/paymentsd-nolimits", "paymentsd built with -tags benchnolimits")
	ghz       = flag.String("ghz", "bin/ghz", "the ghz binary")
	runs      = flag.Int("runs", 5, "runs of each scenario; the table shows medians")
	scale     = flag.Float64("scale", 1, "multiplies the requests of every run")
	only      = flag.String("only", "", "run only the scenarios whose names match this regular expression")
	disk      = flag.String("disk", "", "instead of the load tables, the data file's bytes per create after these counts of fresh creates, such as 6000,100000")
	previous  = flag.String("previous", "", "also a paymentsd of an earlier commit, for a before and after in one run: with -disk; and in fresh creates (gRPC and HTTP on bbolt, gRPC on PostgreSQL) and the PostgreSQL replays of each key once")
	pgStandby = flag.Bool("pg-standby", false, "run the PostgreSQL scenarios on a primary with a synchronous standby")
	diskKey   = flag.String("disk-key", "fresh-{{.RequestNumber}}", "with -disk, the ghz template of the idempotency keys, such as {{newUUID}}")
)

const (
	method    = "payments.v1.PaymentIntentService/CreatePaymentIntent"
	getMethod = "payments.v1.PaymentIntentService/GetPaymentIntent"
	body      = `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3",` +
		`"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",` +
		`"amount":"100000000","expires_in_seconds":900}`
	otherBody = `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3",` +
		`"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",` +
		`"amount":"999000000","expires_in_seconds":900}`
	hotKeys = 100 // keys the replay scenarios pre-create
)

// scenario is one line of a table.
type scenario struct {
	name        string
	binary      *string
	concurrency int
	requests    int    // per run, a few seconds here; counts, not durations, so no call is cut off
	key         string // ghz metadata template for idempotency-key
	body        string
	setup       bool // pre-create hotKeys keys hot-0..hot-99 with body
	replicas    int  // servers on one PostgreSQL database, each loaded by a ghz of its own; 0 for bbolt
	tls         bool // serve gRPC over TLS, certificates made for the run; ghz verifies them against its CA
	http        bool // load the HTTP/JSON face, with a Go client, instead of gRPC with ghz
	get         bool // read the intent of hot-0 with GetPaymentIntent instead of creating
	// replayAll creates every key of the run first, with a server of its
	// own. So each request replays a key once, read from the database: the
	// serving process has none in memory.
	replayAll bool
	// pods serves the database as the one pod of --pods, principals placed
	// by a directory in an etcd of the run's own.
	pods bool
}

var boltScenarios = []scenario{
	{"fresh c=1", paymentsd, 1, 3000, "fresh-{{.RequestNumber}}", body, false, 0, false, false, false, false, false},
	{"fresh c=1, no interceptor", baseline, 1, 3000, "fresh-{{.RequestNumber}}", body, false, 0, false, false, false, false, false},
	{"fresh c=64", paymentsd, 64, 25000, "fresh-{{.RequestNumber}}", body, false, 0, false, false, false, false, false},
	{"fresh c=64, no interceptor", baseline, 64, 25000, "fresh-{{.RequestNumber}}", body, false, 0, false, false, false, false, false},
	{"fresh c=64, TLS", paymentsd, 64, 25000, "fresh-{{.RequestNumber}}", body, false, 0, true, false, false, false, false},
	{"fresh c=64, limits off", nolimits, 64, 25000, "fresh-{{.RequestNumber}}", body, false, 0, false, false, false, false, false},
	{"http fresh c=64", paymentsd, 64, 20000, "fresh-", body, false, 0, false, true, false, false, false},
	{"http fresh c=64, no interceptor", baseline, 64, 20000, "fresh-", body, false, 0, false, true, false, false, false},
	{"http fresh c=64, limits off", nolimits, 64, 20000, "fresh-", body, false, 0, false, true, false, false, false},
	{"replay one key c=64", paymentsd, 64, 40000, "hot-0", body, true, 0, false, false, false, false, false},
	{"get c=64", paymentsd, 64, 40000, "", "", true, 0, false, false, true, false, false},
	{"mismatch c=64", paymentsd, 64, 40000, "hot-0", otherBody, true, 0, false, false, false, false, false},
	// Every tenth request fresh, the others replays of the hot keys. The
	// template is one action, since ghz renders an {{if}} only once. It has
	// no double quotes, since ghz renders it inside the JSON text.
	{"90% replay, 10% fresh c=64", paymentsd, 64, 40000,
		"{{ternary (printf `fresh-%d` .RequestNumber) (printf `hot-%d` (mod .RequestNumber 100)) (eq (mod .RequestNumber 10) 0)}}", body, true, 0, false, false, false, false, false},
}

var pgScenarios = []scenario{
	{"pg fresh c=1", paymentsd, 1, 1500, "fresh-{{.RequestNumber}}", body, false, 1, false, false, false, false, false},
	{"pg fresh c=1, no interceptor", baseline, 1, 1500, "fresh-{{.RequestNumber}}", body, false, 1, false, false, false, false, false},
	{"pg fresh c=64", paymentsd, 64, 12000, "fresh-{{.RequestNumber}}", body, false, 1, false, false, false, false, false},
	{"pg fresh c=64, no interceptor", baseline, 64, 12000, "fresh-{{.RequestNumber}}", body, false, 1, false, false, false, false, false},
	{"pg replay one key c=64", paymentsd, 64, 20000, "hot-0", body, true, 1, false, false, false, false, false},
	{"pg replay each key once c=64", paymentsd, 64, 12000, "fresh-{{.RequestNumber}}", body, false, 1, false, false, false, true, false},
	{"pg fresh c=64, 1 pod", paymentsd, 64, 12000, "fresh-{{.RequestNumber}}", body, false, 1, false, false, false, false, true},
	{"pg fresh c=64, 3 replicas", paymentsd, 64, 12000, "fresh-{{.RequestNumber}}", body, false, 3, false, false, false, false, false},
	{"pg fresh c=64, 3 replicas, no interceptor", baseline, 64, 12000, "fresh-{{.RequestNumber}}", body, false, 3, false, false, false, false, false},
	{"pg replay one key c=64, 3 replicas", paymentsd, 64, 20000, "hot-0", body, true, 3, false, false, false, false, false},
}

// result is one run's figures.
type result struct {
	rps, p50, p99 float64 // requests/s, latencies in ms of every answer
	commits       float64 // per request: bbolt commits, or PostgreSQL transactions committed
	walSyncs      float64 // PostgreSQL WAL flushes per request
	cpu           float64 // the servers' CPU time (user and system) per request, in µs
	dbCPU         float64 // PostgreSQL's CPU time per request, its every process's, in µs
	codes         string  // answers by status code
	dirRequests   float64 // with pods: requests the placement directory's etcd served, per request
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	toTheTop()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			log.Fatalf("-only: %v", err)
		}
		keep := func(sc scenario) bool { return !re.MatchString(sc.name) }
		boltScenarios = slices.DeleteFunc(boltScenarios, keep)
		pgScenarios = slices.DeleteFunc(pgScenarios, keep)
	}
	if *disk != "" {
		builds := []diskBuild{{"without", baseline}, {"with", paymentsd}}
		if *previous != "" {
			builds = append(builds, diskBuild{"previous", previous})
		}
		fmt.Printf("## Data file after fresh creates (c=64)\n\n")
		diskTable(parseCounts(*disk), builds)
		return
	}
	fmt.Printf("Medians of %d runs. Machine: %d CPUs.\n", *runs, runtime.NumCPU())
	if *previous != "" {
		boltScenarios = withPrevious(boltScenarios, "fresh c=64", "http fresh c=64")
		pgScenarios = withPrevious(pgScenarios, "pg fresh c=64", "pg replay each key once c=64")
	}
	if len(boltScenarios) > 0 {
		benchBolt()
	}
	if len(pgScenarios) > 0 {
		benchPG()
	}
}

// benchBolt runs the bbolt scenarios and prints their table and ratios.
func benchBolt() {
	fmt.Printf("\n## bbolt\n\n")
	m, all := table(boltScenarios, "commits/request", false)
	ratios(m, all, []target{
		{"fresh c=1 with / without the interceptor", "fresh c=1", "fresh c=1, no interceptor", ">= 0.85"},
		{"fresh c=64 with / without the interceptor", "fresh c=64", "fresh c=64, no interceptor", ">= 0.95"},
		{"HTTP fresh c=64 with / without the interceptor", "http fresh c=64", "http fresh c=64, no interceptor", ">= 0.92"},
		{"replay c=64 / fresh c=64 without the interceptor", "replay one key c=64", "fresh c=64, no interceptor", ">= 1.5"},
		{"replay c=64 / get c=64", "replay one key c=64", "get c=64", ">= 0.95"},
		{"fresh c=64 / fresh c=1", "fresh c=64", "fresh c=1", ">= 5"},
		{"fresh c=64 over TLS / plaintext", "fresh c=64, TLS", "fresh c=64", ">= 0.85"},
		{"fresh c=64 with / without the limits", "fresh c=64", "fresh c=64, limits off", ">= 0.98"},
		{"HTTP fresh c=64 with / without the limits", "http fresh c=64", "http fresh c=64, limits off", ">= 0.98"},
		{"fresh c=64: this build / previous", "fresh c=64", "fresh c=64, previous", ""},
		{"HTTP fresh c=64: this build / previous", "http fresh c=64", "http fresh c=64, previous", ""},
	})
	if r, ok := m["fresh c=1"]; ok {
		fmt.Printf("- commits per fresh create at c=1: %.3f [1.000]\n", r.commits)
	}
}

// benchPG runs the PostgreSQL scenarios on a cluster of their own and
// prints their table and ratios.
func benchPG() {
	stop := startPG()
	defer stop()
	defer stopEtcd()
	fmt.Printf("\n## PostgreSQL\n\n")
	m, all := table(pgScenarios, "transactions/request", true)
	if r, ok := m["pg fresh c=64, 1 pod"]; ok {
		fmt.Printf("\nPlacement directory requests per fresh create, 1 pod, c=64: %.5f (etcd's own count; one principal, placed once)\n", r.dirRequests)
	}
	if with, ok := m["pg fresh c=64"]; ok {
		if without, ok := m["pg fresh c=64, no interceptor"]; ok {
			fmt.Printf("\nDatabase CPU per fresh create at c=64: %.0f µs with the interceptor, %.0f µs without (%.2fx)\n",
				with.dbCPU, without.dbCPU, with.dbCPU/without.dbCPU)
		}
	}
	ratios(m, all, []target{
		{"fresh c=1 with / without the interceptor", "pg fresh c=1", "pg fresh c=1, no interceptor", ""},
		{"fresh c=64 with / without the interceptor", "pg fresh c=64", "pg fresh c=64, no interceptor", ">= 0.85"},
		{"fresh c=64: this build / previous", "pg fresh c=64", "pg fresh c=64, previous", ""},
		{"replay c=64 / fresh c=64 without the interceptor", "pg replay one key c=64", "pg fresh c=64, no interceptor", ""},
		{"replay of each key once / of one key", "pg replay each key once c=64", "pg replay one key c=64", ""},
		{"replay of each key once: this build / previous", "pg replay each key once c=64", "pg replay each key once c=64, previous", ""},
		{"fresh c=64: 1 pod / one database", "pg fresh c=64, 1 pod", "pg fresh c=64", ""},
		{"3 replicas: fresh c=64 with / without the interceptor", "pg fresh c=64, 3 replicas", "pg fresh c=64, 3 replicas, no interceptor", ""},
		{"fresh c=64: 3 replicas / 1", "pg fresh c=64, 3 replicas", "pg fresh c=64", ""},
	})
}

// withPrevious adds to scs, for each scenario named in names, the same
// run of the -previous build, for a before and after in one table.
func withPrevious(scs []scenario, names ...string) []scenario {
	for _, sc := range scs {
		if slices.Contains(names, sc.name) {
			sc.name, sc.binary = sc.name+", previous", previous
			scs = append(scs, sc)
		}
	}
	return scs
}

// table runs scenarios in alternating rounds, prints their medians and
// returns them, and every run, by name. Each round runs every scenario
// once. So the two sides of a ratio are measured under the same load of the
// machine. Every other round runs them in reverse, so that neither side of
// a ratio always comes first.
func table(scenarios []scenario, commits string, wal bool) (map[string]result, map[string][]result) {
	walHead, walRule := "", ""
	if wal {
		walHead, walRule = " WAL flushes/request | database CPU µs/request |", "---:|---:|"
	}
	fmt.Printf("| scenario | requests/s | p50 ms | p99 ms | %s |%s server CPU µs/request | answers (last run) |\n", commits, walHead)
	fmt.Printf("|---|---:|---:|---:|---:|%s---:|---|\n", walRule)
	all := map[string][]result{}
	for round := range *runs {
		for i := range scenarios {
			sc := scenarios[i]
			if round%2 == 1 {
				sc = scenarios[len(scenarios)-1-i]
			}
			all[sc.name] = append(all[sc.name], runOnce(sc))
		}
	}
	medians := map[string]result{}
	for _, sc := range scenarios {
		rs := all[sc.name]
		m := median(rs)
		medians[sc.name] = m
		walCell := ""
		if wal {
			walCell = fmt.Sprintf(" %.3f | %.0f |", m.walSyncs, m.dbCPU)
		}
		fmt.Printf("| %s | %.0f | %.2f | %.2f | %.3f |%s %.0f | %s |\n", sc.name, m.rps, m.p50, m.p99, m.commits, walCell, m.cpu, rs[len(rs)-1].codes)
	}
	return medians, all
}

// target is a ratio of two scenarios' requests/s.
type target struct{ what, a, b, want string }

// ratios prints each target's ratio of medians. After it, it prints the
// ratio of each round, whose two runs shared the machine's load. Rounds
// that fall on both sides of a target say the median's side of it is noise.
func ratios(medians map[string]result, all map[string][]result, targets []target) {
	fmt.Printf("\nRatios of medians (targets in brackets; each round's in parentheses):\n")
	for _, tg := range targets {
		a, okA := medians[tg.a]
		b, okB := medians[tg.b]
		if !okA || !okB {
			continue
		}
		want := ""
		if tg.want != "" {
			want = " [" + tg.want + "]"
		}
		var rounds []string
		for i, ra := range all[tg.a] {
			rounds = append(rounds, fmt.Sprintf("%.2f", ra.rps/all[tg.b][i].rps))
		}
		fmt.Printf("- %s: %.2fx%s (%s)\n", tg.what, a.rps/b.rps, want, strings.Join(rounds, " "))
	}
}

// pg is the PostgreSQL cluster of the PostgreSQL scenarios.
var (
	pg      *pgtest.Cluster
	pgRuns  int
	pgStats = `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), (SELECT wal_sync FROM pg_stat_wal),
		(SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer')`
)

// startPG starts the PostgreSQL of the PostgreSQL scenarios: one server,
// or with -pg-standby a primary whose commits wait for a synchronous
// standby. It returns a func that removes it.
func startPG() (stop func()) {
	if *pgStandby {
		pair, stop, err := pgtest.NewPair(pgtest.Synchronous)
		if err != nil {
			log.Fatal(err)
		}
		pg = pair.Primary()
		fmt.Printf("\nPostgreSQL: a primary with a synchronous standby.\n")
		return stop
	}
	cluster, stop, err := pgtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	pg = cluster
	return stop
}

// runOnce runs sc once on a fresh data file or database, and returns its
// figures.
func runOnce(sc scenario) result {
	dir, err := os.MkdirTemp("", "paymentsd-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db := prepareData(sc, dir)
	// Over TLS, ghz keeps its connection for the whole run, as over
	// plaintext. So the handshake is paid once, not per request.
	serverArgs, ghzArgs := []string(nil), []string{"--insecure"}
	if sc.tls {
		ca, cert, key := makeCerts(dir)
		serverArgs = []string{"--tls-cert", cert, "--tls-key", key}
		ghzArgs = []string{"--cacert", ca}
	}
	var before [3]int64
	if sc.replicas > 0 {
		before = readStats(db)
	}
	if sc.http {
		serverArgs = append(serverArgs, "--http-listen", "127.0.0.1:0")
	}
	serveDB, dirBefore := db, 0.0
	if sc.pods {
		serverArgs = append(serverArgs, podArgs(dir, db)...)
		serveDB, dirBefore = "", etcdRequests()
	}
	servers := make([]*server, max(sc.replicas, 1))
	for i := range servers {
		servers[i] = start(*sc.binary, serveDB, serverArgs...)
	}
	var r result
	var count uint64
	if sc.http {
		r, count = summarize([]ghzReport{loadHTTP(sc, servers[0])})
	} else {
		r, count = summarize(load(sc, servers, ghzArgs))
	}
	var commits uint64
	var cpu time.Duration
	for _, srv := range servers {
		c, t := srv.stop()
		commits, cpu = commits+c, cpu+t
	}
	r.commits = float64(commits) / float64(count)
	r.cpu = float64(cpu.Microseconds()) / float64(count)
	if sc.pods {
		r.dirRequests = (etcdRequests() - dirBefore) / float64(count)
	}
	if sc.replicas > 0 {
		after := readStats(db)
		r.commits = float64(after[0]-before[0]) / float64(count)
		r.walSyncs = float64(after[1]-before[1]) / float64(count)
		r.dbCPU = float64(after[2]-before[2]) / float64(count)
	}
	return r
}

// prepareData returns the data of a run of sc. That is a data file in dir,
// or a new PostgreSQL database for replicas. A server of its own makes it
// and creates the hot keys. So only the scenario's commits count.
func prepareData(sc scenario, dir string) string {
	db := filepath.Join(dir, "bench.db")
	if sc.replicas > 0 {
		pgRuns++
		var err error
		if db, err = pg.CreateDatabase(fmt.Sprint("bench_", pgRuns)); err != nil {
			log.Fatal(err)
		}
	}
	prep := start(*sc.binary, db)
	if sc.setup {
		precreate(prep.addr)
	}
	if sc.replayAll {
		load(sc, []*server{prep}, []string{"--insecure"})
	}
	prep.stop()
	return db
}

// ghzReport is what a run needs of ghz's JSON report.
type ghzReport struct {
	Count   uint64
	Rps     float64
	Details []struct {
		Latency time.Duration
		Status  string
	}
}

// load runs one ghz per server, side by side. Each gets its share of sc's
// load and keys of its own. The fresh keys of two ghz must not meet.
func load(sc scenario, servers []*server, ghzArgs []string) []ghzReport {
	reps := make([]ghzReport, len(servers))
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			key := sc.key
			if len(servers) > 1 {
				key = strings.Replace(key, "fresh-", fmt.Sprintf("fresh-%d-", i), 1)
			}
			md := map[string]string{"authorization": "Bearer bench", "idempotency-key": key}
			call, data := method, sc.body
			if sc.get {
				delete(md, "idempotency-key")
				call, data = getMethod, fmt.Sprintf(`{"id":%q}`, hotIntentID)
			}
			mdJSON, _ := json.Marshal(md)
			c := max(sc.concurrency/len(servers), 1)
			n := int(float64(sc.requests)**scale) / len(servers)
			args := slices.Concat(ghzArgs, []string{"--call", call, "-d", data, "--metadata", string(mdJSON),
				"-c", fmt.Sprint(c), "-n", fmt.Sprint(n), "-O", "json", srv.addr})
			out, err := exec.Command(*ghz, args...).Output()
			if err != nil {
				errs <- fmt.Errorf("ghz: %v\n%s", err, out)
				return
			}
			if err := json.Unmarshal(out, &reps[i]); err != nil {
				errs <- fmt.Errorf("ghz output: %v", err)
				return
			}
			errs <- nil
		}()
	}
	for range servers {
		if err := <-errs; err != nil {
			log.Fatal(err)
		}
	}
	return reps
}

// loadHTTP makes sc's creates on srv's HTTP face from sc.concurrency
// workers. Each key is sc.key and a number of its own. It reports the
// creates as ghz would. The client keeps its connections, as ghz keeps its
// one.
func loadHTTP(sc scenario, srv *server) ghzReport {
	n := int(float64(sc.requests) * *scale)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: sc.concurrency}}
	url := "http://" + srv.httpAddr + "/v1/payment_intents"
	var next atomic.Int64
	details := make([][]struct {
		Latency time.Duration
		Status  string
	}, sc.concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range sc.concurrency {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				req, _ := http.NewRequest("POST", url, strings.NewReader(sc.body))
				req.Header.Set("Authorization", "Bearer bench")
				req.Header.Set("Idempotency-Key", sc.key+strconv.FormatInt(i, 10))
				req.Header.Set("Content-Type", "application/json")
				began := time.Now()
				resp, err := client.Do(req)
				status := "error"
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.Status
				}
				details[w] = append(details[w], struct {
					Latency time.Duration
					Status  string
				}{time.Since(began), status})
			}
		})
	}
	wg.Wait()
	rep := ghzReport{Count: uint64(n), Rps: float64(n) / time.Since(start).Seconds()}
	for _, d := range details {
		rep.Details = append(rep.Details, d...)
	}
	return rep
}

// summarize adds up the reports of ghz that ran side by side. It sums the
// requests/s. It gathers the latencies of every answer, errors included,
// since ghz's own percentiles leave errors out. It counts the answers by
// code, and returns how many requests they made.
func summarize(reps []ghzReport) (r result, count uint64) {
	var lat []time.Duration
	codes := map[string]int{}
	for _, rep := range reps {
		r.rps += rep.Rps
		count += rep.Count
		for _, d := range rep.Details {
			lat = append(lat, d.Latency)
			codes[d.Status]++
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p50 = float64(lat[len(lat)/2]) / 1e6
		r.p99 = float64(lat[len(lat)*99/100]) / 1e6
	}
	var parts []string
	for code, n := range codes {
		parts = append(parts, fmt.Sprintf("%s %d", code, n))
	}
	slices.Sort(parts)
	r.codes = strings.Join(parts, ", ")
	return r, count
}

// readStats returns the database's committed transactions, the cluster's
// WAL flushes and its CPU time in µs so far. Servers report their
// statistics as their connections end. So it waits for the figures to
// settle. Its own connections add a transaction or two, and a little CPU:
// noise against thousands of requests.
func readStats(url string) [3]int64 {
	ctx := context.Background()
	var last [2]int64
	for i := 0; ; i++ {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			log.Fatal(err)
		}
		var got [2]int64
		var checkpointer int
		err = conn.QueryRow(ctx, pgStats).Scan(&got[0], &got[1], &checkpointer)
		conn.Close(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if got == last || i == 20 {
			return [3]int64{got[0], got[1], clusterCPU(checkpointer)}
		}
		last = got
		time.Sleep(300 * time.Millisecond)
	}
}

// clusterCPU is the CPU time, in µs, of the PostgreSQL cluster whose
// checkpointer is the process checkpointer. It adds the postmaster's, its
// ended processes' and its live processes'. A backend, once its connection
// closed, counts among the postmaster's ended children.
func clusterCPU(checkpointer int) int64 {
	postmaster := int(procStat(checkpointer).ppid)
	pm := procStat(postmaster)
	ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if st := procStat(pid); st.ppid == int64(postmaster) {
			ticks += st.utime + st.stime
		}
	}
	return ticks * 1e6 / clockTicks
}

// clockTicks is the unit of /proc's CPU times: USER_HZ, 100 on Linux.
const clockTicks = 100

// stat is what clusterCPU reads of /proc/PID/stat, in clock ticks.
type stat struct{ ppid, utime, stime, cutime, cstime int64 }

// procStat reads /proc/pid/stat. A process gone meanwhile reads as zero.
func procStat(pid int) stat {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}
	}
	// The command name, in parentheses, may hold spaces. The fields that
	// count come after its closing parenthesis.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 15 {
		return stat{}
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	// After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	return stat{ppid: n(1), utime: n(11), stime: n(12), cutime: n(13), cstime: n(14)}
}

// hotIntentID is the id of the intent hot-0 created, in the data of the
// run being prepared. The get scenario reads it.
var hotIntentID string

// precreate makes the hot keys, so that replays find them completed.
func precreate(addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := paymentsv1.NewPaymentIntentServiceClient(conn)
	var req paymentsv1.CreatePaymentIntentRequest
	if err := protojson.Unmarshal([]byte(body), &req); err != nil {
		log.Fatal(err)
	}
	for i := range hotKeys {
		ctx := metadata.AppendToOutgoingContext(context.Background(),
			"authorization", "Bearer bench", "idempotency-key", fmt.Sprint("hot-", i))
		pi, err := client.CreatePaymentIntent(ctx, &req)
		if err != nil {
			log.Fatalf("pre-create hot-%d: %v", i, err)
		}
		if i == 0 {
			hotIntentID = pi.GetPaymentIntent().GetId()
		}
	}
}

// makeCerts writes a development CA and a server certificate for
// localhost and 127.0.0.1 into dir, and returns their files.
func makeCerts(dir string) (caFile, certFile, keyFile string) {
	ca, err := devcerts.NewCA("paymentsd bench CA")
	if err != nil {
		log.Fatal(err)
	}
	pair, err := ca.Issue(devcerts.LocalServer())
	if err != nil {
		log.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	if err := pair.WriteFiles(certFile, keyFile); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		log.Fatal(err)
	}
	return caFile, certFile, keyFile
}

type server struct {
	cmd      *exec.Cmd
	addr     string
	httpAddr string        // the HTTP face's, when it serves one
	lines    []string      // its log after the listening line
	logDone  chan struct{} // closed once the log is read to its end
}

func start(binary, db string, args ...string) *server {
	s := &server{logDone: make(chan struct{})}
	flags := []string{"--listen", "127.0.0.1:0", "--http-listen", ""}
	if db != "" { // "" with --pods among args
		flags = append(flags, "--db", db)
	}
	s.cmd = exec.Command(binary, append(flags, args...)...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	listening, httpListening := make(chan string, 1), make(chan string, 1)
	go func() {
		defer close(s.logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			// A line of each call is neither decoded nor kept: this
			// process shares the server's cores, and would take CPU
			// from it for every line.
			if requestLine(sc.Bytes()) {
				continue
			}
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				switch l.Msg {
				case "paymentsd listening":
					listening <- l.Addr
				case "http listening":
					httpListening <- l.Addr
				}
			}
			s.lines = append(s.lines, sc.Text())
		}
	}()
	select {
	case s.addr = <-listening:
	case <-s.logDone:
		log.Fatalf("%s exited at start:\n%s", binary, strings.Join(s.lines, "\n"))
	}
	if slices.Contains(args, "--http-listen") {
		select {
		case s.httpAddr = <-httpListening:
		case <-s.logDone:
			log.Fatalf("%s exited at start:\n%s", binary, strings.Join(s.lines, "\n"))
		}
	}
	return s
}

// requestLine reports whether line is the log line of one call, gRPC's or
// the HTTP face's.
func requestLine(line []byte) bool {
	return bytes.Contains(line, []byte(`"msg":"rpc"`)) || bytes.Contains(line, []byte(`"msg":"http"`))
}

// stop shuts the server down and returns the bbolt commits it made and the
// CPU time it used.
func (s *server) stop() (commits uint64, cpu time.Duration) {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.logDone:
	case <-time.After(time.Minute):
		// Its goroutines, for the report: a server must stop on SIGTERM.
		s.cmd.Process.Signal(syscall.SIGQUIT)
		<-s.logDone
		log.Fatalf("the server did not stop within a minute of SIGTERM:\n%s", strings.Join(s.lines, "\n"))
	}
	s.cmd.Wait()
	cpu = s.cmd.ProcessState.UserTime() + s.cmd.ProcessState.SystemTime()
	for _, line := range s.lines {
		var l struct {
			Msg     string
			Commits uint64
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "closed" {
			return l.Commits, cpu
		}
	}
	log.Fatalf("no commit count in the log")
	return 0, 0
}

func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{
		rps:      pick(func(r result) float64 { return r.rps }),
		p50:      pick(func(r result) float64 { return r.p50 }),
		p99:      pick(func(r result) float64 { return r.p99 }),
		commits:  pick(func(r result) float64 { return r.commits }),
		cpu:      pick(func(r result) float64 { return r.cpu }),
		walSyncs: pick(func(r result) float64 { return r.walSyncs }),
		dbCPU:    pick(func(r result) float64 { return r.dbCPU }),

		dirRequests: pick(func(r result) float64 { return r.dirRequests }),
	}
}

// toTheTop moves to the top of the repository when run from the daemon
// module's directory (go run -C daemon ./bench), so that the binaries in
// bin/ and every relative path given are read from the top, as make bench
// does.
func toTheTop() {
	mod, err := os.ReadFile("go.mod")
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/paymentsd/paymentsd/daemon\n") {
		return
	}
	if err := os.Chdir(".."); err != nil {
		log.Fatalf("to the top of the repository: %v", err)
	}
}
