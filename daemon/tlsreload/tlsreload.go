// Package tlsreload serves a TLS certificate from PEM files that can be
// replaced while the server runs. It can also serve the CAs that verify
// client certificates, and the CRLs that revoke some. Each new handshake
// gets what was loaded last, and connections already made keep theirs. A
// set of files that does not load leaves the last good one in place. A
// gRPC connection that a new CRL revokes is closed.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paymentsd/paymentsd/internal/safefile"
)

// Files names the PEM files of a server's TLS identity.
type Files struct {
	Cert     string // the certificate chain, leaf first
	Key      string // its private key, which group and others may not write
	ClientCA string // CAs that sign client certificates; "" for none
	// ClientCRL lists revoked client certificates, in PEM or DER CRLs the
	// client CAs signed. It is "" for none.
	ClientCRL string
}

// Paths returns the files named, for a watcher.
func (f Files) Paths() []string {
	paths := []string{f.Cert, f.Key}
	for _, p := range []string{f.ClientCA, f.ClientCRL} {
		if p != "" {
			paths = append(paths, p)
		}
	}
	return paths
}

// Server holds the TLS identity loaded last.
type Server struct {
	files Files
	now   func() time.Time
	cur   atomic.Pointer[loaded]
	conns conns // the gRPC connections client certificates opened
	// reloading serialises reloads: each compares its CRLs with those
	// in force, then stores its own.
	reloading sync.Mutex
}

type loaded struct {
	cert      tls.Certificate
	clientCAs *x509.CertPool  // nil without Files.ClientCA
	caRaw     map[string]bool // the DER of each of clientCAs
	crls      *CRLs           // by Files.ClientCRL; nil without it
}

// Load loads files, and fails if they do not make a usable identity.
func Load(files Files) (*Server, error) {
	s := &Server{files: files, now: time.Now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload loads the files again. If they do not load, it returns why and
// keeps serving what it had. Causes include a key that is not the
// certificate's, an unreadable file, a certificate out of its validity,
// and a CRL out of its validity or older than the one in force. Once the
// new files are in use, it closes the connections their CRLs revoke.
func (s *Server) Reload() error {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	l, err := s.load()
	if err != nil {
		return err
	}
	s.cur.Store(l)
	s.conns.closeRefused(l.crls, s.now())
	return nil
}

func (s *Server) load() (*loaded, error) {
	cert, err := s.loadCert()
	if err != nil {
		return nil, err
	}
	l := &loaded{cert: cert}
	if s.files.ClientCA == "" {
		return l, nil
	}
	cas, err := s.loadClientCAs(l)
	if err != nil {
		return nil, err
	}
	if s.files.ClientCRL != "" {
		data, err := safefile.ReadPrivate(s.files.ClientCRL)
		if err != nil {
			return nil, fmt.Errorf("tls client CRL: %w", err)
		}
		var prev *CRLs
		if cur := s.cur.Load(); cur != nil {
			prev = cur.crls
		}
		if l.crls, err = ParseCRLs(data, cas, s.now(), prev); err != nil {
			return nil, fmt.Errorf("tls client CRL: %s: %w", s.files.ClientCRL, err)
		}
	}
	return l, nil
}

// loadCert loads the server's certificate and key. It refuses a
// certificate that is out of its validity or not for servers.
func (s *Server) loadCert() (tls.Certificate, error) {
	certPEM, err := safefile.Read(s.files.Cert)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls certificate: %w", err)
	}
	keyPEM, err := safefile.ReadPrivate(s.files.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: %s and %s: %w", s.files.Cert, s.files.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil { // GODEBUG=x509keypairleaf=0
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: %s: %w", s.files.Cert, err)
		}
		cert.Leaf = leaf
	}
	switch now := s.now(); {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("tls: %s expired at %s", s.files.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("tls: %s is not valid until %s", s.files.Cert, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if !usableBy(leaf, x509.ExtKeyUsageServerAuth) {
		return tls.Certificate{}, fmt.Errorf("tls: %s is not for servers (its extended key usage lacks serverAuth): clients would refuse it", s.files.Cert)
	}
	return cert, nil
}

// loadClientCAs loads the client CAs into l and returns them.
func (s *Server) loadClientCAs(l *loaded) ([]*x509.Certificate, error) {
	caPEM, err := safefile.ReadPrivate(s.files.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("tls client CA: %w", err)
	}
	l.clientCAs, l.caRaw = x509.NewCertPool(), map[string]bool{}
	var cas []*x509.Certificate
	for rest := caPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		ca, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls client CA: %s: %w", s.files.ClientCA, err)
		}
		l.clientCAs.AddCert(ca)
		l.caRaw[string(ca.Raw)] = true
		cas = append(cas, ca)
	}
	if len(l.caRaw) == 0 {
		return nil, fmt.Errorf("tls client CA: %s holds no PEM certificate", s.files.ClientCA)
	}
	return cas, nil
}

// StillTrusted says whether chain would still be trusted now. The chain is
// a client certificate chain, leaf first, verified at a connection's
// handshake. Each of its certificates must be within its validity and
// unrevoked. Its root must be among the client CAs loaded last.
// A connection lives on after its handshake, and each of its requests asks
// this. So removing a CA, revoking a certificate, or a certificate
// expiring ends what it let in.
func (s *Server) StillTrusted(chain []*x509.Certificate, now time.Time) error {
	for _, c := range chain {
		if now.After(c.NotAfter) {
			return fmt.Errorf("%+q expired at %s", c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	l := s.cur.Load()
	if root := chain[len(chain)-1]; !l.caRaw[string(root.Raw)] {
		return fmt.Errorf("its CA %+q is no longer among the client CAs", root.Subject.CommonName)
	}
	return l.crls.check(chain, now)
}

// Leaf returns the certificate served now.
func (s *Server) Leaf() *x509.Certificate { return s.cur.Load().cert.Leaf }

// CRLs returns the client CRLs in force, in the file's order; nil without
// Files.ClientCRL.
func (s *Server) CRLs() []CRL {
	if c := s.cur.Load().crls; c != nil {
		return c.List()
	}
	return nil
}

// EnforceCRL says why no client certificate is admitted at now: a CRL in
// force is past its nextUpdate. Handshakes and calls are then refused,
// and it closes the gRPC connections that client certificates opened. It
// returns nil while every CRL is in force, and without CRLs. Call it
// often, as a health check does: a CRL expires without a reload.
func (s *Server) EnforceCRL(now time.Time) error {
	crls := s.cur.Load().crls
	err := crls.expired(now)
	if err != nil {
		s.conns.closeRefused(crls, now)
	}
	return err
}

// ClientAuth says whether a listener verifies client certificates.
type ClientAuth bool

const (
	// NoClientCert: clients are not asked for a certificate.
	NoClientCert ClientAuth = false
	// RequireClientCert: a client must present a certificate that
	// Files.ClientCA verifies.
	RequireClientCert ClientAuth = true
)

// Config returns the configuration of a listener that offers nextProtos by
// ALPN ("h2" for gRPC). With RequireClientCert and a ClientCA, it requires
// and verifies client certificates. Each handshake reads the identity
// loaded last. TLS 1.2 is the oldest version spoken. TLS 1.3 is chosen
// whenever the client speaks it.
func (s *Server) Config(clientAuth ClientAuth, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := s.cur.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{l.cert},
			}
			if clientAuth == RequireClientCert {
				if l.clientCAs == nil {
					return nil, errors.New("tls: no client CA loaded")
				}
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = l.clientCAs
				if l.crls != nil {
					c.VerifyConnection = s.refuseRevoked(l.crls)
				}
			}
			return c, nil
		},
	}
}

// refuseRevoked refuses a handshake whose client certificate crls refuse
// now. It is a VerifyConnection, which unlike VerifyPeerCertificate sees
// resumed sessions too.
func (s *Server) refuseRevoked(crls *CRLs) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		for _, chain := range cs.VerifiedChains {
			if err := crls.check(chain, s.now()); err != nil {
				return fmt.Errorf("tls: client certificate refused: %w", err)
			}
		}
		return nil
	}
}

// usableBy reports whether c may serve for usage. It may if c names no
// extended key usage, or names usage or any.
func usableBy(c *x509.Certificate, usage x509.ExtKeyUsage) bool {
	if len(c.ExtKeyUsage) == 0 {
		return true
	}
	for _, u := range c.ExtKeyUsage {
		if u == usage || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
