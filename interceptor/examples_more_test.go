package interceptor_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log"
	"math/big"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/interceptor/retry"
	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/storage"
)

// With mutual TLS, the caller is the verified client certificate: scope
// its keys by the certificate's subject, so that no other client can
// replay or block them.
func ExampleWithScope_mTLS() {
	mTLSScope := func(ctx context.Context) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return "", errors.New("no peer")
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.VerifiedChains) == 0 {
			return "", errors.New("no verified client certificate") // answered UNAUTHENTICATED
		}
		return "cn:" + info.State.VerifiedChains[0][0].Subject.CommonName, nil
	}
	intercept, err := interceptor.UnaryServerInterceptor(memstore.New(), interceptor.WithScope(mTLSScope))
	if err != nil {
		log.Fatal(err)
	}
	_ = intercept // grpc.NewServer(grpc.Creds(yourMTLSCreds), grpc.UnaryInterceptor(intercept))

	// What the interceptor sees for a call from "billing-worker":
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{clientCert("billing-worker")}}},
	}})
	fmt.Println(mTLSScope(ctx))
	// Output: cn:billing-worker <nil>
}

// clientCert is a self-signed certificate for commonName, standing in for
// one a TLS handshake verified.
func clientCert(commonName string) *x509.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: commonName},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	cert, _ := x509.ParseCertificate(der)
	return cert
}

// The client half: give calls of the named methods a key, keep it across
// retries, and learn it for the logs.
func ExampleUnaryClientInterceptor() {
	srv := grpc.NewServer(grpc.UnaryInterceptor(interceptor.MustUnaryServerInterceptor(memstore.New())))
	testgrpc.RegisterTestServiceServer(srv, &charges{})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	retrying, err := retry.UnaryClientInterceptor(
		retry.WithMethods(testgrpc.TestService_UnaryCall_FullMethodName),
		retry.WithMaxAttempts(5),
	)
	if err != nil {
		log.Fatal(err)
	}
	// First in the chain: outside any other retry interceptor, so that
	// every attempt of a call carries the same key.
	conn, _ := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(retrying))
	defer conn.Close()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer some-token")
	var key string
	resp, err := testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{}, retry.ChosenKey(&key))
	fmt.Println(resp.GetUsername(), err, len(key)) // a UUID: 36 characters

	_, err = retry.UnaryClientInterceptor() // no methods: nothing would be safe to retry
	fmt.Println(err != nil)
	// Output:
	// charge #1 <nil> 36
	// true
}

// memstore keeps records in memory: for tests, and for servers that may
// forget them on restart.
func ExampleMustUnaryServerInterceptor_memstore() {
	store := memstore.New()
	intercept := interceptor.MustUnaryServerInterceptor(store,
		interceptor.WithKeyPolicy(testgrpc.TestService_UnaryCall_FullMethodName, interceptor.KeyRequired))
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_UnaryCall_FullMethodName}
	runs := 0
	handler := func(ctx context.Context, req any) (any, error) {
		runs++
		return &testgrpc.SimpleResponse{Username: fmt.Sprint("run ", runs)}, nil
	}
	for range 3 {
		ctx := metadata.NewIncomingContext(context.Background(),
			metadata.Pairs("authorization", "Bearer t", "idempotency-key", "k-1"))
		resp, _ := intercept(grpc.NewContextWithServerTransportStream(ctx, transport{}), &testgrpc.SimpleRequest{}, info, handler)
		fmt.Println(resp.(*testgrpc.SimpleResponse).Username)
	}
	// Output:
	// run 1
	// run 1
	// run 1
}

// Expired records count as absent at once; the sweeper deletes them, a
// batch at a time, so that the store does not grow without bound.
func ExampleRunSweeper() {
	store := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		storage.RunSweeper(ctx, store, time.Minute, func(deleted int, err error) {
			log.Printf("swept %d expired idempotency records (err %v)", deleted, err)
		})
	}()
	cancel() // at shutdown: RunSweeper returns
	<-done
	fmt.Println("stopped")
	// Output: stopped
}

// Stand-ins for what the examples of docs/embedding.md leave to your
// server: the authentication that refuses unknown bearer tokens, and the
// listener. Those examples are compiled, never run.
var (
	yourAuthInterceptor grpc.UnaryServerInterceptor
	yourListener        net.Listener
)

// With WithStoredBytes and the server codec Codec, a keyed call is
// answered with the bytes its record holds: a response is encoded once,
// and a replay sent as stored. Its body is the code of docs/embedding.md,
// section "Sending the stored bytes"; it is compiled, not run.
func ExampleWithStoredBytes() {
	store := memstore.New() // or a boltstore.DB or pgstore.DB
	srv := grpc.NewServer(
		grpc.ForceServerCodecV2(interceptor.Codec(encoding.GetCodecV2("proto"))),
		grpc.ChainUnaryInterceptor(yourAuthInterceptor,
			interceptor.MustUnaryServerInterceptor(store, interceptor.WithStoredBytes())),
	)
	log.Fatal(srv.Serve(yourListener)) // once your services are registered on srv
}

// Leave a field that differs between retries of one operation, such as a
// trace id, out of the fingerprint; pass the option to
// UnaryServerInterceptor. Its body is the code of docs/idempotency.md,
// section "Fingerprint control".
func ExampleWithFingerprintExclude() {
	interceptor.WithFingerprintExclude("shop.v1.PlaceOrderRequest.trace_id")
}
