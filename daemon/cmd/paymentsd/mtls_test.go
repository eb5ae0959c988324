package main

// Mutual TLS (--tls-client-ca, --principal-from cert or either): each
// client certificate a principal of its own, over gRPC and HTTP alike;
// untrusted clients refused at the handshake; a CA taken out refusing the
// connections it verified.

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/wire"
)

// TestMTLS_CertPrincipals_Isolated: with --principal-from cert, each client
// certificate is a principal of its own, over gRPC and HTTP alike.
func TestMTLS_CertPrincipals_Isolated(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	d := startTLS(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--principal-from", "cert")
	d.waitLine(t, "principals from client certificates", nil, logWait)
	a, b := d.client, d.grpcClient(t, certs.clientTLS(t, "client-b"))

	idA := createdID(t)(a.CreatePaymentIntent(callCtx(t, "", "order-1"), seedRequest("100000000")))
	var header metadata.MD
	respB, err := b.CreatePaymentIntent(callCtx(t, "", "order-1"), seedRequest("100000000"), grpc.Header(&header))
	idB := createdID(t)(respB, err)
	if idA == idB || len(header.Get(wire.ReplayedHeader)) > 0 {
		t.Fatalf("client-a %s, client-b %s (replayed %v): want two fresh intents", idA, idB, header.Get(wire.ReplayedHeader))
	}
	// A token is not read: client-a with one is still client-a.
	if id := createdID(t)(a.CreatePaymentIntent(callCtx(t, "t1", "order-1"), seedRequest("100000000"))); id != idA {
		t.Errorf("client-a with a bearer token: intent %s, want its own %s replayed", id, idA)
	}
	for _, tc := range []struct {
		who    string
		client paymentsv1.PaymentIntentServiceClient
		own    string
		other  string
	}{{"client-a", a, idA, idB}, {"client-b", b, idB, idA}} {
		if _, err := tc.client.GetPaymentIntent(callCtx(t, "", ""), &paymentsv1.GetPaymentIntentRequest{Id: tc.other}); status.Code(err) != codes.NotFound {
			t.Errorf("gRPC: %s gets the other's intent: %v, want NOT_FOUND", tc.who, err)
		}
		if got := listOf(t, tc.client, ""); !slices.Equal(got, []string{tc.own}) {
			t.Errorf("gRPC: %s lists %v, want [%s]", tc.who, got, tc.own)
		}
	}

	// HTTP, with the same certificates.
	for _, tc := range []struct{ who, own, other string }{{"client-a", idA, idB}, {"client-b", idB, idA}} {
		c := httpsClient(t, certs.clientTLS(t, tc.who))
		created := mustHTTPS(t, c, "POST", d.intentsURL(), seedBody, "Idempotency-Key", "order-1")
		if created.status != http.StatusCreated || created.header.Get("Idempotent-Replayed") != "true" || created.intent(t)["id"] != tc.own {
			t.Errorf("HTTP: %s creates with its gRPC key and body: %d replayed %q %s, want 201, its own %s replayed",
				tc.who, created.status, created.header.Get("Idempotent-Replayed"), created.body, tc.own)
		}
		if withToken := mustHTTPS(t, c, "POST", d.intentsURL(), seedBody, withHTTPKey("t1", "order-1")...); withToken.status != http.StatusCreated || withToken.intent(t)["id"] != tc.own {
			t.Errorf("HTTP: %s with a bearer token: %d %s, want its own %s replayed (the token is not read)", tc.who, withToken.status, withToken.body, tc.own)
		}
		if got := mustHTTPS(t, c, "GET", d.intentsURL()+"/"+tc.other, ""); got.status != http.StatusNotFound {
			t.Errorf("HTTP: %s gets the other's intent: %d %s, want 404", tc.who, got.status, got.body)
		}
		if got := mustHTTPS(t, c, "GET", d.intentsURL()+"/"+tc.own, ""); got.status != http.StatusOK {
			t.Errorf("HTTP: %s gets its own intent: %d %s, want 200", tc.who, got.status, got.body)
		}
		if got := listedIDs(t, mustHTTPS(t, c, "GET", d.intentsURL(), "")); !slices.Equal(got, []string{tc.own}) {
			t.Errorf("HTTP: %s lists %v, want [%s]", tc.who, got, tc.own)
		}
	}
	if strings.Contains(d.stderr(), "Bearer") {
		t.Errorf("the log holds a credential:\n%s", d.stderr())
	}
}

// TestMTLS_ClientWithoutTrustedCert_RefusedAtHandshake: with
// --tls-client-ca, a client with no certificate, one from another CA or an
// expired one does not get past the handshake, on gRPC or HTTP; the
// metrics listener asks for none.
func TestMTLS_ClientWithoutTrustedCert_RefusedAtHandshake(t *testing.T) {
	certs := newCertSet(t, "paymentsd test CA")
	other := newCertSet(t, "paymentsd other CA")
	d := startTLS(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--principal-from", "cert",
		"--metrics-listen", "127.0.0.1:0")
	o := devcerts.Client("client-old")
	o.NotBefore, o.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	certs.clients["client-old"] = certs.write(t, "client-old", certs.issue(t, o))

	for _, tc := range []struct {
		name  string
		cfg   *tls.Config
		alert string // the TLS alert the client reads
	}{
		{"no certificate", certs.clientTLS(t, ""), "tls: certificate required"},
		{"certificate from another CA", withCertOf(certs.clientTLS(t, ""), other.clientTLS(t, "client-a")), "tls: unknown certificate authority"},
		{"expired certificate", certs.clientTLS(t, "client-old"), "tls: expired certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The clients fail, with the alert or with the write that
			// raced it ("broken pipe").
			_, err := d.grpcClient(t, tc.cfg).CreatePaymentIntent(callCtx(t, "t1", "refused"), seedRequest("1"))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("gRPC: %v, want UNAVAILABLE", err)
			}
			t.Logf("gRPC client: %v", err)
			if _, err = httpsCall(t, httpsClient(t, tc.cfg), "GET", d.intentsURL(), ""); err == nil {
				t.Error("HTTPS: answered, want a refused handshake")
			}
			t.Logf("HTTPS client: %v", err)
			// The alert says why.
			for what, addr := range map[string]string{"gRPC": d.addr, "HTTP": d.httpAddr} {
				if err := handshakeRefusal(t, addr, tc.cfg, "h2"); err == nil || !strings.Contains(err.Error(), tc.alert) {
					t.Errorf("%s port: %v, want %q", what, err, tc.alert)
				}
			}
		})
	}
	// Scrapers need no certificate.
	if m := scrapeTLS(t, httpsClient(t, certs.clientTLS(t, "")), d.metricsAddr(t)); len(m) == 0 {
		t.Error("metrics without a client certificate: nothing scraped")
	}
	// Nothing was created, and the server still serves a trusted client.
	if got := listOf(t, d.client, ""); len(got) != 0 {
		t.Errorf("refused clients created %v", got)
	}
	createdID(t)(d.client.CreatePaymentIntent(callCtx(t, "", "k"), seedRequest("1")))
}

// TestEither_CertAndBearerPrincipals: with --principal-from either, a call
// without an authorization header is its certificate's principal, and a
// call with one, on the same connection, is its token's: they own
// different intents under the same key and body.
func TestEither_CertAndBearerPrincipals(t *testing.T) {
	for _, keys := range []string{"dev mode", "api keys"} {
		t.Run(keys, func(t *testing.T) {
			certs := newCertSet(t, "paymentsd test CA")
			args := []string{"--tls-client-ca", certs.caFile, "--principal-from", "either"}
			if keys == "api keys" {
				file := filepath.Join(t.TempDir(), "api-keys")
				if err := os.WriteFile(file, []byte(auth.KeyLine("merchant-t1", "t1")+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--api-keys", file)
			}
			d := startTLS(t, certs, "client-a", args...)
			c := d.client // one connection, client-a's certificate

			var certHeader, tokenHeader metadata.MD
			resp, err := c.CreatePaymentIntent(callCtx(t, "", "order-1"), seedRequest("100000000"), grpc.Header(&certHeader))
			byCert := createdID(t)(resp, err)
			resp, err = c.CreatePaymentIntent(callCtx(t, "t1", "order-1"), seedRequest("100000000"), grpc.Header(&tokenHeader))
			byToken := createdID(t)(resp, err)
			if byCert == byToken || len(tokenHeader.Get(wire.ReplayedHeader)) > 0 {
				t.Fatalf("cert %s, token %s (replayed %v): want two fresh intents", byCert, byToken, tokenHeader.Get(wire.ReplayedHeader))
			}
			if got := listOf(t, c, ""); !slices.Equal(got, []string{byCert}) {
				t.Errorf("gRPC list by the certificate: %v, want [%s]", got, byCert)
			}
			if got := listOf(t, c, "t1"); !slices.Equal(got, []string{byToken}) {
				t.Errorf("gRPC list by the token: %v, want [%s]", got, byToken)
			}
			if _, err := c.GetPaymentIntent(callCtx(t, "t1", ""), &paymentsv1.GetPaymentIntentRequest{Id: byCert}); status.Code(err) != codes.NotFound {
				t.Errorf("the token gets the certificate's intent: %v, want NOT_FOUND", err)
			}
			if _, err := c.GetPaymentIntent(callCtx(t, "", ""), &paymentsv1.GetPaymentIntentRequest{Id: byToken}); status.Code(err) != codes.NotFound {
				t.Errorf("the certificate gets the token's intent: %v, want NOT_FOUND", err)
			}

			// The same over HTTP, on one connection.
			h := httpsClient(t, certs.clientTLS(t, "client-a"))
			if a := mustHTTPS(t, h, "POST", d.intentsURL(), seedBody, "Idempotency-Key", "order-1"); a.status != http.StatusCreated || a.intent(t)["id"] != byCert {
				t.Errorf("HTTP, certificate only: %d %s, want the certificate's %s replayed", a.status, a.body, byCert)
			}
			if a := mustHTTPS(t, h, "POST", d.intentsURL(), seedBody, withHTTPKey("t1", "order-1")...); a.status != http.StatusCreated || a.intent(t)["id"] != byToken {
				t.Errorf("HTTP with the token: %d %s, want the token's %s replayed", a.status, a.body, byToken)
			}
			if got := listedIDs(t, mustHTTPS(t, h, "GET", d.intentsURL(), "")); !slices.Equal(got, []string{byCert}) {
				t.Errorf("HTTP list by the certificate: %v, want [%s]", got, byCert)
			}
			if got := listedIDs(t, mustHTTPS(t, h, "GET", d.intentsURL(), "", bearerHeader("t1")...)); !slices.Equal(got, []string{byToken}) {
				t.Errorf("HTTP list by the token: %v, want [%s]", got, byToken)
			}

			if keys == "api keys" {
				// A token sent is the principal: an unknown one is refused,
				// not replaced by the certificate.
				if _, err := c.ListPaymentIntents(callCtx(t, "nope", ""), &paymentsv1.ListPaymentIntentsRequest{}); status.Code(err) != codes.Unauthenticated {
					t.Errorf("gRPC with an unknown token: %v, want UNAUTHENTICATED", err)
				}
				if a := mustHTTPS(t, h, "GET", d.intentsURL(), "", bearerHeader("nope")...); a.status != http.StatusUnauthorized {
					t.Errorf("HTTP with an unknown token: %d %s, want 401", a.status, a.body)
				}
			}
		})
	}
}

// A connection outlives the handshake that verified its client
// certificate: once its CA is taken out of --tls-client-ca, the calls it
// makes next are refused, over gRPC and over HTTP, without a new handshake.
func TestMTLS_CARemoved_OpenConnectionsRefused(t *testing.T) {
	certs := newCertSet(t, "revoked CA")
	d := startTLS(t, certs, "client-a", "--tls-client-ca", certs.caFile, "--principal-from", "cert")
	grpcClient := d.client // one connection, made by startTLS
	httpClient := httpsClient(t, certs.clientTLS(t, "client-a"))
	if _, err := grpcClient.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{}); err != nil {
		t.Fatalf("gRPC before: %v", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.intentsURL(), ""); a.status != http.StatusOK {
		t.Fatalf("HTTP before: %d %s", a.status, a.body)
	}
	other, err := devcerts.NewCA("the only CA now")
	if err != nil {
		t.Fatal(err)
	}
	tmp := certs.caFile + ".new"
	if err := os.WriteFile(tmp, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, certs.caFile); err != nil {
		t.Fatal(err)
	}
	d.waitLine(t, tlsReloaded, nil, logWait)
	_, err = grpcClient.ListPaymentIntents(callCtx(t, "", ""), &paymentsv1.ListPaymentIntentsRequest{})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "no longer among the client CAs") {
		t.Errorf("gRPC on the open connection after its CA was removed: %v, want UNAUTHENTICATED saying why", err)
	}
	if a := mustHTTPS(t, httpClient, "GET", d.intentsURL(), ""); a.status != http.StatusUnauthorized {
		t.Errorf("HTTP on the open connection after its CA was removed: %d %s, want 401", a.status, a.body)
	}
}
