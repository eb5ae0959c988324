package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/interceptor"
	"github.com/paymentsd/paymentsd/wire"
)

// heldService answers a create at once, unless its payer is "held": that
// one runs until release is closed, and closes running when it starts.
type heldService struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
	running, release chan struct{}
}

func (s *heldService) CreatePaymentIntent(ctx context.Context, req *paymentsv1.CreatePaymentIntentRequest) (*paymentsv1.CreatePaymentIntentResponse, error) {
	if req.GetPayer() == "held" {
		close(s.running)
		<-s.release
	}
	return &paymentsv1.CreatePaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: "pi_" + req.GetPayer()}}, nil
}

// A duplicate of a create in flight is told when to retry. Once the
// method has run, its RetryInfo delay is its handler's time, 10ms here,
// which gRPC names as it is. Over HTTP, Retry-After is whole seconds: the
// 409's detail names the same second, not the 10ms, nor 0s. Both faces
// mean one thing: retry no sooner than the delay each carries.
func TestInFlight_HTTPDetailNamesItsRetryAfter(t *testing.T) {
	svc, grpcAddr, httpAddr := startHeldFaces(t)
	create := func(key, payer string) (*http.Response, string) {
		return do(t, "POST", "http://"+httpAddr+"/v1/payment_intents", "application/json", `{"payer":"`+payer+`"}`,
			"Authorization", "Bearer tok", "Idempotency-Key", key)
	}
	if resp, body := create("warm", "warm"); resp.StatusCode != http.StatusCreated { // the method's handler time is now known
		t.Fatalf("a first create: %d %s", resp.StatusCode, body)
	}
	held := make(chan int, 1)
	go func() {
		resp, _ := create("order-1", "held")
		held <- resp.StatusCode
	}()
	select {
	case <-svc.running:
	case code := <-held:
		t.Fatalf("the create to hold answered %d without running", code)
	}
	defer func() {
		close(svc.release)
		if code := <-held; code != http.StatusCreated {
			t.Errorf("the held create: %d", code)
		}
	}()

	resp, body := create("order-1", "held")
	var p struct{ Error, Detail string }
	if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != http.StatusConflict || p.Error != "idempotency_key_in_use" {
		t.Fatalf("a duplicate over HTTP: %d %s (%v); want 409 idempotency_key_in_use", resp.StatusCode, body, err)
	}
	after := resp.Header.Get("Retry-After")
	if want := `a request with Idempotency-Key "order-1" is still in progress; retry after ` + after + "s"; after != "1" || p.Detail != want {
		t.Errorf("409: Retry-After %q, detail %q; want Retry-After 1 and the detail %q", after, p.Detail, want)
	}

	// The same duplicate over gRPC: its RetryInfo, and its message naming it.
	st, delay := duplicateOverGRPC(t, grpcAddr)
	if st.Code() != codes.Aborted || delay <= 0 || delay >= time.Second || !strings.HasSuffix(st.Message(), "retry after "+delay.String()) {
		t.Errorf("a duplicate over gRPC: %v, RetryInfo %v; want ABORTED naming a delay under a second", st, delay)
	}
	if secs := max(1, int64(math.Ceil(delay.Seconds()))); strconv.FormatInt(secs, 10) != after {
		t.Errorf("gRPC's delay %v is Retry-After %d, HTTP's is %s", delay, secs, after)
	}
}

// startHeldFaces serves a heldService behind the auth and idempotency
// interceptors, over gRPC and over the HTTP face, until the test ends. It
// returns the service and the two faces' addresses.
func startHeldFaces(t *testing.T) (svc *heldService, grpcAddr, httpAddr string) {
	t.Helper()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	authn := auth.NewAuthenticator(auth.FromBearer, auth.Dev())
	svc = &heldService{running: make(chan struct{}), release: make(chan struct{})}
	srv := grpc.NewServer(grpc.Creds(httpapi.ServerCredentials(nil)), grpc.ChainUnaryInterceptor(
		auth.UnaryServerInterceptor(authn, "/payments.v1."),
		interceptor.MustUnaryServerInterceptor(db, interceptor.WithScope(auth.Scope))))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	face, err := httpapi.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve := face.Start(srv, authn, nil, slog.New(slog.DiscardHandler))
	go serve()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	t.Cleanup(func() { face.Shutdown(time.Second) })
	return svc, lis.Addr().String(), face.Addr().String()
}

// duplicateOverGRPC sends the held create again, over gRPC to addr, and
// returns its status and the delay of its RetryInfo (zero if none).
func duplicateOverGRPC(t *testing.T, addr string) (*status.Status, time.Duration) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok", wire.KeyHeader, "order-1")
	_, err = paymentsv1.NewPaymentIntentServiceClient(conn).CreatePaymentIntent(ctx, &paymentsv1.CreatePaymentIntentRequest{Payer: "held"})
	st := status.Convert(err)
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	return st, delay
}
