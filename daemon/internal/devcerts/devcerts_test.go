package devcerts

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, o Options) *Pair {
	t.Helper()
	p, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func verify(ca *CA, c *x509.Certificate, at time.Time, usage x509.ExtKeyUsage) error {
	_, err := c.Verify(x509.VerifyOptions{Roots: pool(ca), CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func TestNewCA(t *testing.T) {
	ca := newCA(t)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA constraints: IsCA %t, MaxPathLen %d (zero %t), KeyUsage %b", c.IsCA, c.MaxPathLen, c.MaxPathLenZero, c.KeyUsage)
	}
	if c.Subject.CommonName != "test CA" || !slices.Equal(c.Subject.Organization, []string{organization}) {
		t.Errorf("subject %v", c.Subject)
	}
	if d := time.Since(c.NotBefore); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("NotBefore %v, want an hour ago", c.NotBefore)
	}
	if !c.NotAfter.Equal(c.NotBefore.AddDate(10, 0, 0)) {
		t.Errorf("NotAfter %v, want ten years after NotBefore %v", c.NotAfter, c.NotBefore)
	}
	if c.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm %v", c.PublicKeyAlgorithm)
	}
	b, rest := pem.Decode(ca.CertPEM)
	if b == nil || b.Type != "CERTIFICATE" || len(rest) != 0 || !bytes.Equal(b.Bytes, c.Raw) {
		t.Errorf("CertPEM is not the certificate as one PEM block")
	}
}

func TestIssue_VerifiesForItsUsage_WithTheSANsAsked(t *testing.T) {
	ca := newCA(t)
	spiffe, _ := url.Parse("spiffe://paymentsd.dev/someone")
	server := issue(t, ca, Options{CommonName: "srv", DNSNames: []string{"localhost", "srv.example"}, IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}})
	client := issue(t, ca, Options{CommonName: "someone", DNSNames: []string{"someone.paymentsd.dev"}, URIs: []*url.URL{spiffe}, Client: true})

	now := time.Now()
	if err := verify(ca, server.Cert, now, x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("server certificate as a server's: %v", err)
	}
	for _, host := range []string{"localhost", "srv.example", "127.0.0.1", "::1"} {
		if err := server.Cert.VerifyHostname(host); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if err := server.Cert.VerifyHostname("other.example"); err == nil {
		t.Error("server certificate verifies for a name it was not issued for")
	}
	if err := verify(ca, client.Cert, now, x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("client certificate as a client's: %v", err)
	}
	if len(client.Cert.URIs) != 1 || client.Cert.URIs[0].String() != spiffe.String() ||
		!slices.Equal(client.Cert.DNSNames, []string{"someone.paymentsd.dev"}) || client.Cert.Subject.CommonName != "someone" {
		t.Errorf("client certificate: URIs %v, DNS %v, CN %q", client.Cert.URIs, client.Cert.DNSNames, client.Cert.Subject.CommonName)
	}

	// One usage each: neither passes for the other.
	var invalid x509.CertificateInvalidError
	if err := verify(ca, client.Cert, now, x509.ExtKeyUsageServerAuth); !errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage {
		t.Errorf("client certificate as a server's: %v, want IncompatibleUsage", err)
	}
	if err := verify(ca, server.Cert, now, x509.ExtKeyUsageClientAuth); !errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage {
		t.Errorf("server certificate as a client's: %v, want IncompatibleUsage", err)
	}

	// Another CA's certificate does not verify.
	if err := verify(newCA(t), server.Cert, now, x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("verifies against another CA")
	}

	// The key is PKCS#8 and goes with the certificate.
	if b, _ := pem.Decode(server.KeyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Errorf("key PEM: %q", server.KeyPEM)
	}
	if _, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM); err != nil {
		t.Errorf("key pair: %v", err)
	}
	if server.Cert.SerialNumber.Cmp(client.Cert.SerialNumber) == 0 || server.Cert.SerialNumber.BitLen() > 128 || server.Cert.SerialNumber.Sign() <= 0 {
		t.Errorf("serials %v and %v", server.Cert.SerialNumber, client.Cert.SerialNumber)
	}
}

func TestIssue_Expiry(t *testing.T) {
	ca := newCA(t)
	now := time.Now()

	p := issue(t, ca, Options{CommonName: "default", DNSNames: []string{"localhost"}})
	if d := now.Sub(p.Cert.NotBefore); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("default NotBefore %v, want an hour ago", p.Cert.NotBefore)
	}
	if want := now.AddDate(1, 0, 0); p.Cert.NotAfter.Before(want.Add(-time.Minute)) || p.Cert.NotAfter.After(want.Add(time.Minute)) {
		t.Errorf("default NotAfter %v, want a year from now", p.Cert.NotAfter)
	}

	nb, na := now.Add(time.Hour).Truncate(time.Second), now.Add(2*time.Hour).Truncate(time.Second)
	p = issue(t, ca, Options{CommonName: "later", DNSNames: []string{"localhost"}, NotBefore: nb, NotAfter: na})
	if !p.Cert.NotBefore.Equal(nb) || !p.Cert.NotAfter.Equal(na) {
		t.Errorf("validity %v to %v, want %v to %v", p.Cert.NotBefore, p.Cert.NotAfter, nb, na)
	}
	var invalid x509.CertificateInvalidError
	for _, at := range []time.Time{now, na.Add(time.Second)} {
		if err := verify(ca, p.Cert, at, x509.ExtKeyUsageServerAuth); !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
			t.Errorf("at %v: %v, want Expired", at, err)
		}
	}
	if err := verify(ca, p.Cert, nb.Add(30*time.Minute), x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("within its validity: %v", err)
	}

	if _, err := ca.Issue(Options{CommonName: "backwards", NotBefore: na, NotAfter: nb}); err == nil {
		t.Error("NotAfter before NotBefore: no error")
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode()
}

func TestWriteFiles_ModesAtomic(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")

	// Over existing files of other modes, as a rotation does: replaced, the
	// modes those asked for.
	for _, f := range []string{certFile, keyFile} {
		if err := os.WriteFile(f, []byte("old"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		p := issue(t, ca, Options{CommonName: "srv", DNSNames: []string{"localhost"}})
		if err := p.WriteFiles(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		if m := mode(t, keyFile); m != 0o600 {
			t.Errorf("key file mode %v, want 0600", m)
		}
		if m := mode(t, certFile); m != 0o644 {
			t.Errorf("certificate file mode %v, want 0644", m)
		}
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(certFile); !bytes.Equal(got, p.CertPEM) {
			t.Error("certificate file is not the pair's")
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"tls.crt", "tls.key"}) {
		t.Errorf("directory holds %q, want the two files and no temp file", names)
	}

	// A rename that fails (the certificate's name is a directory's) leaves
	// no temp file either.
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := issue(t, ca, Options{CommonName: "srv"})
	if err := p.WriteFiles(sub, keyFile); err == nil {
		t.Error("certificate over a directory: no error")
	}
	entries, _ = os.ReadDir(dir)
	names = names[:0]
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"sub", "tls.crt", "tls.key"}) {
		t.Errorf("after a failed write the directory holds %q", names)
	}
}

func TestDev_Files_RefusesToOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	paths, err := Dev(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := devFilesAsNamed(t, dir, paths)
	devCertsVerify(t, dir)

	// Again into the same directory: refused, naming the first file, nothing changed.
	if _, err := Dev(dir); err == nil || !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), filepath.Join(dir, "ca.pem")) {
		t.Errorf("second Dev: %v, want an error naming ca.pem", err)
	}
	for p, b := range before {
		if got, _ := os.ReadFile(p); !bytes.Equal(got, b) {
			t.Errorf("%s changed", p)
		}
	}

	// One file of the set there already: refused before anything is written.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "client-b-key.pem"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Dev(dir2); err == nil || !strings.Contains(err.Error(), "client-b-key.pem") {
		t.Errorf("Dev with client-b-key.pem there: %v", err)
	}
	if entries, _ := os.ReadDir(dir2); len(entries) != 1 {
		t.Errorf("a refused Dev left %d files, want the 1 that was there", len(entries))
	}
}

// devFilesAsNamed checks that Dev wrote into dir the files it names, in
// paths, and nothing else, the keys readable by their owner only. It
// returns each file's bytes.
func devFilesAsNamed(t *testing.T, dir string, paths []string) map[string][]byte {
	t.Helper()
	names := []string{"ca.pem", "server.pem", "server-key.pem", "client-a.pem", "client-a-key.pem", "client-b.pem", "client-b-key.pem"}
	var want []string
	for _, n := range names {
		want = append(want, filepath.Join(dir, n))
	}
	if !slices.Equal(paths, want) {
		t.Errorf("paths %q, want %q", paths, want)
	}
	if m := mode(t, dir); m != fs.ModeDir|0o700 {
		t.Errorf("directory mode %v, want 0700", m)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(names) {
		t.Errorf("%d files in the directory, want %d (no CA key, no temp file)", len(entries), len(names))
	}
	before := map[string][]byte{}
	for _, p := range paths {
		wantMode := fs.FileMode(0o644)
		if strings.HasSuffix(p, "-key.pem") {
			wantMode = 0o600
		}
		if m := mode(t, p); m != wantMode {
			t.Errorf("%s: mode %v, want %v", p, m, wantMode)
		}
		before[p], _ = os.ReadFile(p)
	}
	return before
}

// devCertsVerify checks that the certificates Dev wrote into dir verify
// for their uses, with the names asked for.
func devCertsVerify(t *testing.T, dir string) {
	t.Helper()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	srv := loadDevPair(t, dir, "server").Leaf
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Error(err)
	}
	for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
		if err := srv.VerifyHostname(h); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []string{"client-a", "client-b"} {
		cert := loadDevPair(t, dir, c).Leaf
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", c, err)
		}
		if len(cert.URIs) != 1 || cert.URIs[0].String() != "spiffe://paymentsd.dev/"+c || !slices.Equal(cert.DNSNames, []string{c + ".paymentsd.dev"}) {
			t.Errorf("%s: URIs %v, DNS names %v", c, cert.URIs, cert.DNSNames)
		}
	}
}

// loadDevPair loads the pair Dev wrote into dir as name.pem and
// name-key.pem.
func loadDevPair(t *testing.T, dir, name string) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// The set works: a TLS 1.3 handshake in mutual TLS, the server checking
// the client's certificate against ca.pem and seeing its URI SAN.
func TestDev_MutualTLSHandshake(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dev(dir); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	serverCert := loadDevPair(t, dir, "server")
	clientCert := loadDevPair(t, dir, "client-a")

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    roots,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := acceptOneEcho(ln)

	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{clientCert},
		ServerName:   "localhost",
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 4)
	if _, err := io.ReadFull(conn, echo); err != nil || string(echo) != "ping" {
		t.Fatalf("echo %q: %v", echo, err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("server: %v", r.err)
	}
	if !slices.Equal(r.uris, []string{"spiffe://paymentsd.dev/client-a"}) {
		t.Errorf("server sees client URI SANs %q, want spiffe://paymentsd.dev/client-a", r.uris)
	}
}

// echoResult is what the server of acceptOneEcho saw: the client's URI
// SANs, or why the handshake or the echo failed.
type echoResult struct {
	uris []string
	err  error
}

// acceptOneEcho accepts one connection on ln, completes its handshake and
// echoes 4 bytes, so the client knows the server accepted it. It sends
// what it saw on the channel it returns.
func acceptOneEcho(ln net.Listener) <-chan echoResult {
	done := make(chan echoResult, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- echoResult{err: err}
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- echoResult{err: err}
			return
		}
		var r echoResult
		for _, u := range tc.ConnectionState().PeerCertificates[0].URIs {
			r.uris = append(r.uris, u.String())
		}
		_, r.err = io.Copy(tc, io.LimitReader(tc, 4)) // echo, so the client knows the server accepted it
		done <- r
	}()
	return done
}
