package main

// Helpers shared by this package's test files: the tests run the real
// paymentsd binary, built once by TestMain, and talk to it over gRPC and
// HTTP. A helper that one test file alone uses stays in that file.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/bolttest"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/wire"
)

// ---- Starting the binary ----

// paymentsdBinary is the binary TestMain built for this run.
var paymentsdBinary string

// TestMain builds paymentsd once for every test of the package, and
// starts the PostgreSQL of the tests that need one (pgCluster).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "paymentsd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	paymentsdBinary = filepath.Join(dir, "paymentsd")
	if bin := os.Getenv("PAYMENTSD_TEST_BINARY"); bin != "" {
		// Another build, such as an earlier commit's: do its tests fail?
		paymentsdBinary = bin
	} else if out, err := exec.Command("go", "build", "-o", paymentsdBinary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build paymentsd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Run(m, &pgCluster)
	if missing := undeclared(); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: answers the OpenAPI document does not declare for their operation: %v\n", missing)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a running paymentsd process.
type daemon struct {
	cmd    *exec.Cmd
	addr   string
	client paymentsv1.PaymentIntentServiceClient
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed

	mu  sync.Mutex
	log bytes.Buffer // everything it wrote to stderr
}

// lockedWriter appends what the process writes to its daemon's log, under
// the daemon's lock.
type lockedWriter struct{ d *daemon }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.log.Write(p)
}

// startDaemon runs paymentsd on dbPath and waits until it listens.
func startDaemon(t *testing.T, dbPath string, args ...string) *daemon {
	t.Helper()
	d := launch(t, dbPath, args...)
	d.addr = waitListening(t, d)
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d.client = paymentsv1.NewPaymentIntentServiceClient(conn)
	return d
}

// launch starts paymentsd without waiting for it.
func launch(t *testing.T, dbPath string, args ...string) *daemon {
	t.Helper()
	// No HTTP unless a test asks for it (a later --http-listen wins): the
	// default port would be shared by every daemon of the run.
	return launchEnv(t, nil, append([]string{"--listen", "127.0.0.1:0", "--http-listen", "", "--db", dbPath}, args...)...)
}

// launchEnv starts paymentsd with exactly args (none of launch's defaults)
// in the environment env (nil: this process's).
func launchEnv(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{exited: make(chan struct{})}
	d.cmd = exec.Command(paymentsdBinary, args...)
	d.cmd.Env = env
	d.cmd.Stderr = &lockedWriter{d}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
	})
	return d
}

// waitListening waits until d serves and returns its gRPC address.
func waitListening(t *testing.T, d *daemon) string {
	t.Helper()
	select {
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd did not start listening:\n%s", d.stderr())
	case addr := <-d.listening():
		return addr
	}
	return ""
}

// listening delivers the address from the "paymentsd listening" log line.
func (d *daemon) listening() <-chan string {
	ch := make(chan string, 1)
	go func() {
		for {
			sc := bufio.NewScanner(strings.NewReader(d.stderr()))
			for sc.Scan() {
				var line struct{ Msg, Addr string }
				if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "paymentsd listening" {
					ch <- line.Addr
					return
				}
			}
			select {
			case <-d.exited:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return ch
}

// startHTTP runs paymentsd with the HTTP API on a free port and returns it
// with the API's base URL.
func startHTTP(t *testing.T, args ...string) (*daemon, string) {
	t.Helper()
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), append([]string{"--http-listen", "127.0.0.1:0"}, args...)...)
	return d, "http://" + d.logAddr(t, "http listening")
}

// stop sends SIGTERM and returns the exit status.
func (d *daemon) stop(t *testing.T) error {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return d.err
	case <-time.After(60 * time.Second):
		t.Fatalf("paymentsd ignored SIGTERM:\n%s", d.stderr())
		return nil
	}
}

// exitOf waits up to limit for d to exit and returns its exit status.
func exitOf(t *testing.T, d *daemon, limit time.Duration) int {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(limit):
		t.Fatalf("paymentsd %q still runs after %v, want it to exit at once:\n%s", d.cmd.Args[1:], limit, d.stderr())
	}
	var exit *exec.ExitError
	switch {
	case d.err == nil:
		return 0
	case errors.As(d.err, &exit):
		return exit.ExitCode()
	default:
		t.Fatalf("paymentsd %q: %v", d.cmd.Args[1:], d.err)
		return -1
	}
}

// runToExit runs paymentsd with a --db in a directory that does not exist
// yet and waits for it to exit. It returns the exit status, stderr and the
// data directory.
func runToExit(t *testing.T, args ...string) (code int, stderr, dataDir string) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), "data")
	d := launch(t, filepath.Join(dataDir, "paymentsd.db"), args...)
	return exitOf(t, d, 30*time.Second), d.stderr(), dataDir
}

// run is one run of a subcommand.
type run struct {
	stdout, stderr string
	code           int
}

// want fails t unless r exited with code and its stdout holds each of
// stdout.
func (r run) want(t *testing.T, code int, stdout ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout does not say %q:\n%s\nstderr:\n%s", s, r.stdout, r.stderr)
		}
	}
}

// paymentsd runs the binary with args, stdin as its standard input.
func paymentsd(t *testing.T, stdin string, args ...string) run {
	t.Helper()
	cmd := exec.Command(paymentsdBinary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errOut.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("paymentsd %q: %v", args, err)
	}
	return r
}

// runBounded runs paymentsd args in the working directory dir ("": this
// process's) and the environment env, and kills it after limit, which fails
// t: every refusal tested with it must come at once.
func runBounded(t *testing.T, limit time.Duration, dir string, env []string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, paymentsdBinary, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errOut.String()}
	if ctx.Err() != nil {
		t.Fatalf("paymentsd %q did not return within %v (killed):\nstdout:\n%s\nstderr:\n%s", args, limit, r.stdout, r.stderr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("paymentsd %q: %v", args, err)
	}
	t.Logf("paymentsd %q: exit %d after %v", args, r.code, time.Since(start).Round(time.Millisecond))
	return r
}

// ---- Logs ----

// stderr is everything d has written to its stderr so far.
func (d *daemon) stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// logAddr returns the addr of the first log line with message msg.
func (d *daemon) logAddr(t *testing.T, msg string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(d.stderr()))
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
				return line.Addr
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q log line:\n%s", msg, d.stderr())
	return ""
}

// waitAdmin waits until d serves its admin socket.
func waitAdmin(t *testing.T, d *daemon) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.stderr(), `"admin socket listening"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no admin socket:\n%s", d.stderr())
		}
	}
}

// ---- gRPC calls ----

// seedRequest is the body of the seed's demo.
func seedRequest(amount string) *paymentsv1.CreatePaymentIntentRequest {
	return &paymentsv1.CreatePaymentIntentRequest{
		Chain:            "evm:31337",
		Token:            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:         "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:           amount,
		ExpiresInSeconds: 900,
	}
}

// withCreds is a context whose outgoing metadata carries token as a bearer
// credential and key as the idempotency key (each left out when "").
func withCreds(token, key string) context.Context {
	kv := []string{}
	if token != "" {
		kv = append(kv, "authorization", "Bearer "+token)
	}
	if key != "" {
		kv = append(kv, wire.KeyHeader, key)
	}
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
}

// answer is one call's outcome with its metadata.
type answer struct {
	resp   proto.Message
	err    error
	header metadata.MD
}

// replayed reports whether the answer carried the replayed header.
func (a answer) replayed() bool {
	return fmt.Sprint(a.header.Get(wire.ReplayedHeader)) == "[true]"
}

// create calls CreatePaymentIntent on d, keeping the response header.
func (d *daemon) create(ctx context.Context, req *paymentsv1.CreatePaymentIntentRequest) answer {
	var a answer
	resp, err := d.client.CreatePaymentIntent(ctx, req, grpc.Header(&a.header))
	a.resp, a.err = resp, err
	return a
}

// list lists the intents token's principal sees (up to 1,000).
func (d *daemon) list(t *testing.T, token string) []*paymentsv1.PaymentIntent {
	t.Helper()
	resp, err := d.client.ListPaymentIntents(withCreds(token, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PaymentIntents
}

// deterministic is m's deterministic protobuf encoding.
func deterministic(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reason is the ErrorInfo reason of err's status, "" if it has none.
func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

// devPrincipal is the principal dev mode gives token.
func devPrincipal(token string) string { return "dev:" + sha256Hex(token) }

// sha256Hex is the hex SHA-256 of s.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// hostileToken is the token of the hostile-conditions tests' intents:
// bigDataFile writes its principal's, wantOneIntentPerAmount counts them.
const hostileToken = "hostile-token"

// wantOneIntentPerAmount checks that hostileToken's intents, one amount per
// key in these tests, hold each amount once, and returns how many there are.
func wantOneIntentPerAmount(t *testing.T, d *daemon) int {
	t.Helper()
	byAmount := map[string]int{}
	for _, pi := range d.list(t, hostileToken) {
		byAmount[pi.Amount]++
	}
	for amount, n := range byAmount {
		if n != 1 {
			t.Errorf("amount %s: %d intents, want 1", amount, n)
		}
	}
	return len(byAmount)
}

// ---- HTTP calls ----

// seedBody is the seed's curl body.
const seedBody = `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3",` +
	`"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",` +
	`"merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",` +
	`"amount":"100000000","expires_in_seconds":900}`

// httpAnswer is one HTTP exchange's answer.
type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

// problem decodes an application/problem+json body.
func (a httpAnswer) problem(t *testing.T) problemBody {
	t.Helper()
	var p problemBody
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json; body %s", ct, a.body)
	}
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", a.body, err)
	}
	return p
}

// problemBody is an application/problem+json body.
type problemBody struct {
	Type, Title, Detail, Error string
	Status                     int
	FieldViolations            []struct{ Field, Description string } `json:"field_violations"`
}

// intent decodes a body that is one payment intent.
func (a httpAnswer) intent(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
	return m
}

// httpCall sends one request; headers are name, value pairs. A body is sent
// as application/json unless the headers name another Content-Type.
func httpCall(t *testing.T, method, url, body string, headers ...string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	typed := false // the first Content-Type given replaces the default; a second is a second line
	for i := 0; i < len(headers); i += 2 {
		if http.CanonicalHeaderKey(headers[i]) == "Content-Type" && !typed {
			req.Header.Set(headers[i], headers[i+1])
			typed = true
			continue
		}
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	observe(method, url, resp.StatusCode)
	return httpAnswer{resp.StatusCode, resp.Header, b}
}

// bearer is the Authorization header, as httpCall's name, value pair, for
// token.
func bearerHeader(token string) []string { return []string{"Authorization", "Bearer " + token} }

// withHTTPKey is bearerHeader(token) with key as the Idempotency-Key header.
func withHTTPKey(token, key string) []string {
	return append(bearerHeader(token), "Idempotency-Key", key)
}

// ---- Metrics and health ----

// metricsAddr is the address of d's metrics listener, from its log.
func (d *daemon) metricsAddr(t *testing.T) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(d.stderr()))
	for sc.Scan() {
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "metrics listening" {
			return line.Addr
		}
	}
	t.Fatalf("no metrics address logged:\n%s", d.stderr())
	return ""
}

// scrape reads /metrics into a map from `name{labels}` to value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(t, body)
}

// parseMetrics reads the Prometheus text format: each sample's name and
// labels to its value.
func parseMetrics(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// healthz returns the status code of GET /healthz on d's metrics listener.
func (d *daemon) healthz(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + d.metricsAddr(t) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// healthStatus asks d's grpc.health.v1 for the server's status.
func healthStatus(t *testing.T, d *daemon) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	return serviceHealth(t, d, "")
}

// serviceHealth asks d's grpc.health.v1 for a service's status.
func serviceHealth(t *testing.T, d *daemon, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return h.Status
}

// waitHealth waits up to a minute for d to report want.
func waitHealth(t *testing.T, d *daemon, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got := healthStatus(t, d)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %v after a minute, want %v:\n%s", got, want, d.stderr())
		}
	}
}

// ---- Files and environment ----

// cleanEnv is this process's environment without any PAYMENTSD_ variable,
// and with env added.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYMENTSD_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// envInt is the integer in the environment variable name, or def when it
// is unset or not a number.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// pgCluster is a PostgreSQL for the tests of paymentsd on PostgreSQL.
var pgCluster *pgtest.Cluster

// postgresURL is a new database of the package's cluster for this test.
func postgresURL(t *testing.T) string {
	t.Helper()
	return pgtest.Require(t, pgCluster).NewDatabase(t, pgtest.DatabaseName(t.Name()))
}

// noDataDir fails t if dir, the --db's directory, exists.
func noDataDir(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("data directory %s: stat %v, entries %v; want it never created", dir, err, entries)
	}
}

// bigDataFile writes a paymentsd data file of at least 16 MiB: 2,000 intents
// of the principal of hostileToken, and 16 MiB of an embedder's data.
func bigDataFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	intents, err := boltintents.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	owner := devPrincipal(hostileToken)
	for i := range 2000 {
		pi := &paymentsv1.PaymentIntent{Id: fmt.Sprintf("pi_%024x", i), State: paymentsv1.State_STATE_CREATED, Version: 1,
			Amount: strconv.Itoa(i + 1), CreateTime: timestamppb.Now(), ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}
		if err := intents.CreateIntent(ctx, owner, "", pi); err != nil {
			t.Fatal(err)
		}
	}
	bolttest.Fill(t, db, "filler", 16)
	db.Close()
	if info, err := os.Stat(path); err != nil || info.Size() < 16<<20 {
		t.Fatalf("data file of %d bytes (%v), want at least 16 MiB", info.Size(), err)
	}
	return path
}

// filePages is the number of whole 4 KiB pages of the file at path.
func filePages(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size() / 4096
}

// damageWithDD zeroes count 4 KiB pages of path from page seek, with dd.
func damageWithDD(t *testing.T, path string, seek, count int64) {
	t.Helper()
	out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=4096", "conv=notrunc",
		fmt.Sprint("seek=", seek), fmt.Sprint("count=", count)).CombinedOutput()
	if err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
}

// truncate cuts path to size bytes with truncate(1).
func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if out, err := exec.Command("truncate", "-s", fmt.Sprint(size), path).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v %s", err, out)
	}
}

// mountTmpfs mounts a tmpfs of size (as mount's size= takes it) on a new
// directory under t.TempDir() and unmounts it when the test ends. Cleanups
// run last first, so a daemon started after this has been killed by then.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v\n%s(the disk-full test needs root and mount)", size, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			exec.Command("umount", "-l", dir).Run() // do not leave it mounted
		}
	})
	return dir
}

// fillUntilFull writes a filler file in dir until the file system refuses
// a page with ENOSPC, and returns its path.
func fillUntilFull(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err = f.Write(page); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	return path
}

// ---- Slow disks: strace on a running daemon ----

// slowFsync attaches strace to d, delaying every fdatasync and fsync of
// the real binary by delay, and detaches when the test ends.
func slowFsync(t *testing.T, d *daemon, delay time.Duration) {
	t.Helper()
	us := fmt.Sprint(delay.Microseconds())
	t.Cleanup(attachStrace(t, d, "-e", "trace=fdatasync,fsync", "-e", "inject=fdatasync:delay_enter="+us, "-e", "inject=fsync:delay_enter="+us))
}

// attachStrace attaches strace with args to d's threads, and returns the
// func that detaches it, leaving paymentsd running.
func attachStrace(t *testing.T, d *daemon, args ...string) (detach func()) {
	t.Helper()
	cmd := exec.Command("strace", append([]string{"-f", "-p", strconv.Itoa(d.cmd.Process.Pid), "-o", "/dev/null"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	detach = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	attached := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), "attached") {
				once.Do(func() { close(attached) })
			}
		}
	}()
	select {
	case <-attached:
		time.Sleep(100 * time.Millisecond) // the other threads
	case <-time.After(30 * time.Second):
		detach()
		t.Fatal("strace did not attach")
	}
	return detach
}
