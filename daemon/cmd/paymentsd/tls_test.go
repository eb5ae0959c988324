package main

// End-to-end tests of TLS and mutual TLS (--tls-cert, --tls-key,
// --tls-client-ca, --principal-from): the real binary, with certificates
// made by internal/devcerts, reached by grpc-go, net/http, grpcurl and
// curl.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/wire"
)

// TestTLS_PlaintextClient_RefusedClearly: a plaintext client on a TLS port
// gets an error that says so, and the server goes on serving.
func TestTLS_PlaintextClient_RefusedClearly(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLS(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.metricsAddr(t)

	_, err := d.grpcClient(t, nil).CreatePaymentIntent(callCtx(t, "t1", "plain-1"), seedRequest("1"))
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
	d.wantRunning(t, "after the plaintext attempts")
	if _, err := d.client.CreatePaymentIntent(callCtx(t, "t1", "plain-1"), seedRequest("1")); err != nil {
		t.Errorf("TLS create after the plaintext attempts: %v", err)
	}
	if a := mustHTTPS(t, httpsClient(t, certs.clientTLS(t, "")), "GET", d.intentsURL(), "", bearerHeader("t1")...); len(listedIDs(t, a)) != 1 {
		t.Errorf("HTTPS list after the plaintext attempts: %s, want the one intent", a.body)
	}
}

// TestTLS_VersionsAndALPN: TLS 1.2 is the oldest version spoken, on every
// listener; gRPC negotiates h2 and the HTTP API h2 or http/1.1.
func TestTLS_VersionsAndALPN(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLS(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	ports := map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr, "metrics": d.metricsAddr(t)}
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
	a := mustHTTPS(t, h1, "POST", d.intentsURL(), seedBody, withHTTPKey("t1", "h1")...)
	if a.status != http.StatusCreated {
		t.Errorf("HTTP/1.1 create: %d %s, want 201", a.status, a.body)
	}
	h2 := httpsClient(t, certs.clientTLS(t, ""))
	resp, err := h2.Get(d.intentsURL()[:strings.LastIndex(d.intentsURL(), "/")] + "/openapi.json")
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
	d := startTLS(t, other, "")
	cfg := trusted.clientTLS(t, "")

	_, err := d.grpcClient(t, cfg).CreatePaymentIntent(callCtx(t, "t1", "k"), seedRequest("1"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("gRPC: %v, want UNAVAILABLE naming the unknown authority", err)
	}
	_, err = httpsCall(t, httpsClient(t, cfg), "GET", d.intentsURL(), "", bearerHeader("t1")...)
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
	d := startTLS(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.metricsAddr(t)
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
	_, err = httpsCall(t, httpsClient(t, certs.clientTLS(t, "")), "GET", d.intentsURL(), "", bearerHeader("t1")...)
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("HTTPS after expiry: %v, want x509.CertificateInvalidError, Expired", err)
	}

	fresh := certs.issue(t, devcerts.LocalServer())
	if err := fresh.WriteFiles(certs.serverCert, certs.serverKey); err != nil {
		t.Fatal(err)
	}
	d.waitLine(t, tlsReloaded, map[string]any{"serial": fresh.Cert.SerialNumber.Text(16)}, logWait)
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
	d := startTLS(t, certs, "", "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.metricsAddr(t)
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
	line := d.waitLine(t, tlsRefused, map[string]any{"err": contains("expired at")}, logWait)
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
	if a := mustHTTPS(t, httpsClient(t, cfg), "GET", d.intentsURL(), "", bearerHeader("t1")...); len(listedIDs(t, a)) != 1 {
		t.Errorf("HTTPS on a new connection after the failed reload: %s", a.body)
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
			d := startTLS(t, certs, tc.client, args...)

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
