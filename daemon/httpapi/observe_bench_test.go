package httpapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkObserved measures what Observed wraps around the API: the bare
// handler, the log line (with its request id and route), and the line and
// the metrics, as paymentsd runs with tracing off.
// The handler answers 201 at once, so only the wrapping is measured. The
// log goes to io.Discard in paymentsd's JSON format: its write to stderr
// is the same syscall with or without any of it.
func BenchmarkObserved(b *testing.B) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", api},
		{"log line", Observed(api, logger, Observe{})},
		{"log line and metrics", Observed(api, logger, Observe{Metrics: metrics})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest("POST", "/v1/payment_intents", nil)
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}
