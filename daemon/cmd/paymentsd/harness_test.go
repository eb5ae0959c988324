package main

// The harness: the tests of this package run the real paymentsd binary,
// built once by TestMain, through it. start runs a process as a spec says
// and waits until it serves; the daemon it returns is called over gRPC
// (its client) and HTTP, scraped, read in its log, signalled, killed and
// restarted on the same data.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// spec is how a test runs paymentsd. Its zero value: a bbolt file in a new
// t.TempDir(), dev mode, gRPC alone on a free loopback port, this
// process's environment; start returns once it serves.
type spec struct {
	db   string   // --db: a file or a PostgreSQL URL; "" for paymentsd.db in a new t.TempDir()
	pods string   // --pods, in place of --db: a pods file
	args []string // more flags, after the harness's own: of a flag given twice, the later wins
	env  []string // the process's environment; nil for this process's

	// exact: args (with env) are the whole command line, without the
	// harness's --listen, --http-listen, --db or faces.
	exact bool
	// noWait: start returns once the process runs; serving waits for it.
	noWait bool

	http    bool     // the HTTP API on a free port (httpAddr, httpBase); else none
	metrics bool     // the metrics listener on a free port (metricsAddr, scrape)
	tls     *certSet // serve TLS with its server certificate, the HTTP API too
	client  string   // with tls: the client certificate client presents; "" for none
}

// daemon is one paymentsd process.
type daemon struct {
	spec spec // as started, its db made concrete: restart runs it again
	cmd  *exec.Cmd

	addr     string // the gRPC listener's host:port, once it serves
	httpAddr string // the HTTP API's host:port, with spec.http or spec.tls
	httpBase string // "http://" or "https://" and httpAddr
	conn     *grpc.ClientConn
	client   paymentsv1.PaymentIntentServiceClient // on conn: TLS with spec.tls

	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed

	mu  sync.Mutex
	log bytes.Buffer // everything it wrote to stderr
}

// start runs paymentsd as s says and, unless s.noWait, waits until it
// serves. The process is killed when the test ends.
func start(t *testing.T, s spec) *daemon {
	t.Helper()
	if s.db == "" && s.pods == "" && !s.exact {
		s.db = filepath.Join(t.TempDir(), "paymentsd.db")
	}
	d := &daemon{spec: s, exited: make(chan struct{})}
	d.cmd = exec.Command(paymentsdBinary, s.commandLine()...)
	d.cmd.Env = s.env
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
	if !s.noWait {
		d.serving(t)
	}
	return d
}

// commandLine is the process's arguments. No HTTP unless asked for: the
// default port would be shared by every daemon of the run.
func (s spec) commandLine() []string {
	if s.exact {
		return s.args
	}
	args := []string{"--listen", "127.0.0.1:0", "--http-listen", "", "--db", s.db}
	if s.pods != "" {
		args = []string{"--listen", "127.0.0.1:0", "--http-listen", "", "--pods", s.pods}
	}
	if s.http || s.tls != nil {
		args = append(args, "--http-listen", "127.0.0.1:0")
	}
	if s.metrics {
		args = append(args, "--metrics-listen", "127.0.0.1:0")
	}
	if s.tls != nil {
		args = append(args, "--tls-cert", s.tls.serverCert, "--tls-key", s.tls.serverKey)
	}
	return append(args, s.args...)
}

// lockedWriter appends what the process writes to its daemon's log, under
// the daemon's lock.
type lockedWriter struct{ d *daemon }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.log.Write(p)
}

// serving waits until d serves, failing t if it exits first, and sets its
// addresses and client.
func (d *daemon) serving(t *testing.T) {
	t.Helper()
	if err := d.awaitServing(t); err != nil {
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	}
}

// errExited is awaitServing's error for a process that exited first.
var errExited = errors.New("paymentsd exited before it served")

// awaitServing is serving, returning errExited for a process that exits
// first, so that a test may start it again.
func (d *daemon) awaitServing(t *testing.T) error {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		exited := d.hasExited()
		if l := d.lines("paymentsd listening"); len(l) > 0 {
			d.addr = l[0].str("addr")
			break
		}
		if exited {
			return errExited
		}
		if time.Now().After(deadline) {
			t.Fatalf("paymentsd did not start listening:\n%s", d.stderr())
		}
	}
	if d.spec.http || d.spec.tls != nil {
		d.httpAddr = d.logAddr(t, "http listening")
		d.httpBase = "http://" + d.httpAddr
		if d.spec.tls != nil {
			d.httpBase = "https://" + d.httpAddr
		}
	}
	var cfg *tls.Config
	if d.spec.tls != nil {
		cfg = d.spec.tls.clientTLS(t, d.spec.client)
	}
	d.conn = d.dial(t, cfg)
	d.client = paymentsv1.NewPaymentIntentServiceClient(d.conn)
	return nil
}

// dial returns a new gRPC connection to d, over TLS configured by cfg, or
// plaintext for nil, closed when the test ends.
func (d *daemon) dial(t *testing.T, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn := d.newConn(t, cfg, opts...)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// newConn is dial's connection, for its caller to close.
func (d *daemon) newConn(t *testing.T, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(d.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// grpcClient is a PaymentIntentService client on a new connection.
func (d *daemon) grpcClient(t *testing.T, cfg *tls.Config) paymentsv1.PaymentIntentServiceClient {
	t.Helper()
	return paymentsv1.NewPaymentIntentServiceClient(d.dial(t, cfg))
}

// intentsURL is the HTTP API's collection of payment intents.
func (d *daemon) intentsURL() string { return d.httpBase + "/v1/payment_intents" }

// ---- Signals, exits, restarts ----

// hasExited reports whether d's process has exited.
func (d *daemon) hasExited() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// wantRunning fails t if d's process has exited.
func (d *daemon) wantRunning(t *testing.T, when string) {
	t.Helper()
	if d.hasExited() {
		t.Fatalf("paymentsd exited %s: %v\n%s", when, d.err, d.stderr())
	}
}

// hup sends d SIGHUP: read the credential files again.
func (d *daemon) hup(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// kill kills d with SIGKILL and waits until it has exited.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	<-d.exited
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

// restart starts d's spec again, on the same data, once d has exited: a
// d still running is stopped first, and must exit 0.
func (d *daemon) restart(t *testing.T) *daemon {
	t.Helper()
	if !d.hasExited() {
		if err := d.stop(t); err != nil {
			t.Fatalf("paymentsd exited with %v after SIGTERM, want 0:\n%s", err, d.stderr())
		}
	}
	return start(t, d.spec)
}

// exitCode waits up to within for d to exit and returns its exit status.
func (d *daemon) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(within):
		t.Fatalf("paymentsd %q still runs after %v, want it to exit at once:\n%s", d.cmd.Args[1:], within, d.stderr())
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

// exitBound is how long a refusal at start may take: the process is
// expected to exit at once, and this only leaves room for a loaded machine.
const exitBound = 5 * time.Second

// ---- Calls ----

// create calls CreatePaymentIntent on d, keeping the response header.
func (d *daemon) create(ctx context.Context, req *paymentsv1.CreatePaymentIntentRequest) answer {
	var a answer
	resp, err := d.client.CreatePaymentIntent(ctx, req, grpc.Header(&a.header))
	a.resp, a.err = resp, err
	return a
}

// createSeed creates the seed's intent of amount with token and key.
func (d *daemon) createSeed(token, key, amount string) answer {
	return d.create(withCreds(token, key), seedRequest(amount))
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

// httpCreate POSTs body to d's HTTP API with token and key.
func (d *daemon) httpCreate(t *testing.T, token, key, body string) httpAnswer {
	t.Helper()
	return httpCall(t, "POST", d.intentsURL(), body, withHTTPKey(token, key)...)
}

// metricsAddr is the address of d's metrics listener, from its log.
func (d *daemon) metricsAddr(t *testing.T) string {
	t.Helper()
	if l := d.lines("metrics listening"); len(l) > 0 {
		return l[0].str("addr")
	}
	t.Fatalf("no metrics address logged:\n%s", d.stderr())
	return ""
}

// scrape reads d's /metrics into a map from `name{labels}` to value.
func (d *daemon) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	return scrape(t, d.metricsAddr(t))
}

// ---- The log ----

// stderr is everything d has written to its stderr so far.
func (d *daemon) stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// logLine is one line of paymentsd's JSON log, decoded: a number is a
// float64.
type logLine map[string]any

// str is the line's field k if it is a string, else "".
func (l logLine) str(k string) string {
	s, _ := l[k].(string)
	return s
}

// decode sets v, a struct, from l as encoding/json sets it from the line.
func (l logLine) decode(v any) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// contains, as a field's value in waitLine's fields, matches a string
// field that contains it; contains("") any string.
type contains string

// has reports whether l holds every field of fields.
func (l logLine) has(fields map[string]any) bool {
	for k, want := range fields {
		if sub, ok := want.(contains); ok {
			if s, ok := l[k].(string); !ok || !strings.Contains(s, string(sub)) {
				return false
			}
		} else if l[k] != want {
			return false
		}
	}
	return true
}

// lines returns d's log lines so far with message msg, decoded; every line
// for "". A line that is not a JSON object is left out.
func (d *daemon) lines(msg string) []logLine {
	var out []logLine
	for _, text := range strings.Split(d.stderr(), "\n") {
		var l logLine
		if json.Unmarshal([]byte(text), &l) == nil && l != nil && (msg == "" || l["msg"] == msg) {
			out = append(out, l)
		}
	}
	return out
}

// notJSON returns the lines of d's log that are not JSON objects.
func (d *daemon) notJSON() []string {
	var bad []string
	for _, text := range strings.Split(strings.TrimSuffix(d.stderr(), "\n"), "\n") {
		var l logLine
		if json.Unmarshal([]byte(text), &l) != nil || l == nil {
			bad = append(bad, text)
		}
	}
	return bad
}

// waitLine waits up to within for a log line of d with message msg that
// has fields (nil: any), and returns it. It fails t at once if d exits
// without one.
func (d *daemon) waitLine(t *testing.T, msg string, fields map[string]any, within time.Duration) logLine {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		exited := d.hasExited() // before the read: then the log is whole
		for _, l := range d.lines(msg) {
			if l.has(fields) {
				return l
			}
		}
		if exited || time.Now().After(deadline) {
			t.Fatalf("no %q log line with %v within %v (exited %t):\n%s", msg, fields, within, exited, d.stderr())
		}
	}
}

// logWait is how long a log line expected soon may take to come.
const logWait = 10 * time.Second

// logAddr waits for the log line with message msg, a listener's, and
// returns its addr.
func (d *daemon) logAddr(t *testing.T, msg string) string {
	t.Helper()
	return d.waitLine(t, msg, nil, logWait).str("addr")
}

// waitAdmin waits until d, on a bbolt file, serves its admin socket. It
// comes after everything else: then d also watches its credential files.
func (d *daemon) waitAdmin(t *testing.T) {
	t.Helper()
	d.waitLine(t, "admin socket listening", nil, 30*time.Second)
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// ---- The harness's own test ----

func TestHarness_StartCreateReplayScrapeLogKillRestart(t *testing.T) {
	d := start(t, spec{http: true, metrics: true})
	first := d.createSeed("harness", "k-1", "100000000")
	if again := d.createSeed("harness", "k-1", "100000000"); first.err != nil || first.replayed() || again.err != nil || !again.replayed() {
		t.Fatalf("gRPC create %v (replayed %t), again %v (replayed %t); want fresh, then a replay", first.err, first.replayed(), again.err, again.replayed())
	}
	id := intentID(first)
	if h := d.httpCreate(t, "harness", "k-1", seedBody); h.status != http.StatusCreated || h.header.Get("Idempotent-Replayed") != "true" || h.intent(t)["id"] != id {
		t.Errorf("HTTP create of the gRPC key: %d, replayed %q, %s; want 201, the gRPC intent %s replayed", h.status, h.header.Get("Idempotent-Replayed"), h.body, id)
	}
	m := d.scrape(t)
	grpcOK := `grpc_server_handled_total{grpc_code="OK",grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService",grpc_type="unary"}`
	replays := `idempotency_requests_total{grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService",outcome="replay"}`
	if m[grpcOK] != 3 || m[replays] != 2 {
		t.Errorf("%s = %v, %s = %v; want 3 and 2: both faces counted", grpcOK, m[grpcOK], replays, m[replays])
	}
	if l := d.waitLine(t, "http", map[string]any{"idempotency": "replay"}, logWait); l["status"] != 201.0 {
		t.Errorf("the HTTP replay's log line %v, want status 201", l)
	}
	d.kill()
	if d.exitCode(t, exitBound) != -1 || !d.hasExited() {
		t.Errorf("after kill: %v, want killed by a signal", d.err)
	}
	d = d.restart(t)
	if a := d.createSeed("harness", "k-1", "100000000"); a.err != nil || !a.replayed() || intentID(a) != id {
		t.Errorf("after the restart: %v (replayed %t), want %s replayed from the same file", a.err, a.replayed(), id)
	}
	d.waitAdmin(t)
	if err := d.stop(t); err != nil {
		t.Errorf("SIGTERM: %v, want exit 0", err)
	}
	bad := start(t, spec{args: []string{"--no-such-flag"}, noWait: true})
	if code := bad.exitCode(t, exitBound); code != 2 || !strings.Contains(bad.stderr(), "no-such-flag") {
		t.Errorf("a bad flag: exit %d, want 2 naming it:\n%s", code, bad.stderr())
	}
	if r := paymentsd(t, "", "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "paymentsd ") {
		t.Errorf("paymentsd version: %+v", r)
	}
}
