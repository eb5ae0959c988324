package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// scrape reads /metrics into a map from `name{labels}` to value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(t, body)
}

// parseMetrics reads the Prometheus text format: each sample's name and
// labels to its value.
func parseMetrics(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// metricsAddr is the address of d's metrics listener, from its log.
func (d *daemon) metricsAddr(t *testing.T) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(d.stderr()))
	for sc.Scan() {
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "metrics listening" {
			return line.Addr
		}
	}
	t.Fatalf("no metrics address logged:\n%s", d.stderr())
	return ""
}

// healthz returns the status code of GET /healthz on d's metrics listener.
func (d *daemon) healthz(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + d.metricsAddr(t) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestE2E_Metrics_CountOutcomes(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--metrics-listen", "127.0.0.1:0")
	metricsAddr := d.metricsAddr(t)

	for _, key := range []string{"m-1", "m-2"} {
		if a := d.create(withCreds("metrics", key), seedRequest("1")); a.err != nil {
			t.Fatal(a.err)
		}
	}
	for range 3 {
		d.create(withCreds("metrics", "m-1"), seedRequest("1"))
	}
	d.create(withCreds("metrics", "m-1"), seedRequest("2")) // mismatch
	d.create(withCreds("metrics", ""), seedRequest("1"))    // no key: rejected before a claim
	d.list(t, "metrics")                                    // ignores keys

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
