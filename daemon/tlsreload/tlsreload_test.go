package tlsreload_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
