package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// writeCRL writes, by a rename, a PEM CRL of s's CA revoking the client
// certificates named, in force from a minute ago for an hour.
func (s *certSet) writeCRL(t *testing.T, path string, number int64, clients ...string) {
	t.Helper()
	s.writeCRLAt(t, path, number, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), clients...)
}

// writeCRLAt is writeCRL with the CRL's thisUpdate and nextUpdate.
func (s *certSet) writeCRLAt(t *testing.T, path string, number int64, this, next time.Time, clients ...string) {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: this, NextUpdate: next}
	for _, name := range clients {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: s.clientCert(t, name).SerialNumber, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, s.ca.Cert, s.ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(path+".new", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644))
	must(t, os.Rename(path+".new", path))
}

// clientCert is the certificate of s's client name.
func (s *certSet) clientCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(s.client(t, name).cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// A certificate in --tls-client-crl is refused at the handshake. One
// added to it while its connections are open loses them: its gRPC
// connection is closed, and its HTTP connection's next request refused.
func TestMTLS_RevokedClientCert_RefusedAtHandshakeAndNextCall(t *testing.T) {
	certs := newCertSet(t, "paymentsd CRL CA")
	crl := certs.dir + "/clients.crl"
	certs.writeCRL(t, crl, 1, "client-b")
	d := startTLS(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--tls-client-crl", crl, "--principal-from", "cert")

	for what, addr := range map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr} {
		if err := handshakeRefusal(t, addr, certs.clientTLS(t, "client-b"), "h2"); err == nil || !strings.Contains(err.Error(), "tls: bad certificate") {
			t.Errorf("%s port, a revoked certificate: %v, want the handshake refused", what, err)
		}
	}
	if _, err := d.grpcClient(t, certs.clientTLS(t, "client-b")).ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC with a revoked certificate: %v, want UNAVAILABLE", err)
	}

	// client-a's connections, open, then its certificate revoked.
	httpClient := httpsClient(t, certs.clientTLS(t, "client-a"))
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); err != nil {
		t.Fatalf("gRPC before: %v", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.intentsURL(), ""); a.status != http.StatusOK {
		t.Fatalf("HTTP before: %d %s", a.status, a.body)
	}
	certs.writeCRL(t, crl, 2, "client-b", "client-a")
	d.waitLine(t, tlsReloaded, nil, logWait)
	// Its connection closed, a call fails on it, or on the next, whose
	// handshake is refused.
	_, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC after its certificate was revoked: %v, want UNAVAILABLE", err)
	}
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC again after its certificate was revoked: %v, want UNAVAILABLE", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.intentsURL(), ""); a.status != http.StatusUnauthorized {
		t.Errorf("HTTP on the open connection after its certificate was revoked: %d %s, want 401", a.status, a.body)
	}

	// A CRL that no client CA signed is refused; the last good one stays.
	stranger := newCertSet(t, "stranger CA")
	stranger.clients["client-a"] = certs.clients["client-a"]
	stranger.writeCRL(t, crl, 3)
	d.waitLine(t, tlsRefused, map[string]any{"err": contains("not signed by a client CA")}, logWait)
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("after a refused CRL: %v, want client-a still revoked", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.intentsURL(), ""); a.status != http.StatusUnauthorized {
		t.Errorf("HTTP after a refused CRL: %d %s, want client-a still revoked", a.status, a.body)
	}
}

// startCRLDaemon runs paymentsd with certs' CA, the CRL file crl and
// principals from certificates, its metrics on a free port. Its client
// is client-a's.
func startCRLDaemon(t *testing.T, certs *certSet, crl string) *daemon {
	t.Helper()
	return startTLS(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--tls-client-crl", crl,
		"--principal-from", "cert", "--metrics-listen", "127.0.0.1:0")
}

// listAs makes a call on a new connection with client's certificate.
func (d *daemon) listAs(t *testing.T, certs *certSet, client string) error {
	t.Helper()
	_, err := d.grpcClient(t, certs.clientTLS(t, client)).ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{})
	return err
}

// A CRL that expired, one not valid yet, and one numbered below the CRL
// in force are refused, each signed by the right CA: the certificate
// revoked stays refused. A valid newer CRL that drops it lets it in.
func TestMTLS_CRLOutOfForceOrOlder_RevokedClientStaysRefused(t *testing.T) {
	certs := newCertSet(t, "paymentsd CRL CA")
	crl := certs.dir + "/clients.crl"
	certs.writeCRL(t, crl, 2, "client-b")
	d := startCRLDaemon(t, certs, crl)
	line := d.waitLine(t, "tls client CRL in force", map[string]any{"crl_number": "2", "revoked": 1.0,
		"next_update": contains(""), "this_update": contains("")}, logWait)
	if !strings.HasPrefix(line.str("issuer"), "CN=paymentsd CRL CA") {
		t.Errorf("the CRL's log line does not name its issuer: %v", line)
	}
	if err := d.listAs(t, certs, "client-b"); status.Code(err) != codes.Unavailable {
		t.Fatalf("client-b, revoked: %v, want UNAVAILABLE (handshake refused)", err)
	}

	now := time.Now()
	for _, bad := range []struct {
		name, want string
		number     int64
		this, next time.Time
	}{
		{"expired a day ago", "expired at", 3, now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)},
		{"issued a day ahead", "not valid until", 3, now.Add(24 * time.Hour), now.Add(48 * time.Hour)},
		{"a lower number", "CRL number 1 is below 2", 1, now.Add(-time.Minute), now.Add(time.Hour)},
	} {
		certs.writeCRLAt(t, crl, bad.number, bad.this, bad.next) // client-b not revoked
		line := d.waitLine(t, tlsRefused, map[string]any{"err": contains(bad.want)}, logWait)
		if line["level"] != "ERROR" {
			t.Errorf("%s: refused at a level below ERROR: %v", bad.name, line)
		}
		if err := d.listAs(t, certs, "client-b"); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: client-b, revoked by the CRL in force: %v, want UNAVAILABLE", bad.name, err)
		}
	}

	certs.writeCRL(t, crl, 3, "client-c")
	d.waitLine(t, "tls client CRL in force", map[string]any{"crl_number": "3"}, logWait)
	if err := d.listAs(t, certs, "client-b"); err != nil {
		t.Errorf("client-b, after a newer CRL dropped it: %v", err)
	}
	metrics := scrapeTLS(t, httpsClient(t, certs.clientTLS(t, "")), d.metricsAddr(t))
	var next []float64
	for k, v := range metrics {
		if strings.HasPrefix(k, `paymentsd_tls_client_crl_next_update_seconds{issuer="CN=paymentsd CRL CA`) {
			next = append(next, v)
		}
	}
	if len(next) != 1 || next[0] < float64(now.Add(59*time.Minute).Unix()) || next[0] > float64(time.Now().Add(time.Hour).Unix()) {
		t.Errorf("paymentsd_tls_client_crl_next_update_seconds: %v, want CRL 3's nextUpdate, an hour ahead", next)
	}
}

// The CRL in force reaching its nextUpdate: no client certificate is
// admitted, health turns NOT_SERVING and the log says why at ERROR,
// until a valid CRL is loaded.
func TestMTLS_CRLExpiresWhileRunning_FailsClosed(t *testing.T) {
	certs := newCertSet(t, "paymentsd CRL CA")
	crl := certs.dir + "/clients.crl"
	certs.writeCRL(t, crl, 1)
	d := startCRLDaemon(t, certs, crl)
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); err != nil {
		t.Fatalf("client-a, CRL in force: %v", err)
	}
	scraper := httpsClient(t, certs.clientTLS(t, ""))
	healthz := func() int { return mustHTTPS(t, scraper, "GET", "https://"+d.metricsAddr(t)+"/healthz", "").status }
	if code := healthz(); code != http.StatusOK {
		t.Fatalf("/healthz with the CRL in force: %d", code)
	}

	// A CRL that expires ten seconds from now: time for its reload. A
	// CRL's times are whole seconds.
	next := time.Now().Add(10 * time.Second).Truncate(time.Second)
	certs.writeCRLAt(t, crl, 2, time.Now().Add(-time.Minute), next)
	d.waitLine(t, "tls client CRL in force", map[string]any{"crl_number": "2"}, logWait)
	for deadline := next.Add(time.Minute); healthz() != http.StatusServiceUnavailable; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d a minute past the CRL's nextUpdate", healthz())
		}
	}
	if time.Now().Before(next) {
		t.Errorf("NOT_SERVING before the CRL's nextUpdate %s", next)
	}
	d.waitLine(t, "unhealthy: reporting NOT_SERVING", map[string]any{"level": "ERROR", "err": contains("no client certificate is admitted until a valid CRL is loaded")}, logWait)
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); err == nil {
		t.Error("client-a's connection, past the CRL's nextUpdate: its call served")
	}
	if err := handshakeRefusal(t, d.addr, certs.clientTLS(t, "client-a"), "h2"); err == nil || !strings.Contains(err.Error(), "tls: bad certificate") {
		t.Errorf("client-a's handshake past the CRL's nextUpdate: %v, want it refused", err)
	}

	certs.writeCRL(t, crl, 3)
	d.waitLine(t, "healthy again: reporting SERVING", nil, logWait)
	if err := d.listAs(t, certs, "client-a"); err != nil {
		t.Errorf("client-a, after a valid CRL: %v", err)
	}
	if code := healthz(); code != http.StatusOK {
		t.Errorf("/healthz after a valid CRL: %d", code)
	}
}

// A CRL that revokes a client certificate ends the streams of its open
// connection, a health Watch among them; another client's stays.
func TestMTLS_RevocationEndsOpenHealthWatch(t *testing.T) {
	certs := newCertSet(t, "paymentsd CRL CA")
	crl := certs.dir + "/clients.crl"
	certs.writeCRL(t, crl, 1)
	d := startCRLDaemon(t, certs, crl)
	watch := func(client string) <-chan error {
		conn := d.dial(t, certs.clientTLS(t, client))
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if first, err := stream.Recv(); err != nil || first.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%s's Watch: %v, %v; want SERVING", client, first, err)
		}
		ended := make(chan error, 1)
		go func() {
			for {
				if _, err := stream.Recv(); err != nil {
					ended <- err
					return
				}
			}
		}()
		return ended
	}
	a, b := watch("client-a"), watch("client-b")

	certs.writeCRL(t, crl, 2, "client-a")
	select {
	case err := <-a:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("client-a's Watch ended with %v, want UNAVAILABLE", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("client-a's Watch still open a minute after its certificate was revoked:\n%s", d.stderr())
	}
	select {
	case err := <-b:
		t.Errorf("client-b's Watch ended: %v", err)
	default:
	}
	if err := d.listAs(t, certs, "client-a"); status.Code(err) != codes.Unavailable {
		t.Errorf("client-a, revoked, a new connection: %v, want UNAVAILABLE", err)
	}
}
