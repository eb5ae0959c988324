package rawgrpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const checkPath = "/grpc.health.v1.Health/Check"

// serve runs a grpc-go server with the health service on 127.0.0.1:0.
func serve(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func check(t *testing.T, addr string, cfg *tls.Config, service string, extra ...Field) (*Response, error) {
	t.Helper()
	msg, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Call(ctx, addr, cfg, Fields(addr, checkPath, extra...), msg)
}

func wantServing(t *testing.T, r *Response, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var resp healthpb.HealthCheckResponse
	if r.Status != 200 || r.Code != codes.OK || proto.Unmarshal(r.Body, &resp) != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("answer %+v, want 200, OK, SERVING", r)
	}
	if ct, _ := Get(r.Header, "content-type"); ct != "application/grpc" {
		t.Errorf("content-type %q", ct)
	}
}

func TestCall_NormalCall(t *testing.T) {
	addr := serve(t)
	r, err := check(t, addr, nil, "", Field{"x-repeated", "a"}, Field{"x-repeated", "b"})
	wantServing(t, r, err)
}

func TestCall_ErrorStatusAndPercentDecodedMessage(t *testing.T) {
	const want = "nöpe: 100% \"wrong\""
	addr := serve(t, grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.NotFound, want)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Call(ctx, addr, nil, Fields(addr, "/no.Such/Method"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 200 || r.Code != codes.NotFound || r.Message != want || len(r.Body) != 0 {
		t.Errorf("answer %+v, want 200, NOT_FOUND %q and no message", r, want)
	}
	if raw, _ := Get(append(r.Header, r.Trailer...), "grpc-message"); raw == want {
		t.Errorf("grpc-message %q was sent as it is; the test wants one that needs percent-decoding", raw)
	}
}

// A CR LF in a header value never reaches grpc-go's handlers: its HTTP/2
// layer (x/net's Framer) finds the field invalid and resets the stream.
func TestCall_CRLFInValue_StreamResetByHTTP2Layer(t *testing.T) {
	addr := serve(t)
	r, err := check(t, addr, nil, "", Field{"authorization", "Bearer t1\r\n t2"})
	var se http2.StreamError
	if !errors.As(err, &se) || se.Code != http2.ErrCodeProtocol {
		t.Fatalf("answer %+v, error %v; want RST_STREAM PROTOCOL_ERROR", r, err)
	}
	// The connection is fine; only that stream was refused.
	r, err = check(t, addr, nil, "")
	wantServing(t, r, err)
}

func TestCall_TLS(t *testing.T) {
	cert, pool := selfSigned(t)
	addr := serve(t, grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	r, err := check(t, addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, "")
	wantServing(t, r, err)
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "rawgrpc test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// A server that refuses the connection with GOAWAY before the call's
// stream is answered comes back as a GoAwayError with its fields.
func TestCall_GoAwayBeforeStream_GoAwayError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(conn, preface); err != nil {
			return
		}
		fr := http2.NewFramer(conn, conn)
		fr.WriteSettings()
		fr.WriteGoAway(0, http2.ErrCodeEnhanceYourCalm, []byte("calm down"))
		io.Copy(io.Discard, conn) // until the client hangs up
	}()
	addr := lis.Addr().String()
	r, err := check(t, addr, nil, "")
	var ga GoAwayError
	if !errors.As(err, &ga) || ga.LastStreamID != 0 || ga.ErrCode != http2.ErrCodeEnhanceYourCalm || ga.DebugData != "calm down" {
		t.Fatalf("answer %+v, error %v; want a GoAwayError of ENHANCE_YOUR_CALM, stream 0, \"calm down\"", r, err)
	}
}
