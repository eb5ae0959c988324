package auth_test

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/auth"
)

// FuzzCertPrincipal reads the SANs of a client certificate as x509 parses
// them: it never panics, what it accepts is a valid certificate principal,
// and a principal is its own name: a certificate whose SAN is the
// principal itself names the same principal, so no two spellings of one
// name can be two principals, and no name can be read as another.
func FuzzCertPrincipal(f *testing.F) {
	for _, seed := range [][2]string{
		{"spiffe://example.org/payments", ""},
		{"SPIFFE://Example.ORG/Payments", ""},
		{"spiffe://example.org/a%20b", ""},
		{"spiffe://example.org/%61", ""},
		{"dns:a.example", ""},
		{"spiffe://u@example.org/a?b#c", ""},
		{"", "a.example"},
		{"", "*.example"},
		{"", "A.EXAMPLE"},
		{"dns://victim.example/p", ""},
		{"", "//victim.example/p"},
		{"", "svc.example."},
		{"A://0/%21", "0"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, uri, dnsName string) {
		cert := &x509.Certificate{}
		if uri != "" {
			u, err := url.Parse(uri)
			if err != nil {
				return // x509 refuses such a certificate
			}
			cert.URIs = []*url.URL{u}
		}
		if dnsName != "" {
			cert.DNSNames = []string{dnsName}
		}
		p, err := auth.CertPrincipal(cert)
		if err != nil {
			return
		}
		if !auth.ValidCertPrincipal(p) || auth.ValidPrincipal(p) || auth.ValidDevPrincipal(p) {
			t.Fatalf("principal %q of URI %q, DNS %q is not a certificate principal alone", p, uri, dnsName)
		}
		again := &x509.Certificate{}
		if name, ok := strings.CutPrefix(p, "dns:"); ok && len(cert.URIs) == 0 {
			again.DNSNames = []string{name}
		} else {
			u, err := url.Parse(p)
			if err != nil {
				t.Fatalf("principal %q of URI %q does not parse as a URI: %v", p, uri, err)
			}
			again.URIs = []*url.URL{u}
		}
		if q, err := auth.CertPrincipal(again); err != nil || q != p {
			t.Fatalf("principal %q (of URI %q, DNS %q) names %q, %v when written as a SAN itself", p, uri, dnsName, q, err)
		}
	})
}
