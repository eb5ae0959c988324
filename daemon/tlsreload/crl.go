package tlsreload

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Skew is how far a CRL's thisUpdate may lie ahead of this clock. A CRL
// signed a moment ago by a CA whose clock runs fast is still taken. A
// nextUpdate gets no allowance: a CRL is out of force from that instant.
const Skew = 5 * time.Minute

// CRL describes a certificate revocation list in force.
type CRL struct {
	Issuer     string    // the signing CA's subject
	Number     *big.Int  // its CRL number
	ThisUpdate time.Time // when it was issued
	NextUpdate time.Time // when it stops being in force
	Revoked    int       // how many certificates it lists

	ca  string // the signing CA's certificate, DER
	raw string // the CRL's DER
}

// CRLs are the revocation lists of a --tls-client-crl file: at most one
// per client CA, and the certificates they revoke.
type CRLs struct {
	list    []CRL
	revoked revoked
	// highest holds, for each CA, its CRL of the highest number loaded
	// yet, from this file or an earlier one. A lower one is a rollback.
	highest map[string]CRL
}

// List returns the CRLs, in the file's order.
func (c *CRLs) List() []CRL { return c.list }

// revoked is the client certificates the CRLs list, by issuer and serial.
type revoked map[revokedKey]bool

type revokedKey struct {
	issuer string // the issuing CA's certificate, DER: two CAs of one name stay apart
	serial string // the serial number, in decimal
}

// has reports whether c, issued by issuer, is revoked.
func (r revoked) has(c, issuer *x509.Certificate) bool {
	return r[revokedKey{string(issuer.Raw), c.SerialNumber.String()}]
}

// ParseCRLs reads client certificate revocation lists: PEM with one or
// more "X509 CRL" blocks, or one DER CRL. Each must be signed by one of
// cas, the client CAs, and be valid at now. prev is the CRLs in force,
// nil for none. A CRL's number may not be below the highest its CA had in
// prev or any load before, nor equal to it with other content. Any one
// refused refuses the whole, since the file is replaced as one.
func ParseCRLs(data []byte, cas []*x509.Certificate, now time.Time, prev *CRLs) (*CRLs, error) {
	ders, err := splitCRLs(data)
	if err != nil {
		return nil, err
	}
	c := &CRLs{revoked: revoked{}, highest: map[string]CRL{}}
	if prev != nil {
		for k, v := range prev.highest {
			c.highest[k] = v
		}
	}
	seen := map[string]bool{}
	for i, der := range ders {
		crl, err := c.add(der, cas, now, seen)
		if err != nil {
			return nil, fmt.Errorf("CRL %d: %w", i+1, err)
		}
		c.list = append(c.list, crl)
		c.highest[crl.ca] = crl
	}
	return c, nil
}

// splitCRLs returns the DER of each CRL of data.
func splitCRLs(data []byte) ([][]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("no CRL in it")
	}
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN")) {
		return [][]byte{data}, nil
	}
	var ders [][]byte
	for rest := trimmed; len(bytes.TrimSpace(rest)) > 0; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, errors.New("a PEM block does not decode")
		}
		if block.Type != "X509 CRL" {
			return nil, fmt.Errorf("a PEM block of type %q, want X509 CRL", block.Type)
		}
		ders = append(ders, block.Bytes)
	}
	return ders, nil
}

// add checks the CRL der and adds what it revokes to c. seen holds the
// CAs whose CRL the file listed before.
func (c *CRLs) add(der []byte, cas []*x509.Certificate, now time.Time, seen map[string]bool) (CRL, error) {
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return CRL{}, err
	}
	issuer := signerOf(crl, cas)
	if issuer == nil {
		return CRL{}, errors.New("not signed by a client CA")
	}
	if seen[string(issuer.Raw)] {
		return CRL{}, fmt.Errorf("a second CRL of %q: the file holds one per CA", issuer.Subject.CommonName)
	}
	seen[string(issuer.Raw)] = true
	if err := validAt(crl, now); err != nil {
		return CRL{}, err
	}
	d := CRL{Issuer: issuer.Subject.String(), Number: crl.Number, ThisUpdate: crl.ThisUpdate, NextUpdate: crl.NextUpdate,
		Revoked: len(crl.RevokedCertificateEntries), ca: string(issuer.Raw), raw: string(der)}
	if err := notRolledBack(d, c.highest[d.ca]); err != nil {
		return CRL{}, err
	}
	for _, e := range crl.RevokedCertificateEntries {
		c.revoked[revokedKey{d.ca, serial(e.SerialNumber)}] = true
	}
	return d, nil
}

// validAt refuses a CRL that is not in force at now, or that would never
// stop being in force, or whose rollback could not be told.
func validAt(crl *x509.RevocationList, now time.Time) error {
	switch {
	case crl.NextUpdate.IsZero():
		return errors.New("it has no nextUpdate, so it would stay in force for ever")
	case crl.Number == nil:
		return errors.New("it has no CRL number, so an older one could not be told from it")
	case crl.ThisUpdate.After(now.Add(Skew)):
		return fmt.Errorf("it is not valid until %s (its thisUpdate)", stamp(crl.ThisUpdate))
	case !now.Before(crl.NextUpdate):
		return fmt.Errorf("it expired at %s (its nextUpdate)", stamp(crl.NextUpdate))
	}
	return nil
}

// notRolledBack refuses crl when it is older than last, the same CA's CRL
// of the highest number loaded yet. Two CRLs of one number and other
// content are refused too: a CA numbers each CRL it issues anew.
func notRolledBack(crl, last CRL) error {
	if last.Number == nil {
		return nil
	}
	switch n := crl.Number.Cmp(last.Number); {
	case n < 0:
		return fmt.Errorf("its CRL number %s is below %s, that of the CRL loaded before: a rollback", crl.Number, last.Number)
	case n == 0 && crl.raw != last.raw:
		return fmt.Errorf("its CRL number %s is that of the CRL loaded before, with other content", crl.Number)
	}
	return nil
}

// signerOf returns the CA of cas that signed crl, or nil.
func signerOf(crl *x509.RevocationList, cas []*x509.Certificate) *x509.Certificate {
	for _, ca := range cas {
		if bytes.Equal(ca.RawSubject, crl.RawIssuer) && crl.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

func serial(n *big.Int) string {
	if n == nil {
		return ""
	}
	return n.String()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// expired says why no client certificate is admitted at now: a CRL is past
// its nextUpdate. Whether a certificate was revoked since is then unknown.
func (c *CRLs) expired(now time.Time) error {
	if c == nil {
		return nil
	}
	for _, crl := range c.list {
		if !now.Before(crl.NextUpdate) {
			return fmt.Errorf("the client CRL of %q expired at %s (its nextUpdate): no client certificate is admitted until a valid CRL is loaded",
				crl.Issuer, stamp(crl.NextUpdate))
		}
	}
	return nil
}

// check refuses a verified chain at now: one that holds a revoked
// certificate, or any chain once a CRL is out of force. Without CRLs (c
// nil) it refuses none.
func (c *CRLs) check(chain []*x509.Certificate, now time.Time) error {
	if c == nil {
		return nil
	}
	if err := c.expired(now); err != nil {
		return err
	}
	for i := 0; i+1 < len(chain); i++ {
		if c.revoked.has(chain[i], chain[i+1]) {
			return fmt.Errorf("%+q (serial %s) is revoked by its CA's CRL", chain[i].Subject.CommonName, chain[i].SerialNumber.Text(16))
		}
	}
	return nil
}
