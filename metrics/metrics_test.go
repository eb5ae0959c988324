package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/paymentsd/paymentsd/metrics"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// The metrics go on the embedder's registry, labelled as go-grpc-middleware
// labels grpc_server_*; a second set on the same registry is an error, not
// a panic.
func TestNew_RegistersOnTheGivenRegistryWithGRPCLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.WithLiveRecords(func() (float64, error) { return 7, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const method = "/shop.v1.Orders/PlaceOrder"
	m.Claimed(ctx, once.Observation{Operation: method, Outcome: storage.OutcomeFresh})
	m.Finished(ctx, once.Observation{Operation: method, Outcome: storage.OutcomeFresh})
	m.Finished(ctx, once.Observation{Operation: method, Err: errors.New("disk full")})

	got, err := testutil.GatherAndCount(reg, "idempotency_requests_total", "idempotency_store_errors_total", "idempotency_records")
	if err != nil || got != 4 { // fresh and none, one store error, the gauge
		t.Errorf("series gathered = %d, %v; want 4", got, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idempotency_store_errors_total Requests answered UNAVAILABLE or DATA_LOSS because the idempotency store failed.
# TYPE idempotency_store_errors_total counter
idempotency_store_errors_total{grpc_method="PlaceOrder",grpc_service="shop.v1.Orders"} 1
# HELP idempotency_records Idempotency records the store holds, live or expired but not yet swept.
# TYPE idempotency_records gauge
idempotency_records 7
`), "idempotency_store_errors_total", "idempotency_records"); err != nil {
		t.Error(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Error("a second New on the same registry = nil error, want the duplicate refused")
	}
}
