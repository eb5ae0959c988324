// Package devcerts makes certificate authorities and certificates for
// development and tests. They are never for production.
//
// Everything here trades safety for convenience. Keys are made on the spot
// and written unencrypted. Every certificate says in its Organization that
// it is not for production. Only the standard library is used (crypto/x509,
// ECDSA P-256), so the tests of TLS and mutual TLS need nothing else.
package devcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// organization is in every subject. A certificate that strays out of
// development thus says what it is to whoever inspects it.
const organization = "paymentsd development (not for production)"

// CA is a certificate authority that issues development certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte // PEM "CERTIFICATE"
}

// NewCA returns a new self-signed CA named commonName. It is valid from an
// hour ago for ten years. Its Organization is "paymentsd development (not
// for production)". It may sign end-entity certificates only (path length
// 0). A development CA has no business making intermediates.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	// An hour in the past tolerates clocks a little behind this one's.
	notBefore := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{organization}},
		NotBefore:             notBefore,
		NotAfter:              notBefore.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devcerts: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM(der)}, nil
}

// Options describe a certificate to issue. A zero NotBefore means an hour
// ago. A zero NotAfter means a year from now.
type Options struct {
	CommonName          string
	DNSNames            []string
	IPs                 []net.IP
	URIs                []*url.URL
	NotBefore, NotAfter time.Time
	Client              bool // ExtKeyUsageClientAuth; otherwise ExtKeyUsageServerAuth
}

// Pair is an issued certificate and its key, in PEM ("CERTIFICATE", and
// "PRIVATE KEY" as PKCS#8).
type Pair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a new certificate with a fresh key and a random 128-bit serial.
// It has one extended key usage, client or server. So a client's
// certificate cannot pass for a server's, or the other way round.
func (ca *CA) Issue(o Options) (*Pair, error) {
	now := time.Now()
	notBefore, notAfter := o.NotBefore, o.NotAfter
	if notBefore.IsZero() {
		notBefore = now.Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = now.AddDate(1, 0, 0)
	}
	if !notAfter.After(notBefore) {
		return nil, fmt.Errorf("devcerts: NotAfter %v is not after NotBefore %v", notAfter, notBefore)
	}
	usage := x509.ExtKeyUsageServerAuth
	if o.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: o.CommonName, Organization: []string{organization}},
		DNSNames:              o.DNSNames,
		IPAddresses:           o.IPs,
		URIs:                  o.URIs,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("devcerts: issue %q: %w", o.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Pair{
		Cert:    cert,
		CertPEM: certPEM(der),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}, nil
}

// WriteFiles writes p as certFile and keyFile. The key gets mode 0600 and
// the certificate 0644. Each goes through a temp file in the same
// directory, renamed into place. A watcher of the files thus never sees
// half of one. The key goes first. A watcher that reloads when the
// certificate changes then finds the new key already there.
func (p *Pair) WriteFiles(certFile, keyFile string) error {
	if err := writeFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, p.CertPEM, 0o644)
}

// Dev writes the development set into dir, created 0700 if missing. The set
// is ca.pem, and server.pem + server-key.pem for localhost, 127.0.0.1 and
// ::1. It also holds client-a.pem + client-a-key.pem, with URI SAN
// spiffe://paymentsd.dev/client-a and DNS SAN client-a.paymentsd.dev. And
// it holds client-b.pem + client-b-key.pem, likewise for client-b. Dev
// refuses to overwrite existing files, with an error naming the first that
// exists. It returns the paths written.
//
// All the names are checked before anything is written, so a refusal
// writes nothing. Should a write fail midway, the files written so far are
// removed, so a second run is not refused. The CA's key is not written.
// Nothing needs it, and without it no one can issue more certificates the
// set trusts. Two clients let tests tell one client identity from another.
func Dev(dir string) ([]string, error) {
	type file struct {
		name string
		data []byte
		mode fs.FileMode
	}
	ca, err := NewCA("paymentsd development CA")
	if err != nil {
		return nil, err
	}
	files := []file{{"ca.pem", ca.CertPEM, 0o644}}
	issue := func(name string, o Options) error {
		p, err := ca.Issue(o)
		if err != nil {
			return err
		}
		files = append(files, file{name + ".pem", p.CertPEM, 0o644}, file{name + "-key.pem", p.KeyPEM, 0o600})
		return nil
	}
	if err := issue("server", LocalServer()); err != nil {
		return nil, err
	}
	for _, client := range []string{"client-a", "client-b"} {
		if err := issue(client, Client(client)); err != nil {
			return nil, err
		}
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f.name)
		// Lstat: a symbolic link, even one to nothing, is a file not to replace.
		if _, err := os.Lstat(paths[i]); err == nil {
			return nil, fmt.Errorf("%s: %w (development certificates are never overwritten: remove them or choose another directory)", paths[i], fs.ErrExist)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	for i, f := range files {
		if err := writeFile(paths[i], f.data, f.mode); err != nil {
			for _, p := range paths[:i] {
				os.Remove(p)
			}
			return nil, err
		}
	}
	return paths, nil
}

// LocalServer describes the certificate of a server on this machine:
// localhost, 127.0.0.1 and ::1.
func LocalServer() Options {
	return Options{
		CommonName: "localhost",
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
}

// Client describes the certificate of the development client name. Its URI
// SAN is spiffe://paymentsd.dev/<name>, and its DNS SAN <name>.paymentsd.dev.
func Client(name string) Options {
	return Options{
		CommonName: name,
		DNSNames:   []string{name + ".paymentsd.dev"},
		URIs:       []*url.URL{{Scheme: "spiffe", Host: "paymentsd.dev", Path: "/" + name}},
		Client:     true,
	}
}

// newSerial returns a random positive 128-bit serial number. It is unique
// without keeping count, as RFC 5280 asks of an issuer.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, err
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// writeFile replaces path with data, of exactly mode whatever the umask. It
// writes through a temp file in path's directory. A rename within a
// directory is atomic, so a reader sees the old file or the new one, whole.
func writeFile(path string, data []byte, mode fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	// Synced before the rename, so that a crash cannot leave the name on an
	// empty file.
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
