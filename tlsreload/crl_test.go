package tlsreload

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/devcerts"
)

// newCRL returns the DER of a CRL of ca revoking serials.
func newCRL(t testing.TB, ca *devcerts.CA, number int64, serials ...*big.Int) []byte {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(time.Hour)}
	for _, s := range serials {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func crlPEM(ders ...[]byte) []byte {
	var out []byte
	for _, d := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: d})...)
	}
	return out
}

func newTestCA(t testing.TB, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestParseCRLs(t *testing.T) {
	a, b, stranger := newTestCA(t, "a"), newTestCA(t, "b"), newTestCA(t, "stranger")
	twin := newTestCA(t, "a") // a's name, another key
	if r, err := ParseCRLs(newCRL(t, twin, 1, big.NewInt(1)), []*x509.Certificate{a.Cert, twin.Cert}); err != nil ||
		r.has(&x509.Certificate{SerialNumber: big.NewInt(1)}, a.Cert) || !r.has(&x509.Certificate{SerialNumber: big.NewInt(1)}, twin.Cert) {
		t.Errorf("a CRL of a's namesake: %v, %v; want it to revoke the namesake's serial only", r, err)
	}
	cas := []*x509.Certificate{a.Cert, b.Cert}
	one, two := big.NewInt(1), big.NewInt(2)
	fromA, fromB := newCRL(t, a, 1, one), newCRL(t, b, 1, two)
	leaf := func(serial *big.Int) *x509.Certificate { return &x509.Certificate{SerialNumber: serial} }

	for name, data := range map[string][]byte{"DER": fromA, "PEM": crlPEM(fromA), "PEM of two": crlPEM(fromA, fromB)} {
		r, err := ParseCRLs(data, cas)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !r.has(leaf(one), a.Cert) || r.has(leaf(two), a.Cert) || r.has(leaf(one), b.Cert) {
			t.Errorf("%s: revoked %v", name, r)
		}
		if name == "PEM of two" && !r.has(leaf(two), b.Cert) {
			t.Errorf("%s: b's CRL not read", name)
		}
	}
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"signed by no client CA": {newCRL(t, stranger, 1, one), "not signed by a client CA"},
		"one of two unsigned":    {crlPEM(fromA, newCRL(t, stranger, 1, one)), "CRL 2: not signed by a client CA"},
		"a certificate":          {a.CertPEM, `type "CERTIFICATE", want X509 CRL`},
		"empty":                  {nil, "no CRL"},
		"garbage":                {[]byte("not a CRL"), "CRL 1:"},
		"broken PEM":             {[]byte("-----BEGIN X509 CRL-----\nabc"), "does not decode"},
	} {
		if _, err := ParseCRLs(c.data, cas); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// FuzzParseCRLs wants what ParseCRLs accepts to be CRLs that a client CA
// signed, read the same as PEM and as DER, revoking what they list.
func FuzzParseCRLs(f *testing.F) {
	ca := newTestCA(f, "fuzz CA")
	cas := []*x509.Certificate{ca.Cert}
	der := newCRL(f, ca, 1, big.NewInt(7), big.NewInt(1<<40))
	f.Add(der)
	f.Add(crlPEM(der, newCRL(f, ca, 2)))
	f.Add(newCRL(f, newTestCA(f, "other"), 1, big.NewInt(7)))
	f.Add([]byte("-----BEGIN X509 CRL-----\n-----END X509 CRL-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseCRLs(data, cas)
		if err != nil {
			return
		}
		var ders [][]byte
		for rest := data; bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN")); {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			ders = append(ders, block.Bytes)
		}
		if len(ders) == 0 {
			ders = [][]byte{data}
		}
		want := revoked{}
		for _, d := range ders {
			crl, err := x509.ParseRevocationList(d)
			if err != nil || crl.CheckSignatureFrom(ca.Cert) != nil {
				t.Fatalf("accepted a CRL that does not check out: %v", err)
			}
			for _, e := range crl.RevokedCertificateEntries {
				want[revokedKey{string(ca.Cert.Raw), e.SerialNumber.String()}] = true
			}
			if len(ders) == 1 {
				again, err := ParseCRLs(crlPEM(d), cas)
				if err != nil || len(again) != len(r) {
					t.Fatalf("as PEM: %v, %d revoked, want %d", err, len(again), len(r))
				}
			}
		}
		if len(want) != len(r) {
			t.Fatalf("revoked %d, want %d", len(r), len(want))
		}
		for k := range want {
			if !r[k] {
				t.Fatalf("serial %s not revoked", k.serial)
			}
		}
	})
}
