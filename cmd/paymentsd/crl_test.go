package main

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
)

// writeCRL writes, by a rename, a PEM CRL of s's CA revoking the client
// certificates named.
func (s *certSet) writeCRL(t *testing.T, path string, number int64, clients ...string) {
	t.Helper()
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour)}
	for _, name := range clients {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: s.clientCert(t, name).SerialNumber, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, s.ca.Cert, s.ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(path+".new", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644))
	must(t, os.Rename(path+".new", path))
}

// clientCert is the certificate of s's client name.
func (s *certSet) clientCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(s.client(t, name).cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// A certificate in --tls-client-crl is refused at the handshake; one
// added to it while its connection is open is refused at its next call,
// on gRPC and HTTP alike.
func TestMTLS_RevokedClientCert_RefusedAtHandshakeAndNextCall(t *testing.T) {
	certs := newCertSet(t, "paymentsd CRL CA")
	crl := certs.dir + "/clients.crl"
	certs.writeCRL(t, crl, 1, "client-b")
	d := startTLSDaemon(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--tls-client-crl", crl, "--principal-from", "cert")

	for what, addr := range map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr} {
		if err := handshakeRefusal(t, addr, certs.clientTLS(t, "client-b"), "h2"); err == nil || !strings.Contains(err.Error(), "tls: bad certificate") {
			t.Errorf("%s port, a revoked certificate: %v, want the handshake refused", what, err)
		}
	}
	if _, err := d.grpcClient(t, certs.clientTLS(t, "client-b")).ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC with a revoked certificate: %v, want UNAVAILABLE", err)
	}

	// client-a's connections, open, then its certificate revoked.
	httpClient := httpsClient(t, certs.clientTLS(t, "client-a"))
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); err != nil {
		t.Fatalf("gRPC before: %v", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.baseURL(), ""); a.status != http.StatusOK {
		t.Fatalf("HTTP before: %d %s", a.status, a.body)
	}
	certs.writeCRL(t, crl, 2, "client-b", "client-a")
	d.waitLogText(t, "tls certificate reloaded")
	_, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "is revoked") {
		t.Errorf("gRPC on the open connection after its certificate was revoked: %v, want UNAUTHENTICATED saying why", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.baseURL(), ""); a.status != http.StatusUnauthorized {
		t.Errorf("HTTP on the open connection after its certificate was revoked: %d %s, want 401", a.status, a.body)
	}

	// A CRL that no client CA signed is refused; the last good one stays.
	stranger := newCertSet(t, "stranger CA")
	stranger.clients["client-a"] = certs.clients["client-a"]
	stranger.writeCRL(t, crl, 3)
	d.waitLogText(t, "tls files not reloaded: the previous certificate stays in use", "not signed by a client CA")
	if _, err := d.client.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("after a refused CRL: %v, want client-a still revoked", err)
	}
}
