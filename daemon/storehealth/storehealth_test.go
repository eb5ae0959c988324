package storehealth_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/daemon/storehealth"
)

// get returns the status code and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A store that fails is reported NOT_SERVING, for every service and over
// HTTP, and SERVING again once it recovers.
func TestWatch_DrainsAndResumes(t *testing.T) {
	h := health.NewServer()
	h.SetServingStatus("payments.v1.PaymentIntentService", healthpb.HealthCheckResponse_SERVING)
	var failing atomic.Bool
	checks := make(chan struct{}, 1)
	check := func(context.Context) error {
		select {
		case checks <- struct{}{}:
		default:
		}
		if failing.Load() {
			return errors.New("disk full")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { storehealth.Watch(ctx, h, check, slog.New(slog.DiscardHandler), time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()
	srv := httptest.NewServer(storehealth.Handler(h))
	defer srv.Close()

	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); status("") != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("still %v, want %v", status(""), want)
			}
		}
	}
	<-checks
	if code, body := get(t, srv.URL); code != http.StatusOK || body != "SERVING\n" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	failing.Store(true)
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	if s := status("payments.v1.PaymentIntentService"); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("the service is %v, want NOT_SERVING", s)
	}
	if code, _ := get(t, srv.URL); code != http.StatusServiceUnavailable {
		t.Errorf("unhealthy: HTTP %d, want 503", code)
	}
	failing.Store(false)
	waitFor(healthpb.HealthCheckResponse_SERVING)
	if code, _ := get(t, srv.URL); code != http.StatusOK {
		t.Errorf("healthy again: HTTP %d, want 200", code)
	}
}
