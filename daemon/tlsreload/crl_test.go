package tlsreload

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
)

// newCRL returns the DER of a CRL of ca revoking serials, in force from
// an hour ago for an hour.
func newCRL(t testing.TB, ca *devcerts.CA, number int64, serials ...*big.Int) []byte {
	t.Helper()
	return crlAt(t, ca, number, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), serials...)
}

// crlAt returns the DER of a CRL of ca revoking serials, issued at this
// and to be replaced at next.
func crlAt(t testing.TB, ca *devcerts.CA, number int64, this, next time.Time, serials ...*big.Int) []byte {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: this, NextUpdate: next}
	for _, s := range serials {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// tbsCertList is a CRL's signed part (RFC 5280, 5.1), as far as resign
// changes it; crypto/x509 writes none without nextUpdate or a number.
type tbsCertList struct {
	Version    int `asn1:"optional,default:0"`
	Signature  pkix.AlgorithmIdentifier
	Issuer     asn1.RawValue
	ThisUpdate time.Time
	NextUpdate time.Time        `asn1:"optional"`
	Revoked    []asn1.RawValue  `asn1:"optional"`
	Extensions []pkix.Extension `asn1:"tag:0,optional,explicit"`
}

type certList struct {
	TBS       asn1.RawValue
	Algorithm pkix.AlgorithmIdentifier
	Signature asn1.BitString
}

// resign returns der changed by change and signed again by ca.
func resign(t testing.TB, ca *devcerts.CA, der []byte, change func(*tbsCertList)) []byte {
	t.Helper()
	var cl certList
	var tbs tbsCertList
	if _, err := asn1.Unmarshal(der, &cl); err != nil {
		t.Fatal(err)
	}
	if _, err := asn1.Unmarshal(cl.TBS.FullBytes, &tbs); err != nil {
		t.Fatal(err)
	}
	change(&tbs)
	tbsDER, err := asn1.Marshal(tbs)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(tbsDER)
	sig, err := ca.Key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	out, err := asn1.Marshal(certList{TBS: asn1.RawValue{FullBytes: tbsDER}, Algorithm: cl.Algorithm, Signature: asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// oidCRLNumber is the CRL number extension's.
var oidCRLNumber = asn1.ObjectIdentifier{2, 5, 29, 20}

func withoutNextUpdate(tbs *tbsCertList) { tbs.NextUpdate = time.Time{} }

func withoutNumber(tbs *tbsCertList) {
	tbs.Extensions = slices.DeleteFunc(tbs.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidCRLNumber) })
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
	now := time.Now()
	if r, err := ParseCRLs(newCRL(t, twin, 1, big.NewInt(1)), []*x509.Certificate{a.Cert, twin.Cert}, now, nil); err != nil ||
		r.revoked.has(&x509.Certificate{SerialNumber: big.NewInt(1)}, a.Cert) || !r.revoked.has(&x509.Certificate{SerialNumber: big.NewInt(1)}, twin.Cert) {
		t.Errorf("a CRL of a's namesake: %v, %v; want it to revoke the namesake's serial only", r, err)
	}
	cas := []*x509.Certificate{a.Cert, b.Cert}
	one, two := big.NewInt(1), big.NewInt(2)
	fromA, fromB := newCRL(t, a, 1, one), newCRL(t, b, 1, two)
	leaf := func(serial *big.Int) *x509.Certificate { return &x509.Certificate{SerialNumber: serial} }

	for name, data := range map[string][]byte{"DER": fromA, "PEM": crlPEM(fromA), "PEM of two": crlPEM(fromA, fromB)} {
		c, err := ParseCRLs(data, cas, now, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := c.revoked
		if !r.has(leaf(one), a.Cert) || r.has(leaf(two), a.Cert) || r.has(leaf(one), b.Cert) {
			t.Errorf("%s: revoked %v", name, r)
		}
		if name == "PEM of two" && !r.has(leaf(two), b.Cert) {
			t.Errorf("%s: b's CRL not read", name)
		}
		if got := c.List()[0]; got.Issuer != a.Cert.Subject.String() || got.Number.Int64() != 1 || got.Revoked != 1 {
			t.Errorf("%s: the first CRL is described as %+v", name, got)
		}
	}
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"signed by no client CA": {newCRL(t, stranger, 1, one), "not signed by a client CA"},
		"one of two unsigned":    {crlPEM(fromA, newCRL(t, stranger, 1, one)), "CRL 2: not signed by a client CA"},
		"two of one CA":          {crlPEM(fromA, newCRL(t, a, 2)), `CRL 2: a second CRL of "a"`},
		"a certificate":          {a.CertPEM, `type "CERTIFICATE", want X509 CRL`},
		"empty":                  {nil, "no CRL"},
		"garbage":                {[]byte("not a CRL"), "CRL 1:"},
		"broken PEM":             {[]byte("-----BEGIN X509 CRL-----\nabc"), "does not decode"},
	} {
		if _, err := ParseCRLs(c.data, cas, now, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// A CRL is taken only while it is in force, and never older than the one
// loaded before it.
func TestParseCRLs_RefusesOutOfForceAndRollback(t *testing.T) {
	a, b := newTestCA(t, "a"), newTestCA(t, "b")
	cas := []*x509.Certificate{a.Cert, b.Cert}
	now := time.Now()
	five := newCRL(t, a, 5, big.NewInt(9))
	prev, err := ParseCRLs(crlPEM(five, newCRL(t, b, 1)), cas, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		der  []byte
		want string // "" when taken
	}{
		{"expired a day ago", crlAt(t, a, 6, now.Add(-48*time.Hour), now.Add(-24*time.Hour)), "expired at " + stamp(now.Add(-24*time.Hour))},
		{"at its nextUpdate", crlAt(t, a, 6, now.Add(-time.Hour), now), "expired at"},
		{"issued a day ahead", crlAt(t, a, 6, now.Add(24*time.Hour), now.Add(48*time.Hour)), "not valid until"},
		{"issued beyond the skew", crlAt(t, a, 6, now.Add(Skew+time.Minute), now.Add(time.Hour)), "not valid until"},
		{"issued within the skew", crlAt(t, a, 6, now.Add(Skew-time.Minute), now.Add(time.Hour)), ""},
		{"no nextUpdate", resign(t, a, crlAt(t, a, 6, now.Add(-time.Hour), now.Add(time.Hour)), withoutNextUpdate), "no nextUpdate"},
		{"no CRL number", resign(t, a, newCRL(t, a, 6), withoutNumber), "no CRL number"},
		{"a lower number", newCRL(t, a, 4), "CRL number 4 is below 5"},
		{"the same number, other content", newCRL(t, a, 5), "CRL number 5 is that of the CRL loaded before, with other content"},
		{"the same CRL again", five, ""},
		{"a higher number", newCRL(t, a, 6), ""},
	} {
		_, err := ParseCRLs(c.der, cas, now, prev)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A file without a's CRL, then an older CRL of a: still a rollback.
	without, err := ParseCRLs(newCRL(t, b, 2), cas, now, prev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCRLs(newCRL(t, a, 3), cas, now, without); err == nil || !strings.Contains(err.Error(), "below 5") {
		t.Errorf("a's CRL 3 after a file without a's: %v, want a rollback refused", err)
	}
}

// Once a CRL is past its nextUpdate, every chain is refused, revoked or
// not, until another is loaded.
func TestCRLs_CheckFailsClosedPastNextUpdate(t *testing.T) {
	a := newTestCA(t, "a")
	now := time.Now()
	c, err := ParseCRLs(crlAt(t, a, 1, now.Add(-time.Hour), now.Add(time.Hour), big.NewInt(9)), []*x509.Certificate{a.Cert}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok, gone := []*x509.Certificate{{SerialNumber: big.NewInt(8)}, a.Cert}, []*x509.Certificate{{SerialNumber: big.NewInt(9)}, a.Cert}
	if err := c.check(ok, now); err != nil {
		t.Errorf("an unrevoked chain: %v", err)
	}
	if err := c.check(gone, now); err == nil || !strings.Contains(err.Error(), "is revoked") {
		t.Errorf("a revoked chain: %v", err)
	}
	later := now.Add(time.Hour)
	for _, chain := range [][]*x509.Certificate{ok, gone} {
		if err := c.check(chain, later); err == nil || !strings.Contains(err.Error(), "no client certificate is admitted") {
			t.Errorf("at the nextUpdate, serial %s: %v, want it refused", chain[0].SerialNumber, err)
		}
	}
	var none *CRLs
	if err := none.check(gone, later); err != nil || none.expired(later) != nil {
		t.Errorf("without CRLs: %v", err)
	}
}

// FuzzParseCRLs wants what ParseCRLs accepts to be CRLs that a client CA
// signed, in force at the time given, numbered no lower than the CRL in
// force, one per CA, read the same as PEM and as DER, and revoking what
// they list. The seeds are real CRLs: valid, expired, not yet valid,
// older and renumbered.
func FuzzParseCRLs(f *testing.F) {
	ca := newTestCA(f, "fuzz CA")
	cas := []*x509.Certificate{ca.Cert}
	now := time.Now()
	inForce := newCRL(f, ca, 5, big.NewInt(3))
	prev, err := ParseCRLs(inForce, cas, now, nil)
	if err != nil {
		f.Fatal(err)
	}
	der := newCRL(f, ca, 6, big.NewInt(7), big.NewInt(1<<40))
	for _, seed := range [][]byte{
		der, inForce, crlPEM(der), crlPEM(der, newCRL(f, ca, 7)),
		crlAt(f, ca, 6, now.Add(-48*time.Hour), now.Add(-24*time.Hour)),
		crlAt(f, ca, 6, now.Add(24*time.Hour), now.Add(48*time.Hour)),
		newCRL(f, ca, 4), newCRL(f, ca, 5),
		resign(f, ca, newCRL(f, ca, 6), withoutNextUpdate), resign(f, ca, newCRL(f, ca, 6), withoutNumber),
		newCRL(f, newTestCA(f, "other"), 6, big.NewInt(7)),
		[]byte("-----BEGIN X509 CRL-----\n-----END X509 CRL-----\n"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCRLs(data, cas, now, prev)
		if err != nil {
			return
		}
		ders := fuzzDERs(data)
		if len(ders) != 1 {
			t.Fatalf("accepted %d CRLs of one CA", len(ders))
		}
		crl, err := x509.ParseRevocationList(ders[0])
		if err != nil || crl.CheckSignatureFrom(ca.Cert) != nil {
			t.Fatalf("accepted a CRL that does not check out: %v", err)
		}
		if crl.NextUpdate.IsZero() || !now.Before(crl.NextUpdate) || crl.ThisUpdate.After(now.Add(Skew)) {
			t.Fatalf("accepted a CRL out of force: thisUpdate %s, nextUpdate %s, now %s", crl.ThisUpdate, crl.NextUpdate, now)
		}
		if n := crl.Number; n == nil || n.Cmp(big.NewInt(5)) < 0 || n.Cmp(big.NewInt(5)) == 0 && !bytes.Equal(ders[0], inForce) {
			t.Fatalf("accepted CRL number %v over 5 in force", n)
		}
		want := revoked{}
		for _, e := range crl.RevokedCertificateEntries {
			want[revokedKey{string(ca.Cert.Raw), e.SerialNumber.String()}] = true
		}
		if again, err := ParseCRLs(crlPEM(ders[0]), cas, now, prev); err != nil || len(again.revoked) != len(c.revoked) {
			t.Fatalf("as PEM: %v, want it read as %d revoked", err, len(c.revoked))
		}
		if len(want) != len(c.revoked) {
			t.Fatalf("revoked %d, want %d", len(c.revoked), len(want))
		}
		for k := range want {
			if !c.revoked[k] {
				t.Fatalf("serial %s not revoked", k.serial)
			}
		}
	})
}

// fuzzDERs splits data as a reader of CRL files would: PEM blocks, or DER.
func fuzzDERs(data []byte) [][]byte {
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
	return ders
}
