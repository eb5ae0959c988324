package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
)

func issue(t *testing.T, ca *devcerts.CA, o devcerts.Options) *devcerts.Pair {
	t.Helper()
	p, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestCertPrincipal(t *testing.T) {
	ca, err := devcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	spiffe := mustURL(t, "spiffe://example.org/payments")
	for _, tc := range []struct {
		name string
		o    devcerts.Options
		want string // "" for a refusal
	}{
		{"URI SAN", devcerts.Options{Client: true, URIs: []*url.URL{spiffe}, DNSNames: []string{"a.example"}}, "spiffe://example.org/payments"},
		{"first DNS SAN", devcerts.Options{Client: true, DNSNames: []string{"a.example", "b.example"}}, "dns:a.example"},
		{"two URI SANs", devcerts.Options{Client: true, URIs: []*url.URL{spiffe, mustURL(t, "spiffe://example.org/other")}}, ""},
		{"no SAN", devcerts.Options{Client: true, CommonName: "just a name"}, ""},
		{"scheme and host in capitals", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "SPIFFE://Example.ORG/payments")}}, "spiffe://example.org/payments"},
		{"path keeps its case", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/Payments")}}, "spiffe://example.org/Payments"},
		{"DNS SAN in capitals", devcerts.Options{Client: true, DNSNames: []string{"A.Example"}}, "dns:a.example"},
		{"URI that spells a DNS principal", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "dns:a.example")}}, ""},
		{"percent-encoded path", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/a%20b")}}, ""},
		{"percent-encoded letter", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/%61")}}, ""},
		{"query", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/a?b=c")}}, ""},
		{"user", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://u@example.org/a")}}, ""},
		{"wildcard DNS SAN", devcerts.Options{Client: true, DNSNames: []string{"*.example"}}, ""},
		{"DNS SAN with a trailing dot", devcerts.Options{Client: true, DNSNames: []string{"a.example."}}, "dns:a.example"},
		{"DNS SAN that is no host name", devcerts.Options{Client: true, DNSNames: []string{"//victim.example/p"}}, ""},
		{"URI of the scheme dns", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "dns://victim.example/p")}}, ""},
		{"path character net/url escapes", devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/a!")}}, ""},
	} {
		p := issue(t, ca, tc.o)
		got, err := auth.CertPrincipal(p.Cert)
		switch {
		case tc.want == "" && status.Code(err) != codes.Unauthenticated:
			t.Errorf("%s: %q, %v; want UNAUTHENTICATED", tc.name, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		case tc.want != "" && (auth.ValidPrincipal(got) || auth.ValidDevPrincipal(got) || !auth.ValidCertPrincipal(got)):
			t.Errorf("%s: %q could be another kind of principal", tc.name, got)
		}
	}
}

func TestAuthenticate_Sources(t *testing.T) {
	ca, err := devcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert := issue(t, ca, devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/a")}}).Cert
	keys, err := auth.ParseKeys([]byte(auth.KeyLine("alice", "t1")+"\n"), "keys")
	if err != nil {
		t.Fatal(err)
	}
	bearerT1 := []string{"Bearer t1"}
	for _, tc := range []struct {
		source auth.Source
		authz  []string
		cert   *x509.Certificate
		want   string // "" for UNAUTHENTICATED
	}{
		{auth.FromBearer, bearerT1, nil, "alice"},
		{auth.FromBearer, bearerT1, cert, "alice"},
		{auth.FromBearer, nil, cert, ""},
		{auth.FromBearer, []string{"Bearer t2"}, nil, ""},
		{auth.FromCert, nil, cert, "spiffe://example.org/a"},
		{auth.FromCert, bearerT1, cert, "spiffe://example.org/a"}, // the header is not read
		{auth.FromCert, bearerT1, nil, ""},
		{auth.FromEither, nil, cert, "spiffe://example.org/a"},
		{auth.FromEither, bearerT1, cert, "alice"},
		{auth.FromEither, []string{"Bearer t2"}, cert, ""}, // a bad token is no fallback to the certificate
		{auth.FromEither, nil, nil, ""},
	} {
		got, err := auth.NewAuthenticator(tc.source, keys).Authenticate(tc.authz, tc.cert)
		if tc.want == "" {
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s, %q, cert %t: %q, %v; want UNAUTHENTICATED", tc.source, tc.authz, tc.cert != nil, got, err)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("%s, %q, cert %t: %q, %v; want %q", tc.source, tc.authz, tc.cert != nil, got, err, tc.want)
		}
	}
}

func TestSetKeys_RemovedTokenRefusedAtOnce(t *testing.T) {
	k1, _ := auth.ParseKeys([]byte(auth.KeyLine("alice", "t1")), "k1")
	k2, _ := auth.ParseKeys([]byte(auth.KeyLine("bob", "t2")), "k2")
	a := auth.NewAuthenticator(auth.FromBearer, k1)
	if p, err := a.Authenticate([]string{"Bearer t1"}, nil); err != nil || p != "alice" {
		t.Fatalf("t1 before: %q, %v", p, err)
	}
	a.SetKeys(k2)
	if _, err := a.Authenticate([]string{"Bearer t1"}, nil); status.Code(err) != codes.Unauthenticated {
		t.Errorf("t1 after its key was removed: %v, want UNAUTHENTICATED", err)
	}
	if p, err := a.Authenticate([]string{"Bearer t2"}, nil); err != nil || p != "bob" {
		t.Errorf("t2 after: %q, %v", p, err)
	}
}

// principalServer answers each health check with UNKNOWN and records the
// principal the interceptor authenticated.
type principalServer struct {
	healthpb.UnimplementedHealthServer
	seen chan string
}

func (s *principalServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	p, _ := auth.FromContext(ctx)
	s.seen <- p
	return &healthpb.HealthCheckResponse{}, nil
}

// A network client cannot pass a principal of its choosing: the forwarded
// principal header counts only on a Forwarded connection, and over mutual
// TLS the principal is the verified certificate's.
func TestInterceptor_NetworkClientCannotForwardAPrincipal(t *testing.T) {
	ca, err := devcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	server := issue(t, ca, devcerts.Options{DNSNames: []string{"localhost"}})
	client := issue(t, ca, devcerts.Options{Client: true, URIs: []*url.URL{mustURL(t, "spiffe://example.org/a")}})
	serverPair, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientPair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)

	a := auth.NewAuthenticator(auth.FromEither, auth.Dev())
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})),
		grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor(a, "/grpc.health.v1.Health/")))
	ps := &principalServer{seen: make(chan string, 1)}
	healthpb.RegisterHealthServer(srv, ps)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{clientPair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), auth.ForwardedPrincipalHeader, "alice")
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := <-ps.seen; got != "spiffe://example.org/a" {
		t.Errorf("principal %q, want the certificate's spiffe://example.org/a", got)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), auth.ForwardedRefusalHeader, "no")
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("a refusal sent by the client itself was obeyed: %v", err)
	} else {
		<-ps.seen
	}
}

// A connection outlives the handshake that verified its client certificate:
// every request asks the chain check again.
func TestAuthenticateConn_ChainCheckedOnEveryRequest(t *testing.T) {
	ca, err := devcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert := issue(t, ca, devcerts.Options{Client: true, DNSNames: []string{"a.example"}}).Cert
	conn := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert, ca.Cert}}}
	a := auth.NewAuthenticator(auth.FromCert, auth.Dev())
	var refuse error
	var seen []*x509.Certificate
	a.SetChainCheck(func(chain []*x509.Certificate, _ time.Time) error { seen = chain; return refuse })
	if p, err := a.AuthenticateConn(nil, conn); err != nil || p != "dns:a.example" {
		t.Fatalf("trusted chain: %q, %v", p, err)
	}
	if len(seen) != 2 || seen[0] != cert {
		t.Errorf("the check saw %v, want the verified chain", seen)
	}
	refuse = errors.New("its CA is no longer among the client CAs")
	_, err = a.AuthenticateConn([]string{"Bearer t1"}, conn)
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "no longer among the client CAs") {
		t.Errorf("chain no longer trusted: %v, want UNAUTHENTICATED saying why", err)
	}
	// In bearer mode the certificate only opened the connection, and
	// closes it as well.
	b := auth.NewAuthenticator(auth.FromBearer, auth.Dev())
	b.SetChainCheck(func([]*x509.Certificate, time.Time) error { return refuse })
	if _, err := b.AuthenticateConn([]string{"Bearer t1"}, conn); status.Code(err) != codes.Unauthenticated {
		t.Errorf("bearer mode, chain no longer trusted: %v, want UNAUTHENTICATED", err)
	}
	if _, err := b.AuthenticateConn([]string{"Bearer t1"}, nil); err != nil {
		t.Errorf("bearer mode without TLS: %v", err)
	}
}
