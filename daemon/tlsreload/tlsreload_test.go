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

type fixture struct {
	ca    *devcerts.CA
	files tlsreload.Files
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca, err := devcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &fixture{ca: ca, files: tlsreload.Files{
		Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"), ClientCA: filepath.Join(dir, "ca.pem")}}
	if err := os.WriteFile(f.files.ClientCA, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(t, devcerts.Options{DNSNames: []string{"localhost"}})
	return f
}

// write issues a server certificate and writes it over the files.
func (f *fixture) write(t *testing.T, o devcerts.Options) *devcerts.Pair {
	t.Helper()
	p, err := f.ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteFiles(f.files.Cert, f.files.Key); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve accepts TLS connections with cfg until the test ends, completing
// each handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					tc.Read(make([]byte, 1))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// dial handshakes with addr as a client trusting ca, and returns the
// serial of the certificate the server showed.
func dial(t *testing.T, addr string, ca *devcerts.CA, client *tls.Certificate) (string, tls.ConnectionState, error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", tls.ConnectionState{}, err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate on the first read.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
		return "", tls.ConnectionState{}, err
	}
	st := c.ConnectionState()
	return st.PeerCertificates[0].SerialNumber.String(), st, nil
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestReload_NewHandshakesGetTheNewCertificate(t *testing.T) {
	f := newFixture(t)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config(tlsreload.NoClientCert, "h2"))
	first := s.Leaf().SerialNumber.String()
	got, st, err := dial(t, addr, f.ca, nil)
	if err != nil || got != first {
		t.Fatalf("first: serial %s, %v; want %s", got, err, first)
	}
	if st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "h2" {
		t.Errorf("version %x, ALPN %q; want TLS 1.3 and h2", st.Version, st.NegotiatedProtocol)
	}
	p := f.write(t, devcerts.Options{DNSNames: []string{"localhost"}})
	if got, _, _ := dial(t, addr, f.ca, nil); got != first {
		t.Errorf("before Reload: serial %s, want the first %s", got, first)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, _, err := dial(t, addr, f.ca, nil); err != nil || got != p.Cert.SerialNumber.String() {
		t.Errorf("after Reload: serial %s, %v; want the new %s", got, err, p.Cert.SerialNumber)
	}
}

func TestReload_BadFilesKeepTheOldCertificate(t *testing.T) {
	f := newFixture(t)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config(tlsreload.NoClientCert, "h2"))
	good := s.Leaf().SerialNumber.String()
	other, err := f.ca.Issue(devcerts.Options{DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		damage     func()
	}{
		{"expired", "expired", func() {
			f.write(t, devcerts.Options{DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		}},
		{"not yet valid", "not valid until", func() {
			f.write(t, devcerts.Options{DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})
		}},
		{"wrong key", "private key does not match", func() {
			f.write(t, devcerts.Options{DNSNames: []string{"localhost"}})
			os.WriteFile(f.files.Key, other.KeyPEM, 0o600)
		}},
		{"key writable by others", "writable by group or others (mode 0666)", func() {
			f.write(t, devcerts.Options{DNSNames: []string{"localhost"}})
			os.Chmod(f.files.Key, 0o666)
		}},
		{"garbage", "failed to find any PEM data", func() {
			os.Chmod(f.files.Key, 0o600)
			os.WriteFile(f.files.Cert, []byte("not PEM"), 0o644)
		}},
		{"missing", "no such file", func() { os.Remove(f.files.Cert) }},
	} {
		tc.damage()
		err := s.Reload()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Reload() = %v, want an error saying %q", tc.name, err, tc.want)
		}
		if got, _, err := dial(t, addr, f.ca, nil); err != nil || got != good {
			t.Errorf("%s: serving serial %s, %v; want the last good %s", tc.name, got, err, good)
		}
	}
}

func TestClientCertificates_RequiredVerifiedAndReloaded(t *testing.T) {
	f := newFixture(t)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config(tlsreload.RequireClientCert, "h2"))
	pair := func(ca *devcerts.CA) *tls.Certificate {
		p, err := ca.Issue(devcerts.Options{Client: true, DNSNames: []string{"client"}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	if _, _, err := dial(t, addr, f.ca, nil); err == nil {
		t.Error("a client without a certificate got in")
	}
	if _, _, err := dial(t, addr, f.ca, pair(f.ca)); err != nil {
		t.Errorf("a client with a certificate of the CA: %v", err)
	}
	newCA, err := devcerts.NewCA("next CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(t, addr, f.ca, pair(newCA)); err == nil {
		t.Error("a client certificate of another CA got in")
	}
	// The client CA file rotated: the new CA's clients get in, the old one's not.
	if err := os.WriteFile(f.files.ClientCA, newCA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(t, addr, f.ca, pair(newCA)); err != nil {
		t.Errorf("after the CA rotated, its client: %v", err)
	}
	if _, _, err := dial(t, addr, f.ca, pair(f.ca)); err == nil {
		t.Error("after the CA rotated, a client of the old CA got in")
	}
}

func TestConfig_NoTLSBelow12(t *testing.T) {
	f := newFixture(t)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s.Config(tlsreload.NoClientCert, "h2"))
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Cert)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MaxVersion: tls.VersionTLS11})
	if err == nil {
		c.Close()
		t.Error("a TLS 1.1 client got in")
	}
}

func TestStillTrusted_CARemovedOrCertificateExpired(t *testing.T) {
	f := newFixture(t)
	s, err := tlsreload.Load(f.files)
	if err != nil {
		t.Fatal(err)
	}
	client, err := f.ca.Issue(devcerts.Options{Client: true, DNSNames: []string{"client"}, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	chain := []*x509.Certificate{client.Cert, f.ca.Cert}
	if err := s.StillTrusted(chain, time.Now()); err != nil {
		t.Fatalf("a chain of the CA loaded: %v", err)
	}
	if err := s.StillTrusted(chain, time.Now().Add(2*time.Hour)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("two hours on, past the leaf's expiry: %v", err)
	}
	other, err := devcerts.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.files.ClientCA, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := s.StillTrusted(chain, time.Now()); err == nil || !strings.Contains(err.Error(), "no longer among the client CAs") {
		t.Errorf("after its CA was removed: %v", err)
	}
}

func TestLoad_RefusesAClientOnlyCertificate(t *testing.T) {
	f := newFixture(t)
	f.write(t, devcerts.Options{Client: true, DNSNames: []string{"localhost"}})
	if _, err := tlsreload.Load(f.files); err == nil || !strings.Contains(err.Error(), "not for servers") {
		t.Errorf("Load of a client certificate as the server's: %v", err)
	}
}

// ---- Client CRLs ----

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
