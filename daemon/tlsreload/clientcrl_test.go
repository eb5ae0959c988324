package tlsreload_test

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
)

// clock is a time that tests move.
type clock struct{ at atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.at.Store(time.Now().UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.at.Load()) }
func (c *clock) add(d time.Duration) { c.at.Add(int64(d)) }

// crlFixture is a fixture whose client CAs' CRL is in a file, and two
// clients of its CA.
type crlFixture struct {
	*fixture
	a, b *devcerts.Pair
}

func newCRLFixture(t *testing.T) *crlFixture {
	t.Helper()
	f := &crlFixture{fixture: newFixture(t)}
	f.files.ClientCRL = filepath.Join(filepath.Dir(f.files.ClientCA), "clients.crl")
	for _, p := range []**devcerts.Pair{&f.a, &f.b} {
		var err error
		if *p, err = f.ca.Issue(devcerts.Options{Client: true, DNSNames: []string{"client"}}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// writeCRL writes a CRL of the CA, numbered number, in force from this to
// next, revoking clients; by a rename, as operators are told to.
func (f *crlFixture) writeCRL(t *testing.T, number int64, this, next time.Time, clients ...*devcerts.Pair) {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: this, NextUpdate: next}
	for _, c := range clients {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: c.Cert.SerialNumber, RevocationTime: this})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, f.ca.Cert, f.ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.files.ClientCRL+".new", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.files.ClientCRL+".new", f.files.ClientCRL); err != nil {
		t.Fatal(err)
	}
}

func (f *crlFixture) chain(p *devcerts.Pair) []*x509.Certificate {
	return []*x509.Certificate{p.Cert, f.ca.Cert}
}

func tlsPair(t *testing.T, p *devcerts.Pair) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// admitted says whether s admits p now, at the handshake and at a call.
// serve's server reads a byte, then closes: an admitted client reads
// io.EOF, a refused one the server's alert, however slow the machine.
func (f *crlFixture) admitted(t *testing.T, s *tlsreload.Server, addr string, now time.Time, p *devcerts.Pair) (handshake, call error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Cert)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*tlsPair(t, p)}})
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err = c.Write([]byte("x")); err == nil {
			if _, err = c.Read(make([]byte, 1)); err == io.EOF {
				err = nil
			}
		}
	}
	return err, s.StillTrusted(f.chain(p), now)
}

// A CRL out of its validity or older than the one in force is refused,
// saying why; the last good one stays in force. A valid newer one
// replaces it.
func TestReload_CRLOutOfForceOrOlder_KeepsTheLastGood(t *testing.T) {
	f := newCRLFixture(t)
	now := time.Now()
	f.writeCRL(t, 2, now.Add(-time.Hour), now.Add(time.Hour), f.a)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config(tlsreload.RequireClientCert, "h2"))
	if h, c := f.admitted(t, s, addr, now, f.a); h == nil || c == nil {
		t.Fatalf("a, revoked: handshake %v, call %v; want both refused", h, c)
	}
	for _, bad := range []struct {
		name, want string
		number     int64
		this, next time.Time
	}{
		{"expired a day ago", "expired at", 3, now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)},
		{"issued a day ahead", "not valid until", 3, now.Add(24 * time.Hour), now.Add(48 * time.Hour)},
		{"a lower number", "CRL number 1 is below 2", 1, now.Add(-time.Hour), now.Add(time.Hour)},
		{"the same number, other content", "with other content", 2, now.Add(-time.Minute), now.Add(time.Hour)},
	} {
		f.writeCRL(t, bad.number, bad.this, bad.next) // a not revoked
		if err := s.Reload(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: Reload() = %v, want it refused saying %q", bad.name, err, bad.want)
		}
		if h, c := f.admitted(t, s, addr, time.Now(), f.a); h == nil || c == nil || !strings.Contains(c.Error(), "is revoked") {
			t.Errorf("%s: a, revoked by the CRL in force: handshake %v, call %v; want both refused", bad.name, h, c)
		}
		if got := s.CRLs(); len(got) != 1 || got[0].Number.Int64() != 2 {
			t.Errorf("%s: in force %+v, want CRL 2", bad.name, got)
		}
	}
	f.writeCRL(t, 3, now.Add(-time.Minute), now.Add(time.Hour), f.b)
	if err := s.Reload(); err != nil {
		t.Fatalf("a newer CRL: %v", err)
	}
	if h, c := f.admitted(t, s, addr, time.Now(), f.a); h != nil || c != nil {
		t.Errorf("a, no longer revoked: handshake %v, call %v", h, c)
	}
	if h, c := f.admitted(t, s, addr, time.Now(), f.b); h == nil || c == nil {
		t.Errorf("b, revoked now: handshake %v, call %v; want both refused", h, c)
	}
	if got := s.CRLs(); len(got) != 1 || got[0].Number.Int64() != 3 || got[0].Revoked != 1 || got[0].Issuer != f.ca.Cert.Subject.String() {
		t.Errorf("in force %+v, want CRL 3 of the CA, revoking one", got)
	}
}

// Once the CRL in force is past its nextUpdate, no client certificate is
// admitted, at the handshake or at a call, until a valid CRL is loaded.
func TestEnforceCRL_FailsClosedPastNextUpdate(t *testing.T) {
	f := newCRLFixture(t)
	clk := newClock()
	f.writeCRL(t, 1, clk.now().Add(-time.Hour), clk.now().Add(time.Hour), f.b)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	tlsreload.SetClock(s, clk.now)
	addr := serve(t, s.Config(tlsreload.RequireClientCert, "h2"))
	if err := s.EnforceCRL(clk.now()); err != nil {
		t.Fatalf("in force: %v", err)
	}
	if h, c := f.admitted(t, s, addr, clk.now(), f.a); h != nil || c != nil {
		t.Fatalf("a, in force: handshake %v, call %v", h, c)
	}
	clk.add(time.Hour)
	if err := s.EnforceCRL(clk.now()); err == nil || !strings.Contains(err.Error(), "no client certificate is admitted") {
		t.Errorf("at the nextUpdate: %v, want why no client is admitted", err)
	}
	if h, c := f.admitted(t, s, addr, clk.now(), f.a); h == nil || c == nil {
		t.Errorf("a, past the nextUpdate: handshake %v, call %v; want both refused", h, c)
	}
	// A CRL valid now ends it.
	f.writeCRL(t, 2, clk.now().Add(-time.Minute), clk.now().Add(time.Hour), f.b)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := s.EnforceCRL(clk.now()); err != nil {
		t.Errorf("a valid CRL loaded: %v", err)
	}
	if h, c := f.admitted(t, s, addr, clk.now(), f.a); h != nil || c != nil {
		t.Errorf("a, after a valid CRL: handshake %v, call %v", h, c)
	}
}

// serveCreds accepts connections and makes creds' server handshake on
// each; then reads until the connection ends, as gRPC's transport does.
func serveCreds(t *testing.T, creds credentials.TransportCredentials) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			raw, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				conn, _, err := creds.ServerHandshake(raw)
				if err != nil {
					raw.Close()
					return
				}
				defer conn.Close()
				io.Copy(io.Discard, conn)
			}()
		}
	}()
	return lis.Addr().String()
}

// openConn is a client's connection with p's certificate, handshake done.
func (f *crlFixture) openConn(t *testing.T, addr string, p *devcerts.Pair) *tls.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Cert)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*tlsPair(t, p)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosed waits up to a minute for the server to end c.
func waitClosed(t *testing.T, c *tls.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("%s: read %v, want the connection ended by the server", what, err)
	}
}

// waitTracked waits up to a minute for s to track n connections.
func waitTracked(t *testing.T, s *tlsreload.Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); tlsreload.Tracked(s) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections tracked, want %d", tlsreload.Tracked(s), n)
		}
	}
}

// A CRL that revokes a client certificate closes its open connections;
// others stay. A CRL past its nextUpdate closes them all.
func TestCredentials_RevocationClosesOpenConnections(t *testing.T) {
	f := newCRLFixture(t)
	clk := newClock()
	f.writeCRL(t, 1, clk.now().Add(-time.Hour), clk.now().Add(time.Hour))
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	tlsreload.SetClock(s, clk.now)
	addr := serveCreds(t, s.Credentials(tlsreload.RequireClientCert))
	a, b := f.openConn(t, addr, f.a), f.openConn(t, addr, f.b)
	for _, c := range []*tls.Conn{a, b} { // TLS 1.3: the server's side ends after the client's
		c.Write([]byte("x"))
	}
	waitTracked(t, s, 2)

	f.writeCRL(t, 2, clk.now().Add(-time.Minute), clk.now().Add(time.Hour), f.a)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, a, "a, revoked")
	waitTracked(t, s, 1)
	b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := b.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("b, not revoked: read %v, want its connection open", err)
	}

	clk.add(2 * time.Hour)
	if err := s.EnforceCRL(clk.now()); err == nil {
		t.Error("past the nextUpdate: EnforceCRL() = nil")
	}
	waitClosed(t, b, "b, past the CRL's nextUpdate")
	waitTracked(t, s, 0)
}

// A client that resumes a session is checked against the CRLs too: a
// resumed handshake verifies no certificate, so a revocation could
// otherwise be skipped.
func TestConfig_ResumedSessionOfARevokedClientRefused(t *testing.T) {
	f := newCRLFixture(t)
	now := time.Now()
	f.writeCRL(t, 1, now.Add(-time.Hour), now.Add(time.Hour))
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config(tlsreload.RequireClientCert, "h2"))
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{*tlsPair(t, f.a)}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	connect := func() (resumed bool, err error) {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return false, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err = c.Write([]byte("x")); err == nil {
			if _, err = c.Read(make([]byte, 1)); err == io.EOF { // the ticket comes before
				err = nil
			}
		}
		return c.ConnectionState().DidResume, err
	}
	if _, err := connect(); err != nil {
		t.Fatal(err)
	}
	if resumed, err := connect(); err != nil || !resumed {
		t.Fatalf("second connection: resumed %t, %v; want a resumed session", resumed, err)
	}
	f.writeCRL(t, 2, now.Add(-time.Minute), now.Add(time.Hour), f.a)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(); err == nil {
		t.Error("a revoked client resumed its session")
	}
}

// With no good CRL before it, an expired one stops the start.
func TestLoad_RefusesAnExpiredCRL(t *testing.T) {
	f := newCRLFixture(t)
	now := time.Now()
	f.writeCRL(t, 1, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	if _, err := tlsreload.Load(f.files); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Errorf("Load with an expired CRL: %v, want it refused", err)
	}
}
