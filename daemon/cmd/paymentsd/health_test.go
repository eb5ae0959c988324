package main

// paymentsd health against the real binary: exit 0 for SERVING, 1 for
// anything else, 2 for a bad command line, over plaintext, TLS and mutual
// TLS.

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestHealth_ServingExits0_AnythingElse1(t *testing.T) {
	d := start(t, spec{})
	paymentsd(t, "", "health", "--addr", d.addr).want(t, 0, "SERVING\n")
	paymentsd(t, "", "health", "--addr", d.addr, "--service", "payments.v1.PaymentIntentService").want(t, 0, "SERVING\n")
	if r := paymentsd(t, "", "health", "--addr", d.addr, "--service", "no.such.Service"); r.code != 1 || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("an unknown service: exit %d, stderr %q; want 1 saying NotFound", r.code, r.stderr)
	}

	// Nothing listening: the port of a listener just closed.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	if r := paymentsd(t, "", "health", "--addr", closed); r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("nothing listening: exit %d, stderr %q; want 1, connection refused", r.code, r.stderr)
	}

	// A listener that never answers: --timeout ends the wait.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	began := time.Now()
	if r := paymentsd(t, "", "health", "--addr", silent.Addr().String(), "--timeout", "300ms"); r.code != 1 || !strings.Contains(r.stderr, "DeadlineExceeded") {
		t.Errorf("a silent server: exit %d, stderr %q; want 1, DeadlineExceeded", r.code, r.stderr)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("a silent server with --timeout 300ms took %v", took)
	}
}

func TestHealth_TLSAndMutualTLS(t *testing.T) {
	certs := devCertSet(t)
	d := startTLS(t, certs, "")
	paymentsd(t, "", "health", "--addr", d.addr, "--tls-ca", certs.caFile).want(t, 0, "SERVING\n")
	// Plaintext to a TLS server: said so, with the fix.
	if r := paymentsd(t, "", "health", "--addr", d.addr); r.code != 1 || !strings.Contains(r.stderr, "the server speaks TLS: pass --tls-ca") {
		t.Errorf("plaintext to a TLS server: exit %d, stderr %q; want 1 saying it speaks TLS", r.code, r.stderr)
	}
	other := newCertSet(t, "another CA")
	paymentsd(t, "", "health", "--addr", d.addr, "--tls-ca", other.caFile).want(t, 1) // a server this CA did not sign

	client := certs.clients["client-a"]
	m := startTLS(t, certs, "client-a", "--tls-client-ca", certs.caFile)
	paymentsd(t, "", "health", "--addr", m.addr, "--tls-ca", certs.caFile, "--tls-cert", client.cert, "--tls-key", client.key).want(t, 0, "SERVING\n")
	// No client certificate: said so, with the fix, TLS or not.
	const noCert = "the server requires a client certificate: pass --tls-cert and --tls-key"
	if r := paymentsd(t, "", "health", "--addr", m.addr, "--tls-ca", certs.caFile); r.code != 1 || !strings.Contains(r.stderr, noCert) {
		t.Errorf("no client certificate: exit %d, stderr %q; want 1 and %q", r.code, r.stderr, noCert)
	}
	const plainToMTLS = "the server speaks TLS and requires a client certificate: pass --tls-ca FILE, the CA of its certificate, with --tls-cert and --tls-key"
	if r := paymentsd(t, "", "health", "--addr", m.addr); r.code != 1 || !strings.Contains(r.stderr, plainToMTLS) {
		t.Errorf("plaintext to a mutual TLS server: exit %d, stderr %q; want 1 and %q", r.code, r.stderr, plainToMTLS)
	}
	// A server this CA did not sign is not taken for a missing certificate.
	if r := paymentsd(t, "", "health", "--addr", m.addr, "--tls-ca", other.caFile); r.code != 1 || strings.Contains(r.stderr, "client certificate") {
		t.Errorf("a server of another CA: exit %d, stderr %q; want 1, not blaming the client certificate", r.code, r.stderr)
	}
	// Nor is a plaintext server taken for a TLS one.
	p := start(t, spec{})
	if r := paymentsd(t, "", "health", "--addr", p.addr, "--tls-ca", certs.caFile); r.code != 1 || strings.Contains(r.stderr, "client certificate") || strings.Contains(r.stderr, "speaks TLS") {
		t.Errorf("TLS to a plaintext server: exit %d, stderr %q; want 1, no TLS advice", r.code, r.stderr)
	}
}

func TestHealth_BadCommandLineExits2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // on stderr
	}{
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", "k.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"--addr", ""}, "--addr must name an address"},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
	} {
		r := paymentsd(t, "", append([]string{"health"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "usage: paymentsd health") {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant 2, %q and the usage", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
