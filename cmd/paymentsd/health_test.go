package main

// paymentsd health against the real binary: exit 0 for SERVING, 1 for
// anything else, 2 for a bad command line, over plaintext, TLS and mutual
// TLS.

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHealth_ServingExits0_AnythingElse1(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"))
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
	start := time.Now()
	if r := paymentsd(t, "", "health", "--addr", silent.Addr().String(), "--timeout", "300ms"); r.code != 1 || !strings.Contains(r.stderr, "DeadlineExceeded") {
		t.Errorf("a silent server: exit %d, stderr %q; want 1, DeadlineExceeded", r.code, r.stderr)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a silent server with --timeout 300ms took %v", took)
	}
}

func TestHealth_TLSAndMutualTLS(t *testing.T) {
	certs := devCertSet(t)
	d := startTLSDaemon(t, certs, "")
	paymentsd(t, "", "health", "--addr", d.addr, "--tls-ca", certs.caFile).want(t, 0, "SERVING\n")
	paymentsd(t, "", "health", "--addr", d.addr).want(t, 1) // plaintext to a TLS server
	other := newCertSet(t, "another CA")
	paymentsd(t, "", "health", "--addr", d.addr, "--tls-ca", other.caFile).want(t, 1) // a server this CA did not sign

	client := certs.clients["client-a"]
	m := startTLSDaemon(t, certs, "client-a", "--tls-client-ca", certs.caFile)
	paymentsd(t, "", "health", "--addr", m.addr, "--tls-ca", certs.caFile, "--tls-cert", client.cert, "--tls-key", client.key).want(t, 0, "SERVING\n")
	paymentsd(t, "", "health", "--addr", m.addr, "--tls-ca", certs.caFile).want(t, 1) // no client certificate
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
