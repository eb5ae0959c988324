package main

// The TLS tests' kit: certificates made by internal/devcerts, a TLS
// daemon, HTTPS clients and calls, handshakes, and the tools a test
// needs (skipped without them, failed under CI=true).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
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

// startTLS runs paymentsd serving certs' server certificate, gRPC and
// HTTP on free ports, with args, and waits until it serves. Its client is
// a TLS connection that trusts certs' CA and presents certs' client
// certificate named client ("" for none).
func startTLS(t *testing.T, certs *certSet, client string, args ...string) *daemon {
	t.Helper()
	return start(t, spec{tls: certs, client: client, args: args})
}

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
