package main

// End-to-end tests of TLS and mutual TLS (--tls-cert, --tls-key,
// --tls-client-ca, --principal-from): the real binary, with certificates
// made by internal/devcerts, reached by grpc-go, net/http, grpcurl and
// curl.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/wire"
)

// certSet is a CA and the certificates it issued, as PEM files in a
// temporary directory.
type certSet struct {
	dir                   string
	ca                    *devcerts.CA // nil for a set written by devcerts.Dev, whose CA key is not kept
	caFile                string
	serverCert, serverKey string
	clients               map[string]certFiles
}

type certFiles struct{ cert, key string }

// newCertSet makes a CA named name and a server certificate for localhost,
// 127.0.0.1 and ::1.
func newCertSet(t *testing.T, name string) *certSet {
	t.Helper()
	ca, err := devcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &certSet{dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.pem"), clients: map[string]certFiles{}}
	if err := os.WriteFile(s.caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	f := s.write(t, "server", s.issue(t, devcerts.LocalServer()))
	s.serverCert, s.serverKey = f.cert, f.key
	return s
}

// devCertSet is the set `paymentsd dev-certs DIR` writes.
func devCertSet(t *testing.T) *certSet {
	t.Helper()
	dir := t.TempDir()
	if _, err := devcerts.Dev(dir); err != nil {
		t.Fatal(err)
	}
	at := func(name string) certFiles {
		return certFiles{filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")}
	}
	return &certSet{
		dir: dir, caFile: filepath.Join(dir, "ca.pem"),
		serverCert: at("server").cert, serverKey: at("server").key,
		clients: map[string]certFiles{"client-a": at("client-a"), "client-b": at("client-b")},
	}
}

func (s *certSet) issue(t *testing.T, o devcerts.Options) *devcerts.Pair {
	t.Helper()
	p, err := s.ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// write writes p as name.pem and name-key.pem in s's directory.
func (s *certSet) write(t *testing.T, name string, p *devcerts.Pair) certFiles {
	t.Helper()
	f := certFiles{filepath.Join(s.dir, name+".pem"), filepath.Join(s.dir, name+"-key.pem")}
	if err := p.WriteFiles(f.cert, f.key); err != nil {
		t.Fatal(err)
	}
	return f
}

// client returns the files of the client certificate name, issued on first
// use as the dev set's are: URI SAN spiffe://paymentsd.dev/<name>, DNS SAN
// <name>.paymentsd.dev.
func (s *certSet) client(t *testing.T, name string) certFiles {
	t.Helper()
	if f, ok := s.clients[name]; ok {
		return f
	}
	f := s.write(t, name, s.issue(t, devcerts.Client(name)))
	s.clients[name] = f
	return f
}

func (s *certSet) pool(t *testing.T) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(s.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", s.caFile)
	}
	return pool
}

// clientTLS is a client's configuration that trusts s's CA and, unless
// client is "", presents s's client certificate of that name.
func (s *certSet) clientTLS(t *testing.T, client string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.pool(t)}
	if client != "" {
		f := s.client(t, client)
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// tlsDaemon is paymentsd serving TLS on its gRPC and HTTP listeners.
type tlsDaemon struct {
	*daemon
	httpAddr string // the HTTPS API's host:port
}

// startTLSDaemon runs paymentsd with certs' server certificate, gRPC and
// HTTP on free ports, and waits until it listens. Its client is a TLS
// connection that trusts certs' CA and presents certs' client certificate
// named client ("" for none).
func startTLSDaemon(t *testing.T, certs *certSet, client string, args ...string) *tlsDaemon {
	t.Helper()
	d := launch(t, filepath.Join(t.TempDir(), "paymentsd.db"), append([]string{
		"--tls-cert", certs.serverCert, "--tls-key", certs.serverKey, "--http-listen", "127.0.0.1:0",
	}, args...)...)
	d.addr = waitListening(t, d)
	td := &tlsDaemon{daemon: d, httpAddr: d.logAddr(t, "http listening")}
	d.client = paymentsv1.NewPaymentIntentServiceClient(td.dial(t, certs.clientTLS(t, client)))
	return td
}

// dial returns a new gRPC connection to d over TLS configured by cfg.
func (d *tlsDaemon) dial(t *testing.T, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// grpcClient is a PaymentIntentService client on a new connection.
func (d *tlsDaemon) grpcClient(t *testing.T, cfg *tls.Config) paymentsv1.PaymentIntentServiceClient {
	t.Helper()
	return paymentsv1.NewPaymentIntentServiceClient(d.dial(t, cfg))
}

func (d *tlsDaemon) baseURL() string { return "https://" + d.httpAddr + "/v1/payment_intents" }

// httpsClient is an HTTP client with its own connections, configured by cfg.
func httpsClient(t *testing.T, cfg *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// httpsCall is httpCall with client; it returns the error of the exchange
// instead of failing on it.
func httpsCall(t *testing.T, client *http.Client, method, url, body string, headers ...string) (httpAnswer, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpAnswer{}, err
	}
	return httpAnswer{resp.StatusCode, resp.Header, b}, nil
}

func mustHTTPS(t *testing.T, client *http.Client, method, url, body string, headers ...string) httpAnswer {
	t.Helper()
	a, err := httpsCall(t, client, method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// listedIDs decodes the body of GET /v1/payment_intents.
func listedIDs(t *testing.T, a httpAnswer) []string {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
	var page struct {
		PaymentIntents []struct{ ID string } `json:"payment_intents"`
	}
	if err := json.Unmarshal(a.body, &page); err != nil {
		t.Fatalf("list body %s: %v", a.body, err)
	}
	var ids []string
	for _, pi := range page.PaymentIntents {
		ids = append(ids, pi.ID)
	}
	return ids
}

func intentIDs(pis []*paymentsv1.PaymentIntent) []string {
	var ids []string
	for _, pi := range pis {
		ids = append(ids, pi.Id)
	}
	return ids
}

// callCtx is withCreds with a deadline, so that no call of these tests can
// hang.
func callCtx(t *testing.T, token, key string) context.Context {
	t.Helper()
	md, _ := metadata.FromOutgoingContext(withCreds(token, key))
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// createdID returns a func that takes a create's results and returns the
// id of the intent, failing t on an error: createdID(t)(client.Create…(…)).
func createdID(t *testing.T) func(*paymentsv1.CreatePaymentIntentResponse, error) string {
	return func(resp *paymentsv1.CreatePaymentIntentResponse, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return resp.PaymentIntent.Id
	}
}

// listOf lists the intents client's principal sees.
func listOf(t *testing.T, client paymentsv1.PaymentIntentServiceClient, token string) []string {
	t.Helper()
	resp, err := client.ListPaymentIntents(callCtx(t, token, ""), &paymentsv1.ListPaymentIntentsRequest{PageSize: 1000})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return intentIDs(resp.PaymentIntents)
}

// waitLogText waits until d's log has a line whose message starts with msg and
// whose text contains every one of also, and returns it.
func (d *daemon) waitLogText(t *testing.T, msg string, also ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(d.stderr()))
		for sc.Scan() {
			var line struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &line) != nil || !strings.HasPrefix(line.Msg, msg) {
				continue
			}
			all := true
			for _, s := range also {
				all = all && strings.Contains(sc.Text(), s)
			}
			if all {
				return sc.Text()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q log line containing %q:\n%s", msg, also, d.stderr())
	return ""
}

// scrapeTLS reads /metrics over HTTPS into a map from `name{labels}` to
// value, as scrape does over HTTP.
func scrapeTLS(t *testing.T, client *http.Client, addr string) map[string]float64 {
	t.Helper()
	a := mustHTTPS(t, client, "GET", "https://"+addr+"/metrics", "")
	if a.status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", a.status, a.body)
	}
	return parseMetrics(t, a.body)
}

const (
	tlsReloadErrors = `paymentsd_credential_reloads_total{file="tls",result="error"}`
	tlsReloadsOK    = `paymentsd_credential_reloads_total{file="tls",result="ok"}`
	tlsNotAfter     = `paymentsd_tls_certificate_not_after_seconds`
)

// servedCert handshakes with addr as a gRPC client would and returns the
// certificate the server presented.
func servedCert(t *testing.T, addr string, cfg *tls.Config) *x509.Certificate {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	st := conn.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		t.Errorf("ALPN %q, want h2", st.NegotiatedProtocol)
	}
	return st.PeerCertificates[0]
}

// ciRun reports whether a missing tool must fail the test rather than skip it.
func ciRun() bool { return os.Getenv("CI") == "true" }

// needTool skips t, or under CI=true fails it, for a tool that is missing.
func needTool(t *testing.T, format string, args ...any) {
	t.Helper()
	if ciRun() {
		t.Fatalf(format+" (CI=true: required)", args...)
	}
	t.Skipf(format, args...)
}

const curlPath = "/usr/bin/curl"

var grpcurl struct {
	once sync.Once
	path string
	err  error
}

// grpcurlBinary builds grpcurl from tools/go.mod, once per run.
func grpcurlBinary(t *testing.T) string {
	t.Helper()
	grpcurl.once.Do(func() {
		path := filepath.Join(filepath.Dir(paymentsdBinary), "grpcurl") // removed with the binary by TestMain
		cmd := exec.Command("go", "build", "-modfile=../../../tools/go.mod", "-o", path, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
		if out, err := cmd.CombinedOutput(); err != nil {
			grpcurl.err = fmt.Errorf("build grpcurl: %v\n%s", err, out)
			return
		}
		grpcurl.path = path
	})
	if grpcurl.err != nil {
		needTool(t, "%v", grpcurl.err)
	}
	return grpcurl.path
}

func curlBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath(curlPath); err != nil {
		needTool(t, "curl: %v", err)
	}
	return curlPath
}

// runGRPCurl runs grpcurl with args and returns its decoded JSON answer.
func runGRPCurl(t *testing.T, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, grpcurlBinary(t), append([]string{"-max-time", "10"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpcurl %q: %v\n%s%s", args, err, out, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("grpcurl %q printed %s: %v", args, out, err)
	}
	return m
}

// curlAnswer is what curl saw of one exchange.
type curlAnswer struct {
	httpAnswer
	version string // curl's %{http_version}: "2" for HTTP/2
}

// runCurl runs curl with args (a URL among them) and returns the answer.
func runCurl(t *testing.T, args ...string) curlAnswer {
	t.Helper()
	dir := t.TempDir()
	headers, body := filepath.Join(dir, "headers"), filepath.Join(dir, "body")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, curlBinary(t), append([]string{
		"-sS", "--max-time", "10", "-D", headers, "-o", body, "-w", "%{http_code} %{http_version}",
	}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %q: %v\n%s", args, err, stderr.String())
	}
	var a curlAnswer
	if _, err := fmt.Sscanf(string(out), "%d %s", &a.status, &a.version); err != nil {
		t.Fatalf("curl -w printed %q: %v", out, err)
	}
	a.header = http.Header{}
	raw, _ := os.ReadFile(headers)
	for _, line := range strings.Split(string(raw), "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(name, "HTTP/") {
			a.header.Add(name, strings.TrimSpace(value))
		}
	}
	a.body, _ = os.ReadFile(body)
	return a
}

// grpcurlIntentID is the id of the intent in a grpcurl answer (grpcurl
// prints lowerCamelCase JSON names).
func grpcurlIntentID(t *testing.T, m map[string]any) string {
	t.Helper()
	pi, _ := m["paymentIntent"].(map[string]any)
	id, _ := pi["id"].(string)
	if id == "" {
		t.Fatalf("grpcurl answer %v holds no paymentIntent.id", m)
	}
	return id
}

// TestTLS_GRPCurlAndCurl_SameIntent drives the TLS server with the tools an
// operator would use, from the certificates `paymentsd dev-certs` writes:
// grpcurl -cacert and curl --cacert, and with --tls-client-ca, -cert/-key
// and --cert/--key. A key and body sent by one tool is the same request
// when the other sends it.
func TestTLS_GRPCurlAndCurl_SameIntent(t *testing.T) {
	for _, mtls := range []bool{false, true} {
		name := "TLS"
		if mtls {
			name = "mTLS"
		}
		t.Run(name, func(t *testing.T) {
			grpcurlBinary(t)
			curlBinary(t)
			certs := devCertSet(t)
			var args, grpcurlTLS, curlTLS []string
			grpcurlTLS = []string{"-cacert", certs.caFile}
			curlTLS = []string{"--cacert", certs.caFile}
			if mtls {
				args = []string{"--tls-client-ca", certs.caFile}
				a := certs.clients["client-a"]
				grpcurlTLS = append(grpcurlTLS, "-cert", a.cert, "-key", a.key)
				curlTLS = append(curlTLS, "--cert", a.cert, "--key", a.key)
			}
			client := ""
			if mtls {
				client = "client-a"
			}
			d := startTLSDaemon(t, certs, client, args...)
			d.waitLogText(t, "paymentsd listening", `"tls":true`)
			d.waitLogText(t, "http listening", `"tls":true`)

			grpcCreate := func(key string) map[string]any {
				return runGRPCurl(t, append(slices.Clone(grpcurlTLS),
					"-H", "authorization: Bearer t1", "-H", "idempotency-key: "+key, "-d", seedBody,
					d.addr, "payments.v1.PaymentIntentService/CreatePaymentIntent")...)
			}
			curlCreate := func(key string) curlAnswer {
				return runCurl(t, append(slices.Clone(curlTLS),
					"-H", "Authorization: Bearer t1", "-H", "Idempotency-Key: "+key,
					"-H", "Content-Type: application/json", "--data-raw", seedBody, d.baseURL())...)
			}

			// grpcurl first, then curl.
			g := grpcurlIntentID(t, grpcCreate("tools-1"))
			c := curlCreate("tools-1")
			if c.status != http.StatusCreated || c.header.Get("Idempotent-Replayed") != "true" || c.intent(t)["id"] != g {
				t.Errorf("curl after grpcurl: %d, Idempotent-Replayed %q, body %s; want 201, true, intent %s",
					c.status, c.header.Get("Idempotent-Replayed"), c.body, g)
			}
			if c.version != "2" {
				t.Errorf("curl spoke HTTP/%s, want HTTP/2 (h2 by ALPN)", c.version)
			}
			// curl first, then grpcurl.
			c = curlCreate("tools-2")
			if c.status != http.StatusCreated || c.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("curl create: %d, Idempotent-Replayed %q, body %s; want 201, fresh", c.status, c.header.Get("Idempotent-Replayed"), c.body)
			}
			second, _ := c.intent(t)["id"].(string)
			if g2 := grpcurlIntentID(t, grpcCreate("tools-2")); g2 != second {
				t.Errorf("grpcurl after curl: intent %s, want curl's %s", g2, second)
			}

			want := []string{g, second}
			slices.Sort(want)
			list := runCurl(t, append(slices.Clone(curlTLS), "-H", "Authorization: Bearer t1", d.baseURL())...)
			if got := listedIDs(t, list.httpAnswer); !slices.Equal(sorted(got), want) {
				t.Errorf("curl lists %v, want %v", got, want)
			}
			m := runGRPCurl(t, append(slices.Clone(grpcurlTLS), "-H", "authorization: Bearer t1", "-d", `{"page_size":100}`,
				d.addr, "payments.v1.PaymentIntentService/ListPaymentIntents")...)
			var got []string
			pis, _ := m["paymentIntents"].([]any)
			for _, pi := range pis {
				id, _ := pi.(map[string]any)["id"].(string)
				got = append(got, id)
			}
			if !slices.Equal(sorted(got), want) {
				t.Errorf("grpcurl lists %v, want %v", got, want)
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestTLS_PlaintextClient_RefusedClearly: a plaintext client on a TLS port
// gets an error that says so, and the server goes on serving.
func TestTLS_PlaintextClient_RefusedClearly(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLSDaemon(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.logAddr(t, "metrics listening")

	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = paymentsv1.NewPaymentIntentServiceClient(conn).CreatePaymentIntent(callCtx(t, "t1", "plain-1"), seedRequest("1"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext gRPC on the TLS port: %v, want UNAVAILABLE", err)
	}
	t.Logf("plaintext gRPC client: %v", err)

	// Go's HTTP server answers a plain HTTP request on its TLS port itself.
	plain := &http.Client{Timeout: 10 * time.Second}
	for what, addr := range map[string]string{"HTTP API": d.httpAddr, "metrics": metricsAddr} {
		a, err := httpsCall(t, plain, "GET", "http://"+addr+"/v1/openapi.json", "")
		if err != nil {
			t.Errorf("plain http:// to the %s's HTTPS port: %v, want an answer", what, err)
			continue
		}
		if a.status != http.StatusBadRequest || string(a.body) != "Client sent an HTTP request to an HTTPS server.\n" {
			t.Errorf("plain http:// to the %s's HTTPS port: %d %q, want 400 \"Client sent an HTTP request to an HTTPS server.\"", what, a.status, a.body)
		}
	}

	// Still serving, over TLS.
	select {
	case <-d.exited:
		t.Fatalf("paymentsd exited: %v\n%s", d.err, d.stderr())
	default:
	}
	if _, err := d.client.CreatePaymentIntent(callCtx(t, "t1", "plain-1"), seedRequest("1")); err != nil {
		t.Errorf("TLS create after the plaintext attempts: %v", err)
	}
	if a := mustHTTPS(t, httpsClient(t, certs.clientTLS(t, "")), "GET", d.baseURL(), "", bearerHeader("t1")...); len(listedIDs(t, a)) != 1 {
		t.Errorf("HTTPS list after the plaintext attempts: %s, want the one intent", a.body)
	}
}

// TestTLS_VersionsAndALPN: TLS 1.2 is the oldest version spoken, on every
// listener; gRPC negotiates h2 and the HTTP API h2 or http/1.1.
func TestTLS_VersionsAndALPN(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLSDaemon(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	ports := map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr, "metrics": d.logAddr(t, "metrics listening")}
	handshake := func(addr string, version uint16, protos ...string) (*tls.ConnectionState, error) {
		cfg := certs.clientTLS(t, "")
		cfg.MinVersion, cfg.MaxVersion, cfg.NextProtos = version, version, protos
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		st := conn.ConnectionState()
		return &st, nil
	}
	for what, addr := range ports {
		if _, err := handshake(addr, tls.VersionTLS11, "h2"); err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("%s: TLS 1.1 handshake: %v, want refused for its protocol version", what, err)
		}
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			st, err := handshake(addr, v, "h2")
			if err != nil || st.NegotiatedProtocol != "h2" {
				t.Errorf("%s: %s handshake offering h2: %v, ALPN %q; want h2", what, tls.VersionName(v), err, alpn(st))
			}
		}
	}
	for what, addr := range map[string]string{"HTTP": d.httpAddr, "metrics": ports["metrics"]} {
		if st, err := handshake(addr, tls.VersionTLS13, "http/1.1"); err != nil || st.NegotiatedProtocol != "http/1.1" {
			t.Errorf("%s: handshake offering http/1.1: %v, ALPN %q; want http/1.1", what, err, alpn(st))
		}
	}
	// An HTTP/1.1 client is served.
	h1 := httpsClient(t, certs.clientTLS(t, ""))
	h1.Transport.(*http.Transport).ForceAttemptHTTP2 = false
	h1.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	a := mustHTTPS(t, h1, "POST", d.baseURL(), seedBody, withHTTPKey("t1", "h1")...)
	if a.status != http.StatusCreated {
		t.Errorf("HTTP/1.1 create: %d %s, want 201", a.status, a.body)
	}
	h2 := httpsClient(t, certs.clientTLS(t, ""))
	resp, err := h2.Get(d.baseURL()[:strings.LastIndex(d.baseURL(), "/")] + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Errorf("HTTP/2 client: %s %s, want HTTP/2.0 200", resp.Proto, resp.Status)
	}
}

func alpn(st *tls.ConnectionState) string {
	if st == nil {
		return ""
	}
	return st.NegotiatedProtocol
}

// TestTLS_ServerCertFromAnotherCA_RefusedByClient: a client that trusts
// one CA does not talk to a server whose certificate another CA signed.
func TestTLS_ServerCertFromAnotherCA_RefusedByClient(t *testing.T) {
	trusted := newCertSet(t, "paymentsd trusted CA")
	other := newCertSet(t, "paymentsd other CA")
	d := startTLSDaemon(t, other, "")
	cfg := trusted.clientTLS(t, "")

	_, err := d.grpcClient(t, cfg).CreatePaymentIntent(callCtx(t, "t1", "k"), seedRequest("1"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("gRPC: %v, want UNAVAILABLE naming the unknown authority", err)
	}
	_, err = httpsCall(t, httpsClient(t, cfg), "GET", d.baseURL(), "", bearerHeader("t1")...)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("HTTPS: %v, want x509.UnknownAuthorityError", err)
	}
	// The server's own CA is what a client needs.
	if _, err := d.grpcClient(t, other.clientTLS(t, "")).CreatePaymentIntent(callCtx(t, "t1", "k"), seedRequest("1")); err != nil {
		t.Errorf("trusting the server's CA: %v", err)
	}
}

// TestTLS_CertOutOfValidityAtStart_Refused: paymentsd does not start with a
// certificate that has expired or is not valid yet, and says which.
func TestTLS_CertOutOfValidityAtStart_Refused(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Time
		want                string
	}{
		{"expired", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), "expired at " + now.Add(-24*time.Hour).UTC().Format("2006-01-02T15:04")},
		{"not yet valid", now.Add(24 * time.Hour), now.Add(48 * time.Hour), "is not valid until"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certs := newCertSet(t, "paymentsd test CA")
			o := devcerts.LocalServer()
			o.NotBefore, o.NotAfter = tc.notBefore, tc.notAfter
			f := certs.write(t, "out-of-validity", certs.issue(t, o))
			code, stderr, dir := runToExit(t, "--tls-cert", f.cert, "--tls-key", f.key)
			if code == 0 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, f.cert) {
				t.Errorf("exit %d, stderr %q; want non-zero, naming %s and %q", code, stderr, f.cert, tc.want)
			}
			if code != 2 {
				t.Errorf("exit %d, want 2 (a bad configuration)", code)
			}
			noDataDir(t, dir)
		})
	}
}

// TestTLS_CertExpiresWhileServing_ClientRefuses: a certificate valid at
// start that expires while paymentsd runs is served until replaced, and a
// client that verifies it refuses the server; writing a valid pair over it
// brings new connections back.
func TestTLS_CertExpiresWhileServing_ClientRefuses(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	o := devcerts.LocalServer()
	o.NotAfter = time.Now().Add(5 * time.Second)
	short := certs.issue(t, o)
	if err := short.WriteFiles(certs.serverCert, certs.serverKey); err != nil {
		t.Fatal(err)
	}
	d := startTLSDaemon(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.logAddr(t, "metrics listening")
	scraper := httpsClient(t, certs.clientTLS(t, ""))
	if got := scrapeTLS(t, scraper, metricsAddr)[tlsNotAfter]; got != float64(short.Cert.NotAfter.Unix()) {
		t.Errorf("%s = %v, want %d", tlsNotAfter, got, short.Cert.NotAfter.Unix())
	}
	if _, err := d.client.CreatePaymentIntent(callCtx(t, "t1", "before"), seedRequest("1")); err != nil {
		t.Fatalf("create while the certificate is valid: %v", err)
	}

	time.Sleep(time.Until(short.Cert.NotAfter) + 1100*time.Millisecond)
	_, err := d.grpcClient(t, certs.clientTLS(t, "")).CreatePaymentIntent(callCtx(t, "t1", "after"), seedRequest("1"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate has expired") {
		t.Errorf("gRPC on a new connection after expiry: %v, want UNAVAILABLE naming the expiry", err)
	}
	_, err = httpsCall(t, httpsClient(t, certs.clientTLS(t, "")), "GET", d.baseURL(), "", bearerHeader("t1")...)
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("HTTPS after expiry: %v, want x509.CertificateInvalidError, Expired", err)
	}

	fresh := certs.issue(t, devcerts.LocalServer())
	if err := fresh.WriteFiles(certs.serverCert, certs.serverKey); err != nil {
		t.Fatal(err)
	}
	d.waitLogText(t, "tls certificate reloaded", `"serial":"`+fresh.Cert.SerialNumber.Text(16)+`"`)
	if _, err := d.grpcClient(t, certs.clientTLS(t, "")).CreatePaymentIntent(callCtx(t, "t1", "after"), seedRequest("1")); err != nil {
		t.Errorf("gRPC after the valid pair was written: %v", err)
	}
	if got := scrapeTLS(t, httpsClient(t, certs.clientTLS(t, "")), metricsAddr)[tlsNotAfter]; got != float64(fresh.Cert.NotAfter.Unix()) {
		t.Errorf("%s = %v after the reload, want %d", tlsNotAfter, got, fresh.Cert.NotAfter.Unix())
	}
}

// TestTLS_ExpiredReplacement_NotReloaded: an expired pair written over the
// served one is not loaded: paymentsd logs and counts the failure and new
// connections still get the certificate from before.
func TestTLS_ExpiredReplacement_NotReloaded(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLSDaemon(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.logAddr(t, "metrics listening")
	cfg := certs.clientTLS(t, "")
	before := servedCert(t, d.addr, cfg)
	m := scrapeTLS(t, httpsClient(t, cfg), metricsAddr)
	errorsBefore, okBefore := m[tlsReloadErrors], m[tlsReloadsOK]
	if _, ok := m[tlsReloadErrors]; !ok {
		t.Fatalf("no %s series", tlsReloadErrors)
	}

	o := devcerts.LocalServer()
	o.NotBefore, o.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	if err := certs.issue(t, o).WriteFiles(certs.serverCert, certs.serverKey); err != nil {
		t.Fatal(err)
	}
	line := d.waitLogText(t, "tls files not reloaded", "expired at")
	t.Logf("log: %s", line)

	m = scrapeTLS(t, httpsClient(t, cfg), metricsAddr)
	if m[tlsReloadErrors] <= errorsBefore || m[tlsReloadsOK] != okBefore {
		t.Errorf("after an expired pair: %s %v (was %v), %s %v (was %v); want errors up, ok unchanged",
			tlsReloadErrors, m[tlsReloadErrors], errorsBefore, tlsReloadsOK, m[tlsReloadsOK], okBefore)
	}
	if got := m[tlsNotAfter]; got != float64(before.NotAfter.Unix()) {
		t.Errorf("%s = %v, want the certificate still served's %d", tlsNotAfter, got, before.NotAfter.Unix())
	}
	for what, addr := range map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr, "metrics": metricsAddr} {
		if got := servedCert(t, addr, cfg); got.SerialNumber.Cmp(before.SerialNumber) != 0 {
			t.Errorf("%s serves serial %x after the failed reload, want the previous %x", what, got.SerialNumber, before.SerialNumber)
		}
	}
	if _, err := d.grpcClient(t, cfg).CreatePaymentIntent(callCtx(t, "t1", "k"), seedRequest("1")); err != nil {
		t.Errorf("gRPC on a new connection after the failed reload: %v", err)
	}
	if a := mustHTTPS(t, httpsClient(t, cfg), "GET", d.baseURL(), "", bearerHeader("t1")...); len(listedIDs(t, a)) != 1 {
		t.Errorf("HTTPS on a new connection after the failed reload: %s", a.body)
	}
}

// TestMTLS_CertPrincipals_Isolated: with --principal-from cert, each client
// certificate is a principal of its own, over gRPC and HTTP alike.
func TestMTLS_CertPrincipals_Isolated(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLSDaemon(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--principal-from", "cert")
	d.waitLogText(t, "principals from client certificates")
	a, b := d.client, d.grpcClient(t, certs.clientTLS(t, "client-b"))

	idA := createdID(t)(a.CreatePaymentIntent(callCtx(t, "", "order-1"), seedRequest("100000000")))
	var header metadata.MD
	respB, err := b.CreatePaymentIntent(callCtx(t, "", "order-1"), seedRequest("100000000"), grpc.Header(&header))
	idB := createdID(t)(respB, err)
	if idA == idB || len(header.Get(wire.ReplayedHeader)) > 0 {
		t.Fatalf("client-a %s, client-b %s (replayed %v): want two fresh intents", idA, idB, header.Get(wire.ReplayedHeader))
	}
	// A token is not read: client-a with one is still client-a.
	if id := createdID(t)(a.CreatePaymentIntent(callCtx(t, "t1", "order-1"), seedRequest("100000000"))); id != idA {
		t.Errorf("client-a with a bearer token: intent %s, want its own %s replayed", id, idA)
	}
	for _, tc := range []struct {
		who    string
		client paymentsv1.PaymentIntentServiceClient
		own    string
		other  string
	}{{"client-a", a, idA, idB}, {"client-b", b, idB, idA}} {
		if _, err := tc.client.GetPaymentIntent(callCtx(t, "", ""), &paymentsv1.GetPaymentIntentRequest{Id: tc.other}); status.Code(err) != codes.NotFound {
			t.Errorf("gRPC: %s gets the other's intent: %v, want NOT_FOUND", tc.who, err)
		}
		if got := listOf(t, tc.client, ""); !slices.Equal(got, []string{tc.own}) {
			t.Errorf("gRPC: %s lists %v, want [%s]", tc.who, got, tc.own)
		}
	}

	// HTTP, with the same certificates.
	for _, tc := range []struct{ who, own, other string }{{"client-a", idA, idB}, {"client-b", idB, idA}} {
		c := httpsClient(t, certs.clientTLS(t, tc.who))
		created := mustHTTPS(t, c, "POST", d.baseURL(), seedBody, "Idempotency-Key", "order-1")
		if created.status != http.StatusCreated || created.header.Get("Idempotent-Replayed") != "true" || created.intent(t)["id"] != tc.own {
			t.Errorf("HTTP: %s creates with its gRPC key and body: %d replayed %q %s, want 201, its own %s replayed",
				tc.who, created.status, created.header.Get("Idempotent-Replayed"), created.body, tc.own)
		}
		if withToken := mustHTTPS(t, c, "POST", d.baseURL(), seedBody, withHTTPKey("t1", "order-1")...); withToken.status != http.StatusCreated || withToken.intent(t)["id"] != tc.own {
			t.Errorf("HTTP: %s with a bearer token: %d %s, want its own %s replayed (the token is not read)", tc.who, withToken.status, withToken.body, tc.own)
		}
		if got := mustHTTPS(t, c, "GET", d.baseURL()+"/"+tc.other, ""); got.status != http.StatusNotFound {
			t.Errorf("HTTP: %s gets the other's intent: %d %s, want 404", tc.who, got.status, got.body)
		}
		if got := mustHTTPS(t, c, "GET", d.baseURL()+"/"+tc.own, ""); got.status != http.StatusOK {
			t.Errorf("HTTP: %s gets its own intent: %d %s, want 200", tc.who, got.status, got.body)
		}
		if got := listedIDs(t, mustHTTPS(t, c, "GET", d.baseURL(), "")); !slices.Equal(got, []string{tc.own}) {
			t.Errorf("HTTP: %s lists %v, want [%s]", tc.who, got, tc.own)
		}
	}
	if strings.Contains(d.stderr(), "Bearer") {
		t.Errorf("the log holds a credential:\n%s", d.stderr())
	}
}

// TestMTLS_ClientWithoutTrustedCert_RefusedAtHandshake: with
// --tls-client-ca, a client with no certificate, one from another CA or an
// expired one does not get past the handshake, on gRPC or HTTP; the
// metrics listener asks for none.
func TestMTLS_ClientWithoutTrustedCert_RefusedAtHandshake(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	other := newCertSet(t, "paymentsd other CA")
	d := startTLSDaemon(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--principal-from", "cert",
		"--metrics-listen", "127.0.0.1:0")
	o := devcerts.Client("client-old")
	o.NotBefore, o.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	certs.clients["client-old"] = certs.write(t, "client-old", certs.issue(t, o))

	for _, tc := range []struct {
		name  string
		cfg   *tls.Config
		alert string // the TLS alert the client reads
	}{
		{"no certificate", certs.clientTLS(t, ""), "tls: certificate required"},
		{"certificate from another CA", withCertOf(certs.clientTLS(t, ""), other.clientTLS(t, "client-a")), "tls: unknown certificate authority"},
		{"expired certificate", certs.clientTLS(t, "client-old"), "tls: expired certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The clients fail, with the alert or with the write that
			// raced it ("broken pipe").
			_, err := d.grpcClient(t, tc.cfg).CreatePaymentIntent(callCtx(t, "t1", "refused"), seedRequest("1"))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("gRPC: %v, want UNAVAILABLE", err)
			}
			t.Logf("gRPC client: %v", err)
			if _, err = httpsCall(t, httpsClient(t, tc.cfg), "GET", d.baseURL(), ""); err == nil {
				t.Error("HTTPS: answered, want a refused handshake")
			}
			t.Logf("HTTPS client: %v", err)
			// The alert says why.
			for what, addr := range map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr} {
				if err := handshakeRefusal(t, addr, tc.cfg, "h2"); err == nil || !strings.Contains(err.Error(), tc.alert) {
					t.Errorf("%s port: %v, want %q", what, err, tc.alert)
				}
			}
		})
	}
	// Scrapers need no certificate.
	if m := scrapeTLS(t, httpsClient(t, certs.clientTLS(t, "")), d.logAddr(t, "metrics listening")); len(m) == 0 {
		t.Error("metrics without a client certificate: nothing scraped")
	}
	// Nothing was created, and the server still serves a trusted client.
	if got := listOf(t, d.client, ""); len(got) != 0 {
		t.Errorf("refused clients created %v", got)
	}
	createdID(t)(d.client.CreatePaymentIntent(callCtx(t, "", "k"), seedRequest("1")))
}

// withCertOf is cfg presenting the certificate of from whatever CAs the
// server names (as curl does): with Certificates alone, a Go client sends
// no certificate that the server's CAs did not issue.
func withCertOf(cfg, from *tls.Config) *tls.Config {
	cert := &from.Certificates[0]
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	return cfg
}

// handshakeRefusal handshakes with addr and reads: a server that refuses
// the client's certificate (under TLS 1.3, after the client's side of the
// handshake is done) answers with an alert, returned here.
func handshakeRefusal(t *testing.T, addr string, cfg *tls.Config, nextProto string) error {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{nextProto}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// TestEither_CertAndBearerPrincipals: with --principal-from either, a call
// without an authorization header is its certificate's principal, and a
// call with one, on the same connection, is its token's: they own
// different intents under the same key and body.
func TestEither_CertAndBearerPrincipals(t *testing.T) {
	for _, keys := range []string{"dev mode", "api keys"} {
		t.Run(keys, func(t *testing.T) {
			certs := newCertSet(t, "paymentsd test CA")
			args := []string{"--tls-client-ca", certs.caFile, "--principal-from", "either"}
			if keys == "api keys" {
				file := filepath.Join(t.TempDir(), "api-keys")
				if err := os.WriteFile(file, []byte(auth.KeyLine("merchant-t1", "t1")+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--api-keys", file)
			}
			d := startTLSDaemon(t, certs, "client-a", args...)
			c := d.client // one connection, client-a's certificate

			var certHeader, tokenHeader metadata.MD
			resp, err := c.CreatePaymentIntent(callCtx(t, "", "order-1"), seedRequest("100000000"), grpc.Header(&certHeader))
			byCert := createdID(t)(resp, err)
			resp, err = c.CreatePaymentIntent(callCtx(t, "t1", "order-1"), seedRequest("100000000"), grpc.Header(&tokenHeader))
			byToken := createdID(t)(resp, err)
			if byCert == byToken || len(tokenHeader.Get(wire.ReplayedHeader)) > 0 {
				t.Fatalf("cert %s, token %s (replayed %v): want two fresh intents", byCert, byToken, tokenHeader.Get(wire.ReplayedHeader))
			}
			if got := listOf(t, c, ""); !slices.Equal(got, []string{byCert}) {
				t.Errorf("gRPC list by the certificate: %v, want [%s]", got, byCert)
			}
			if got := listOf(t, c, "t1"); !slices.Equal(got, []string{byToken}) {
				t.Errorf("gRPC list by the token: %v, want [%s]", got, byToken)
			}
			if _, err := c.GetPaymentIntent(callCtx(t, "t1", ""), &paymentsv1.GetPaymentIntentRequest{Id: byCert}); status.Code(err) != codes.NotFound {
				t.Errorf("the token gets the certificate's intent: %v, want NOT_FOUND", err)
			}
			if _, err := c.GetPaymentIntent(callCtx(t, "", ""), &paymentsv1.GetPaymentIntentRequest{Id: byToken}); status.Code(err) != codes.NotFound {
				t.Errorf("the certificate gets the token's intent: %v, want NOT_FOUND", err)
			}

			// The same over HTTP, on one connection.
			h := httpsClient(t, certs.clientTLS(t, "client-a"))
			if a := mustHTTPS(t, h, "POST", d.baseURL(), seedBody, "Idempotency-Key", "order-1"); a.status != http.StatusCreated || a.intent(t)["id"] != byCert {
				t.Errorf("HTTP, certificate only: %d %s, want the certificate's %s replayed", a.status, a.body, byCert)
			}
			if a := mustHTTPS(t, h, "POST", d.baseURL(), seedBody, withHTTPKey("t1", "order-1")...); a.status != http.StatusCreated || a.intent(t)["id"] != byToken {
				t.Errorf("HTTP with the token: %d %s, want the token's %s replayed", a.status, a.body, byToken)
			}
			if got := listedIDs(t, mustHTTPS(t, h, "GET", d.baseURL(), "")); !slices.Equal(got, []string{byCert}) {
				t.Errorf("HTTP list by the certificate: %v, want [%s]", got, byCert)
			}
			if got := listedIDs(t, mustHTTPS(t, h, "GET", d.baseURL(), "", bearerHeader("t1")...)); !slices.Equal(got, []string{byToken}) {
				t.Errorf("HTTP list by the token: %v, want [%s]", got, byToken)
			}

			if keys == "api keys" {
				// A token sent is the principal: an unknown one is refused,
				// not replaced by the certificate.
				if _, err := c.ListPaymentIntents(callCtx(t, "nope", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unauthenticated {
					t.Errorf("gRPC with an unknown token: %v, want UNAUTHENTICATED", err)
				}
				if a := mustHTTPS(t, h, "GET", d.baseURL(), "", bearerHeader("nope")...); a.status != http.StatusUnauthorized {
					t.Errorf("HTTP with an unknown token: %d %s, want 401", a.status, a.body)
				}
			}
		})
	}
}

// TestTLS_ClientInterceptor_RetryReplays: the client interceptor over TLS
// (and mutual TLS with certificate principals): an attempt whose answer is
// lost after the server ran it is retried under the same key, and the
// retry is answered with the intent created, replayed.
func TestTLS_ClientInterceptor_RetryReplays(t *testing.T) {
	for _, tc := range []struct {
		name, client, token string
		mtls                bool
	}{
		{"TLS, bearer", "", "t1", false},
		{"mTLS, cert principal", "client-a", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certs := newCertSet(t, "paymentsd test CA")
			var args []string
			if tc.mtls {
				args = []string{"--tls-client-ca", certs.caFile, "--principal-from", "cert"}
			}
			d := startTLSDaemon(t, certs, tc.client, args...)

			var attempts atomic.Int32
			var lostID string
			loseFirstAnswer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if attempts.Add(1) == 1 && err == nil {
					lostID = reply.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id
					return status.Error(codes.Unavailable, "test: the answer was lost on its way back")
				}
				return err
			}
			conn := d.dial(t, certs.clientTLS(t, tc.client), grpc.WithChainUnaryInterceptor(
				retry.MustUnaryClientInterceptor(
					retry.WithMethods(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName),
					retry.WithBackoff(time.Millisecond, 10*time.Millisecond),
				),
				loseFirstAnswer,
			))
			var header metadata.MD
			var key string
			resp, err := paymentsv1.NewPaymentIntentServiceClient(conn).CreatePaymentIntent(callCtx(t, tc.token, ""), seedRequest("100000000"),
				grpc.Header(&header), retry.ChosenKey(&key))
			id := createdID(t)(resp, err)
			if n := attempts.Load(); n != 2 || lostID == "" {
				t.Fatalf("%d attempts (lost answer's intent %q), want 2: one lost, one retried", n, lostID)
			}
			if id != lostID || fmt.Sprint(header.Get(wire.ReplayedHeader)) != "[true]" {
				t.Errorf("retry: intent %s, %s %v; want the lost attempt's %s, replayed", id, wire.ReplayedHeader, header.Get(wire.ReplayedHeader), lostID)
			}
			if key == "" {
				t.Error("no idempotency key chosen")
			}
			if got := listOf(t, d.client, tc.token); !slices.Equal(got, []string{id}) {
				t.Errorf("intents %v, want the one %s", got, id)
			}
		})
	}
}

// A connection outlives the handshake that verified its client
// certificate: once its CA is taken out of --tls-client-ca, the calls it
// makes next are refused, over gRPC and over HTTP, without a new handshake.
func TestMTLS_CARemoved_OpenConnectionsRefused(t *testing.T) {
	certs := newCertSet(t, "revoked CA")
	d := startTLSDaemon(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--principal-from", "cert")
	grpcClient := d.client // one connection, made by startTLSDaemon
	httpClient := httpsClient(t, certs.clientTLS(t, "client-a"))
	if _, err := grpcClient.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); err != nil {
		t.Fatalf("gRPC before: %v", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.baseURL(), ""); a.status != http.StatusOK {
		t.Fatalf("HTTP before: %d %s", a.status, a.body)
	}
	other, err := devcerts.NewCA("the only CA now")
	if err != nil {
		t.Fatal(err)
	}
	tmp := certs.caFile + ".new"
	if err := os.WriteFile(tmp, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, certs.caFile); err != nil {
		t.Fatal(err)
	}
	d.waitLogText(t, "tls certificate reloaded")
	_, err = grpcClient.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "no longer among the client CAs") {
		t.Errorf("gRPC on the open connection after its CA was removed: %v, want UNAUTHENTICATED saying why", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.baseURL(), ""); a.status != http.StatusUnauthorized {
		t.Errorf("HTTP on the open connection after its CA was removed: %d %s, want 401", a.status, a.body)
	}
}
