// Package storehealth reports a store's health on grpc.health.v1 and over
// HTTP. A load balancer then drains an instance whose store cannot serve.
package storehealth

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Interval is how often paymentsd looks at its store's health, and probes
// a store whose commits failed.
const Interval = time.Second

// Watch reports check's answer on h, every interval until ctx ends. Every
// service and the server as a whole are NOT_SERVING while check fails: a
// damaged data file, failing commits, a database that does not answer.
// paymentsd's check adds a client CRL past its nextUpdate, which admits no
// client. They are SERVING again once it succeeds. Each change is logged
// with check's error, which says what failed.
func Watch(ctx context.Context, h *health.Server, check func(context.Context) error, logger *slog.Logger, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		err := check(ctx)
		if ctx.Err() != nil {
			return
		}
		if (err == nil) != (last == nil) {
			if err != nil {
				logger.Error("unhealthy: reporting NOT_SERVING", "err", err)
				h.Shutdown() // every service NOT_SERVING
			} else {
				logger.Info("healthy again: reporting SERVING")
				h.Resume()
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PodService is the grpc.health.v1 service name of a pod's health.
func PodService(pod string) string { return "paymentsd.pod." + pod }

// SetPods reports each pod's health, nil serving, as the service
// PodService names: a probe of one pod asks for it. The server's own
// status stays SERVING while any pod serves.
func SetPods(h *health.Server, pods map[string]error) {
	for pod, err := range pods {
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		h.SetServingStatus(PodService(pod), st)
	}
}

// Handler serves probes that speak only HTTP. It answers 200 while h
// reports the server SERVING, and 503 otherwise: its store does not serve,
// or it shuts down.
func Handler(h *health.Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := h.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "NOT_SERVING", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "SERVING\n")
	}
}
