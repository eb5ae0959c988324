package tlsreload

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
)

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
// cas, the client CAs, or the whole is refused. A list that no CA signed
// could revoke nothing it may speak for. It is a mistake to report.
func ParseCRLs(data []byte, cas []*x509.Certificate) (revoked, error) {
	var ders [][]byte
	if trimmed := bytes.TrimSpace(data); bytes.HasPrefix(trimmed, []byte("-----BEGIN")) {
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
	} else {
		ders = [][]byte{data}
	}
	if len(ders) == 0 || len(data) == 0 {
		return nil, errors.New("no CRL in it")
	}
	r := revoked{}
	for i, der := range ders {
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			return nil, fmt.Errorf("CRL %d: %w", i+1, err)
		}
		issuer := signerOf(crl, cas)
		if issuer == nil {
			return nil, fmt.Errorf("CRL %d: not signed by a client CA", i+1)
		}
		for _, e := range crl.RevokedCertificateEntries {
			r[revokedKey{string(issuer.Raw), serial(e.SerialNumber)}] = true
		}
	}
	return r, nil
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

// check refuses a verified chain that holds a revoked certificate.
func (r revoked) check(chain []*x509.Certificate) error {
	for i := 0; i+1 < len(chain); i++ {
		if r.has(chain[i], chain[i+1]) {
			return fmt.Errorf("%+q (serial %s) is revoked by its CA's CRL", chain[i].Subject.CommonName, chain[i].SerialNumber.Text(16))
		}
	}
	return nil
}
