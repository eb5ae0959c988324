package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestE2E_Metrics_CountOutcomes(t *testing.T) {
	d := start(t, spec{metrics: true})
	metricsAddr := d.metricsAddr(t)

	for _, key := range []string{"m-1", "m-2"} {
		if a := d.createSeed("metrics", key, "1"); a.err != nil {
			t.Fatal(a.err)
		}
	}
	for range 3 {
		d.createSeed("metrics", "m-1", "1")
	}
	d.createSeed("metrics", "m-1", "2") // mismatch
	d.createSeed("metrics", "", "1")    // no key: rejected before a claim
	d.list(t, "metrics")                // ignores keys

	got := scrape(t, metricsAddr)
	// Labelled as go-grpc-middleware labels grpc_server_*, so that the two join.
	create := `grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService"`
	list := `grpc_method="ListPaymentIntents",grpc_service="payments.v1.PaymentIntentService"`
	for series, want := range map[string]float64{
		`idempotency_requests_total{` + create + `,outcome="fresh"}`:    2,
		`idempotency_requests_total{` + create + `,outcome="replay"}`:   3,
		`idempotency_requests_total{` + create + `,outcome="mismatch"}`: 1,
		`idempotency_requests_total{` + create + `,outcome="none"}`:     1,
		`idempotency_requests_total{` + list + `,outcome="none"}`:       1,
		`idempotency_handler_seconds_count{` + create + `}`:             2,
		`idempotency_store_seconds_count{` + create + `}`:               6,
		`idempotency_claims_in_flight`:                                  0,
		`idempotency_records_swept_total`:                               0,
		`idempotency_records`:                                           2, // m-1 and m-2
		`grpc_server_handled_total{grpc_code="OK",grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService",grpc_type="unary"}`:                 5,
		`grpc_server_handled_total{grpc_code="FailedPrecondition",grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService",grpc_type="unary"}`: 1,
		`grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="CreatePaymentIntent",grpc_service="payments.v1.PaymentIntentService",grpc_type="unary"}`:    1,
	} {
		v, ok := got[series]
		if !ok || v != want {
			t.Errorf("%s = %v (present %t), want %v", series, v, ok, want)
		}
	}
	if code := d.healthz(t); code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", code)
	}
	if strings.Contains(d.stderr(), "Bearer") || strings.Contains(d.stderr(), "dev:") {
		t.Errorf("the log holds a credential or a principal:\n%s", d.stderr())
	}
}

// TestMetrics_BuildInfo: /metrics names the build as paymentsd version
// does, in one paymentsd_build_info series of value 1.
func TestMetrics_BuildInfo(t *testing.T) {
	d := start(t, spec{metrics: true})
	// "paymentsd v0.4.0 (rev abc1234, go1.26.8)"
	first, _, _ := strings.Cut(paymentsd(t, "", "version").stdout, "\n")
	m := regexp.MustCompile(`^paymentsd (\S+) \(rev (\S+), (\S+)\)$`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("paymentsd version: %q", first)
	}
	want := `paymentsd_build_info{goversion="` + m[3] + `",revision="` + m[2] + `",version="` + m[1] + `"}`
	var found []string
	for series, v := range d.scrape(t) {
		if strings.HasPrefix(series, "paymentsd_build_info") {
			found = append(found, series)
			if series != want || v != 1 {
				t.Errorf("%s = %v, want %s = 1", series, v, want)
			}
		}
	}
	if len(found) != 1 {
		t.Errorf("paymentsd_build_info series: %q, want one, %s", found, want)
	}
}
