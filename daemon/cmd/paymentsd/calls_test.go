package main

// What the tests send and read: the seed's request over gRPC and HTTP,
// credentials, answers, errors, metrics and health.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/wire"
)

// ---- gRPC calls ----

// seedRequest is the body of the seed's demo.
func seedRequest(amount string) *paymentsv1.CreatePaymentIntentRequest {
	return &paymentsv1.CreatePaymentIntentRequest{
		Chain:            "evm:31337",
		Token:            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		Merchant:         "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:           amount,
		ExpiresInSeconds: 900,
	}
}

// withCreds is a context whose outgoing metadata carries token as a bearer
// credential and key as the idempotency key (each left out when "").
func withCreds(token, key string) context.Context {
	kv := []string{}
	if token != "" {
		kv = append(kv, "authorization", "Bearer "+token)
	}
	if key != "" {
		kv = append(kv, wire.KeyHeader, key)
	}
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
}

// answer is one call's outcome with its metadata.
type answer struct {
	resp   proto.Message
	err    error
	header metadata.MD
}

// replayed reports whether the answer carried the replayed header.
func (a answer) replayed() bool {
	return fmt.Sprint(a.header.Get(wire.ReplayedHeader)) == "[true]"
}

// deterministic is m's deterministic protobuf encoding.
func deterministic(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reason is the ErrorInfo reason of err's status, "" if it has none.
func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

// devPrincipal is the principal dev mode gives token.
func devPrincipal(token string) string { return "dev:" + sha256Hex(token) }

// sha256Hex is the hex SHA-256 of s.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// ---- HTTP calls ----

// seedBody is the seed's curl body.
const seedBody = `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3",` +
	`"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",` +
	`"merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",` +
	`"amount":"100000000","expires_in_seconds":900}`

// httpAnswer is one HTTP exchange's answer.
type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

// problem decodes an application/problem+json body.
func (a httpAnswer) problem(t *testing.T) problemBody {
	t.Helper()
	var p problemBody
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json; body %s", ct, a.body)
	}
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", a.body, err)
	}
	return p
}

// problemBody is an application/problem+json body.
type problemBody struct {
	Type, Title, Detail, Error string
	Status                     int
	FieldViolations            []struct{ Field, Description string } `json:"field_violations"`
}

// intent decodes a body that is one payment intent.
func (a httpAnswer) intent(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
	return m
}

// httpCall sends one request; headers are name, value pairs. A body is sent
// as application/json unless the headers name another Content-Type.
func httpCall(t *testing.T, method, url, body string, headers ...string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	typed := false // the first Content-Type given replaces the default; a second is a second line
	for i := 0; i < len(headers); i += 2 {
		if http.CanonicalHeaderKey(headers[i]) == "Content-Type" && !typed {
			req.Header.Set(headers[i], headers[i+1])
			typed = true
			continue
		}
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	observe(method, url, resp.StatusCode)
	return httpAnswer{resp.StatusCode, resp.Header, b}
}

// bearer is the Authorization header, as httpCall's name, value pair, for
// token.
func bearerHeader(token string) []string { return []string{"Authorization", "Bearer " + token} }

// withHTTPKey is bearerHeader(token) with key as the Idempotency-Key header.
func withHTTPKey(token, key string) []string {
	return append(bearerHeader(token), "Idempotency-Key", key)
}

// ---- Metrics and health ----

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

// healthStatus asks d's grpc.health.v1 for the server's status.
func healthStatus(t *testing.T, d *daemon) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	return serviceHealth(t, d, "")
}

// serviceHealth asks d's grpc.health.v1 for a service's status.
func serviceHealth(t *testing.T, d *daemon, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn := d.newConn(t, nil) // a connection of its own, as a prober's
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return h.Status
}

// waitHealth waits up to a minute for d to report want.
func waitHealth(t *testing.T, d *daemon, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got := healthStatus(t, d)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %v after a minute, want %v:\n%s", got, want, d.stderr())
		}
	}
}

// ---- The log's rpc lines ----

const createMethod = paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName

// rpcLine is one "rpc" line of paymentsd's log.
type rpcLine struct {
	Msg, Method, Code, Idempotency, Err string
	Attempt                             uint64
}

// createLines returns the rpc lines of CreatePaymentIntent d has logged so
// far.
func createLines(d *daemon) []rpcLine {
	var lines []rpcLine
	for _, l := range d.lines("rpc") {
		var r rpcLine
		if l["method"] == createMethod && l.decode(&r) == nil {
			lines = append(lines, r)
		}
	}
	return lines
}

// waitCreateLines waits until d has logged n CreatePaymentIntent lines: a
// line is written before its answer is sent, but reaches d.stderr() through
// a pipe.
func waitCreateLines(t *testing.T, d *daemon, n int) []rpcLine {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := createLines(d)
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d CreatePaymentIntent log lines, want %d:\n%s", len(lines), n, d.stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// intentID is the id of the intent a create answered with.
func intentID(a answer) string {
	return a.resp.(*paymentsv1.CreatePaymentIntentResponse).PaymentIntent.Id
}

func ids(intents []*paymentsv1.PaymentIntent) []string {
	var s []string
	for _, pi := range intents {
		s = append(s, pi.Id)
	}
	slices.Sort(s)
	return s
}
