package main

// --tls-cert and --tls-key read again without a restart: certificates
// rotated under load without a failed call, and broken files refused with
// the certificate served kept.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
)

// The log's messages of a reload of the TLS files.
const (
	tlsReloaded = "tls certificate reloaded"
	tlsRefused  = "tls files not reloaded: the previous certificate stays in use"
)

// rotate issues a new server certificate from s's CA and writes it over
// s's server files with Pair.WriteFiles, and returns it.
func (s *certSet) rotate(t *testing.T) *devcerts.Pair {
	t.Helper()
	p := s.issue(t, devcerts.LocalServer())
	if err := p.WriteFiles(s.serverCert, s.serverKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// serverArgs are the flags that serve s's server certificate.
func (s *certSet) serverArgs() []string {
	return []string{"--tls-cert", s.serverCert, "--tls-key", s.serverKey}
}

// servedSerial is the serial of the certificate a new TLS connection to
// addr is given.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool) *big.Int {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("tls probe of %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// waitSerial waits up to limit for new connections to addr to be given
// the certificate of serial.
func waitSerial(t *testing.T, addr string, roots *x509.CertPool, serial *big.Int, limit time.Duration) {
	t.Helper()
	began := time.Now()
	for {
		got := servedSerial(t, addr, roots)
		if got.Cmp(serial) == 0 {
			t.Logf("serial %x served %v after the files were replaced", serial, time.Since(began).Round(time.Millisecond))
			return
		}
		if time.Since(began) > limit {
			t.Fatalf("new connections still get serial %x %v after the files were replaced, want %x", got, limit, serial)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRotation_TLSUnderLoad_NoRequestFails(t *testing.T) {
	certs := newCertSet(t, "rotation test CA")
	roots := certs.pool(t)
	first := certs.rotate(t)
	d := start(t, spec{args: certs.serverArgs()})
	d.waitAdmin(t)
	if got := servedSerial(t, d.addr, roots); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("served serial %x, want %x", got, first.Cert.SerialNumber)
	}
	load := startRotationLoad(t, d.addr, roots)

	// First rotation: the key renamed into place, then the certificate
	// (Pair.WriteFiles). A poll between the two sees a key that is not the
	// certificate's and keeps the old pair; the next sees both.
	time.Sleep(700 * time.Millisecond)
	second := certs.rotate(t)
	waitSerial(t, d.addr, roots, second.Cert.SerialNumber, 2*time.Second)
	callsAtFirst := load.calls.Load()

	// Second rotation: both written to temp names, then renamed one right
	// after the other.
	time.Sleep(700 * time.Millisecond)
	third := certs.issue(t, devcerts.LocalServer())
	tmpCert, tmpKey := certs.serverCert+".next", certs.serverKey+".next"
	writeInPlace(t, tmpKey, 0o600, string(third.KeyPEM))
	writeInPlace(t, tmpCert, 0o644, string(third.CertPEM))
	if err := os.Rename(tmpKey, certs.serverKey); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmpCert, certs.serverCert); err != nil {
		t.Fatal(err)
	}
	waitSerial(t, d.addr, roots, third.Cert.SerialNumber, 2*time.Second)
	callsAtSecond := load.calls.Load()

	load.wg.Wait()
	total := load.calls.Load()
	t.Logf("%d calls over %d connections; %d before the first rotation was served, %d before the second", total, load.conns.Load(), callsAtFirst, callsAtSecond)
	for _, f := range load.failures {
		t.Error(f)
	}
	if total <= callsAtSecond {
		t.Errorf("no call after the second rotation was served (%d calls in all): the load ended too soon to tell", total)
	}
	d.stillRunning(t)
	for l, serials := range load.longSerials {
		if want := first.Cert.SerialNumber.Text(16); len(serials) != 1 || !serials[want] {
			t.Errorf("long-lived connection %d saw serials %v, want only the first certificate's %s (a connection keeps its certificate)", l, serials, want)
		}
	}
	d.waitLine(t, tlsReloaded, map[string]any{"serial": second.Cert.SerialNumber.Text(16)}, time.Second)
	d.waitLine(t, tlsReloaded, map[string]any{"serial": third.Cert.SerialNumber.Text(16)}, time.Second)
	for _, line := range d.lines(tlsRefused) {
		t.Logf("a half-replaced pair was refused, as it may be: %v", line["err"])
	}
}

// The load of TestRotation_TLSUnderLoad_NoRequestFails, bounded in count.
const (
	rotationChurners      = 8   // each makes a new connection every few calls
	rotationCallsPerConn  = 3   // of a churner's connection
	rotationLongLived     = 2   // connections kept for the whole run
	rotationMaxCalls      = 600 // of each goroutine
	rotationLoadFor       = 4 * time.Second
	rotationPerCallBudget = 5 * time.Second
)

// rotationLoad is creates over TLS from churners, which make new
// connections all along, and long-lived connections, which keep theirs.
type rotationLoad struct {
	addr   string
	creds  credentials.TransportCredentials
	stopAt time.Time

	calls, conns atomic.Int64
	longSerials  []map[string]bool // the serials each long-lived connection saw
	mu           sync.Mutex
	failures     []string // the first 20
	wg           sync.WaitGroup
}

// startRotationLoad starts the load on addr, trusting roots.
func startRotationLoad(t *testing.T, addr string, roots *x509.CertPool) *rotationLoad {
	l := &rotationLoad{addr: addr, creds: credentials.NewTLS(&tls.Config{RootCAs: roots}),
		stopAt: time.Now().Add(rotationLoadFor), longSerials: make([]map[string]bool, rotationLongLived)}
	t.Cleanup(l.wg.Wait)
	for g := range rotationChurners {
		l.wg.Go(func() { l.churn(g) })
	}
	for i := range rotationLongLived {
		l.longSerials[i] = map[string]bool{}
		l.wg.Go(func() { l.keep(i) })
	}
	return l
}

func (l *rotationLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
}

func (l *rotationLoad) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient(l.addr, grpc.WithTransportCredentials(l.creds))
}

// call is goroutine g's create number i on conn, its peer kept in p.
func (l *rotationLoad) call(conn *grpc.ClientConn, g, i int, p *peer.Peer) error {
	ctx, cancel := context.WithTimeout(withCreds(fmt.Sprintf("rotation-%d", g), fmt.Sprintf("k-%d-%d", g, i)), rotationPerCallBudget)
	defer cancel()
	resp, err := paymentsv1.NewPaymentIntentServiceClient(conn).CreatePaymentIntent(ctx, seedRequest("1"), grpc.Peer(p))
	l.calls.Add(1)
	if err == nil && resp.GetPaymentIntent().GetId() == "" {
		err = errors.New("no intent in the answer")
	}
	return err
}

// churn is churner g: a new connection every rotationCallsPerConn calls.
func (l *rotationLoad) churn(g int) {
	var conn *grpc.ClientConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i := 0; i < rotationMaxCalls && time.Now().Before(l.stopAt); i++ {
		if i%rotationCallsPerConn == 0 {
			if conn != nil {
				conn.Close()
			}
			var err error
			if conn, err = l.dial(); err != nil {
				l.fail("churner %d: new connection: %v", g, err)
				return
			}
			l.conns.Add(1)
		}
		if err := l.call(conn, g, i, &peer.Peer{}); err != nil {
			l.fail("churner %d call %d: %v", g, i, err)
		}
	}
}

// keep is long-lived connection n, noting the serials it is served.
func (l *rotationLoad) keep(n int) {
	g := rotationChurners + n
	conn, err := l.dial()
	if err != nil {
		l.fail("long-lived %d: %v", n, err)
		return
	}
	defer conn.Close()
	l.conns.Add(1)
	for i := 0; i < rotationMaxCalls && time.Now().Before(l.stopAt); i++ {
		var p peer.Peer
		if err := l.call(conn, g, i, &p); err != nil {
			l.fail("long-lived %d call %d: %v", n, i, err)
			continue
		}
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			l.longSerials[n][info.State.PeerCertificates[0].SerialNumber.Text(16)] = true
		}
	}
}

func TestReload_TLS_BrokenFilesKeepCertificate(t *testing.T) {
	certs := newCertSet(t, "tls reload test CA")
	first := certs.rotate(t)
	d := start(t, spec{metrics: true, args: certs.serverArgs()})
	d.waitAdmin(t)
	r := &tlsReloads{d: d, roots: certs.pool(t), scraper: httpsClient(t, certs.clientTLS(t, ""))}

	// A certificate file that is not PEM.
	errs := r.errors(t)
	replaceByRename(t, certs.serverCert, 0o644, "not a certificate\n")
	r.refused(t, "file changed", certs.serverCert)
	r.wantServed(t, first, "after a broken certificate file")
	if got := r.errors(t); got <= errs {
		t.Errorf("tls error counter %v, was %v: the refusal is not counted", got, errs)
	}
	// SIGHUP with it still broken.
	d.hup(t)
	r.refused(t, "SIGHUP", certs.serverCert)
	r.wantServed(t, first, "after SIGHUP on a broken certificate file")

	// A good pair, but the key made writable by others: refused, naming
	// the mode, and the old pair stays.
	second := certs.rotate(t)
	d.waitLine(t, tlsReloaded, map[string]any{"serial": second.Cert.SerialNumber.Text(16)}, 2*time.Second)
	r.wantServed(t, second, "after a good pair")
	if err := os.Chmod(certs.serverKey, 0o666); err != nil {
		t.Fatal(err)
	}
	d.hup(t)
	r.refused(t, "SIGHUP", "0666")
	r.wantServed(t, second, "after the key was made world-writable")
	if err := os.Chmod(certs.serverKey, 0o600); err != nil {
		t.Fatal(err)
	}

	// A key that is not the certificate's.
	third := certs.issue(t, devcerts.LocalServer())
	replaceByRename(t, certs.serverKey, 0o600, string(third.KeyPEM))
	r.refused(t, "file changed", certs.serverKey)
	r.wantServed(t, second, "after a key that is not the certificate's")
	replaceByRename(t, certs.serverCert, 0o644, string(third.CertPEM))
	d.waitLine(t, tlsReloaded, map[string]any{"serial": third.Cert.SerialNumber.Text(16)}, 2*time.Second)
	r.wantServed(t, third, "once the certificate follows its key")
	d.stillRunning(t)
}

// tlsReloads watches the reloads of a daemon's TLS files: the refusals it
// logs, the errors it counts, the certificate it serves.
type tlsReloads struct {
	d        *daemon
	roots    *x509.CertPool
	scraper  *http.Client
	refusals int // the refusals logged and seen so far
}

// errors is the daemon's count of refused TLS reloads.
func (r *tlsReloads) errors(t *testing.T) float64 {
	t.Helper()
	v, ok := scrapeTLS(t, r.scraper, r.d.metricsAddr(t))[tlsReloadErrors]
	if !ok {
		t.Fatalf("no tls error counter: %s", tlsReloadErrors)
	}
	return v
}

// wantServed fails t unless new connections are given p's certificate.
func (r *tlsReloads) wantServed(t *testing.T, p *devcerts.Pair, when string) {
	t.Helper()
	if got := servedSerial(t, r.d.addr, r.roots); got.Cmp(p.Cert.SerialNumber) != 0 {
		t.Errorf("%s: serial %x served, want %x", when, got, p.Cert.SerialNumber)
	}
}

// refused waits for a new refusal triggered by trigger whose error says
// inErr.
func (r *tlsReloads) refused(t *testing.T, trigger, inErr string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lines := r.d.lines(tlsRefused)
		for _, line := range lines[r.refusals:] {
			if line["trigger"] == trigger && strings.Contains(line.str("err"), inErr) {
				r.refusals = len(lines)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal by %s saying %q logged:\n%s", trigger, inErr, r.d.stderr())
		}
	}
}
