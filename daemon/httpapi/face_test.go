package httpapi_test

import (
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
)

func TestFace_ServesUntilShutdown(t *testing.T) {
	if _, err := httpapi.Listen("256.0.0.1:1"); err == nil {
		t.Error("Listen takes a bad address")
	}
	f, err := httpapi.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Shutdown(time.Second) // before Start: nothing to stop
	srv := grpc.NewServer(grpc.Creds(httpapi.ServerCredentials(nil)))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, &fakeService{})
	defer srv.Stop()
	serve := f.Start(srv, auth.NewAuthenticator(auth.FromBearer, auth.Dev()), nil, slog.New(slog.DiscardHandler))
	served := make(chan error, 1)
	go func() { served <- serve() }()

	resp, _ := do(t, "GET", "http://"+f.Addr().String()+"/v1/payment_intents/pi_x", "", "", "Authorization", "Bearer tok")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a call through the Face: status %d, want 404 from the gRPC server", resp.StatusCode)
	}
	f.Shutdown(time.Second)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve after Shutdown: %v", err)
	}
}

func TestFace_CloseUnstarted(t *testing.T) {
	f, err := httpapi.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := f.Addr().String()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := httpapi.Listen(addr) // free again
	if err != nil {
		t.Fatalf("the address is still held: %v", err)
	}
	g.Close()
}
