package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/httpapi"
	"github.com/paymentsd/paymentsd/wire"
)

// fakeService records the metadata of each call and answers with headers
// of every kind: the idempotency ones, and others that must not leak.
type fakeService struct {
	paymentsv1.UnimplementedPaymentIntentServiceServer
	mu   sync.Mutex
	seen []metadata.MD
}

func (f *fakeService) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.seen = append(f.seen, md)
	f.mu.Unlock()
	grpc.SetHeader(ctx, metadata.Pairs(wire.ReplayedHeader, "true", wire.ExpiresAtHeader, "2030-01-01T00:00:00Z", "internal-secret", "x"))
	grpc.SetTrailer(ctx, metadata.Pairs("internal-trailer", "y"))
}

func (f *fakeService) CreatePaymentIntent(ctx context.Context, req *paymentsv1.CreatePaymentIntentRequest) (*paymentsv1.CreatePaymentIntentResponse, error) {
	f.record(ctx)
	return &paymentsv1.CreatePaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: "pi_1", Amount: req.Amount, Version: 1, State: paymentsv1.State_STATE_CREATED}}, nil
}

func (f *fakeService) GetPaymentIntent(ctx context.Context, req *paymentsv1.GetPaymentIntentRequest) (*paymentsv1.GetPaymentIntentResponse, error) {
	f.record(ctx)
	return nil, status.Errorf(codes.NotFound, "no payment intent %q", req.Id)
}

func newAPI(t *testing.T) (*httptest.Server, *fakeService) {
	t.Helper()
	f := &fakeService{}
	srv := grpc.NewServer(grpc.Creds(httpapi.ServerCredentials(nil)))
	paymentsv1.RegisterPaymentIntentServiceServer(srv, f)
	conn := httpapi.Dial(srv)
	ts := httptest.NewServer(httpapi.New(conn, auth.NewAuthenticator(auth.FromBearer, auth.Dev())))
	t.Cleanup(func() {
		ts.Close()
		srv.Stop()
		conn.Close()
	})
	return ts, f
}

func do(t *testing.T, method, url, contentType, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestCreate_ForwardsOnlyPrincipalAndKey_AnswersOnlyIdempotencyHeaders(t *testing.T) {
	ts, f := newAPI(t)
	resp, body := do(t, "POST", ts.URL+"/v1/payment_intents", "application/json", `{"amount":"5"}`,
		"Authorization", "Bearer tok", "Idempotency-Key", `"order-\"1\""`, "X-Other", "z", "Grpc-Metadata-Sneaky", "s",
		"Paymentsd-Forwarded-Principal", "alice")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/payment_intents/pi_1" {
		t.Errorf("status %d, Location %q; want 201, /v1/payment_intents/pi_1", resp.StatusCode, resp.Header.Get("Location"))
	}
	if want := `{"id":"pi_1","state":"STATE_CREATED","version":"1",`; !strings.HasPrefix(body, want) {
		t.Errorf("body %s, want the intent itself, compact, starting %s", body, want)
	}
	for h, want := range map[string]string{"Idempotent-Replayed": "true", "Idempotency-Expires-At": "2030-01-01T00:00:00Z"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	for h := range resp.Header {
		if strings.HasPrefix(h, "Grpc-") || strings.Contains(strings.ToLower(h), "internal") {
			t.Errorf("internal metadata leaked as header %s: %v", h, resp.Header[h])
		}
	}
	md := f.seen[0]
	if got := md.Get(wire.KeyHeader); len(got) != 1 || got[0] != `order-"1"` {
		t.Errorf("idempotency-key metadata %q, want the decoded key order-\"1\"", got)
	}
	sum := sha256.Sum256([]byte("tok"))
	if got, want := md.Get(auth.ForwardedPrincipalHeader), "dev:"+hex.EncodeToString(sum[:]); len(got) != 1 || got[0] != want {
		t.Errorf("forwarded principal %q, want [%s], the one the face authenticated, not the header's", got, want)
	}
	if got := md.Get("authorization"); len(got) != 0 {
		t.Errorf("authorization metadata %q forwarded; the face reads it and passes the principal alone", got)
	}
	for k := range md {
		if strings.HasPrefix(k, "grpcgateway-") || k == "sneaky" || k == "x-other" {
			t.Errorf("header forwarded as metadata %s: %v", k, md[k])
		}
	}
}

func TestErrors_AreProblemJSON(t *testing.T) {
	ts, _ := newAPI(t)
	big := `{"chain":"` + strings.Repeat("9", httpapi.MaxBodyBytes) + `"}`
	for _, tc := range []struct {
		name, method, path, ct, body string
		header                       []string
		wantStatus                   int
		wantError                    string
	}{
		{"unknown intent", "GET", "/v1/payment_intents/pi_x", "", "", nil, 404, "not_found"},
		{"form body", "POST", "/v1/payment_intents", "application/x-www-form-urlencoded", `{"amount":"5"}`, nil, 415, "unsupported_media_type"},
		{"body over 1 MiB", "POST", "/v1/payment_intents", "application/json", big, nil, 413, "request_too_large"},
		{"unknown field", "POST", "/v1/payment_intents", "application/json", `{"amount":"5","tip":"1"}`, nil, 400, "invalid_argument"},
		{"trailing garbage", "POST", "/v1/payment_intents", "application/json", `{"amount":"5"} {}`, nil, 400, "invalid_argument"},
		{"unterminated quoted key", "POST", "/v1/payment_intents", "application/json", `{}`, []string{"Idempotency-Key", `"k`}, 400, "idempotency_key_invalid"},
		{"cancel naming two intents", "POST", "/v1/payment_intents/pi_a/cancel", "application/json", `{"id":"pi_b"}`, nil, 400, "invalid_argument"},
		{"cancel naming its intent in the body alone", "POST", "/v1/payment_intents//cancel", "application/json", `{"id":"pi_b"}`, nil, 400, "invalid_argument"},
		{"no route", "GET", "/v2/nothing", "", "", nil, 404, "route_not_found"},
		{"wrong method", "DELETE", "/v1/payment_intents/pi_x", "", "", nil, 405, "method_not_allowed"},
		{"two Content-Type lines", "POST", "/v1/payment_intents", "", `{}`, []string{"Content-Type", "application/json", "Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"key with a comma", "POST", "/v1/payment_intents", "application/json", `{}`, []string{"Idempotency-Key", "a, b"}, 400, "idempotency_key_invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.method, ts.URL+tc.path, tc.ct, tc.body, tc.header...)
			var p struct {
				Type, Title, Detail, Error string
				Status                     int
			}
			if err := json.Unmarshal([]byte(body), &p); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if resp.StatusCode != tc.wantStatus || p.Status != tc.wantStatus || p.Error != tc.wantError {
				t.Errorf("%d %s (status %d), want %d %s\n%s", resp.StatusCode, p.Error, p.Status, tc.wantStatus, tc.wantError, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q, want application/problem+json", ct)
			}
			if p.Type == "" || p.Title == "" || p.Detail == "" {
				t.Errorf("type %q, title %q, detail %q: want all three", p.Type, p.Title, p.Detail)
			}
			if p.Error == "idempotency_key_invalid" && p.Title != "Invalid idempotency key" {
				t.Errorf("title %q, want the one the interceptor's invalid key has", p.Title)
			}
		})
	}
}

func TestOpenAPI_IsServedAndNamesTheContract(t *testing.T) {
	ts, _ := newAPI(t)
	resp, body := do(t, "GET", ts.URL+"/v1/openapi.json", "", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string }
			Responses  map[string]struct {
				Headers map[string]any
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	create := doc.Paths["/v1/payment_intents"]["post"]
	hasKey := false
	for _, p := range create.Parameters {
		hasKey = hasKey || (p.Name == "Idempotency-Key" && p.In == "header")
	}
	if !hasKey {
		t.Errorf("create's parameters %v name no Idempotency-Key header", create.Parameters)
	}
	for _, code := range []string{"201", "400", "401", "409", "413", "415", "422", "503"} {
		if _, ok := create.Responses[code]; !ok {
			t.Errorf("create has no %s response", code)
		}
	}
	for _, h := range []string{"Location", "Idempotent-Replayed", "Idempotency-Expires-At"} {
		if _, ok := create.Responses["201"].Headers[h]; !ok {
			t.Errorf("create's 201 has no %s header", h)
		}
	}
	if _, ok := create.Responses["409"].Headers["Retry-After"]; !ok {
		t.Error("create's 409 has no Retry-After header")
	}
	if _, ok := doc.Paths["/v1/payment_intents/{id}"]["get"].Responses["404"]; !ok {
		t.Error("get has no 404 response")
	}
}

func TestMethodNotAllowed_SaysAllow(t *testing.T) {
	ts, _ := newAPI(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/payment_intents/pi_x", "GET"},
		{"PUT", "/v1/payment_intents", "GET, POST"},
		{"GET", "/v1/payment_intents/pi_x/cancel", "POST"},
		{"POST", "/v1/openapi.json", "GET"},
	} {
		resp, body := do(t, tc.method, ts.URL+tc.path, "", "")
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != tc.allow || !strings.Contains(body, tc.allow) {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405, Allow %q, said in the detail", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body, tc.allow)
		}
	}
	if resp, body := do(t, "POST", ts.URL+"/v1/payment_intents/pi_x", "application/x-www-form-urlencoded", ""); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Errorf("form-typed POST with no body where only GET is routed: %d, Allow %q, %s; want 405, Allow GET, not the GET answered", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
	if resp, _ := do(t, "GET", ts.URL+"/v1/nothing", "", ""); resp.StatusCode != 404 || resp.Header.Get("Allow") != "" {
		t.Errorf("no route: %d, Allow %q; want 404 and no Allow", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestContentType_TwoLinesRefusedNotTheFirstBelieved(t *testing.T) {
	ts, f := newAPI(t)
	for _, cts := range [][]string{{"application/json", "text/plain"}, {"application/json", "application/json"}} {
		resp, body := do(t, "POST", ts.URL+"/v1/payment_intents", "", `{"amount":"5"}`, "Content-Type", cts[0], "Content-Type", cts[1])
		if resp.StatusCode != 415 || !strings.Contains(body, "2 Content-Type header lines") {
			t.Errorf("Content-Type %q: %d %s; want 415 saying there are two lines", cts, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, "POST", ts.URL+"/v1/payment_intents", "application/json, application/json", `{"amount":"5"}`); resp.StatusCode != 415 {
		t.Errorf("two types merged into one line: %d %s, want the same 415", resp.StatusCode, body)
	}
	if len(f.seen) != 0 {
		t.Errorf("%d calls reached the server", len(f.seen))
	}
	if resp, body := do(t, "GET", ts.URL+"/v1/payment_intents/pi_x", "", "", "Content-Type", "a/b", "Content-Type", "c/d"); resp.StatusCode != 404 {
		t.Errorf("a GET with no body and two types: %d %s, want the 404 of the call: with no body the type is not read", resp.StatusCode, body)
	}
}

func TestIdempotencyKey_CommaRefusedInEveryForm(t *testing.T) {
	ts, f := newAPI(t)
	for _, key := range []string{"a,b", "a, b", `"a", "b"`, `"a, b"`, `"a,b"`} {
		resp, body := do(t, "POST", ts.URL+"/v1/payment_intents", "application/json", `{}`, "Idempotency-Key", key)
		if resp.StatusCode != 400 || !strings.Contains(body, `"error":"idempotency_key_invalid"`) || !strings.Contains(body, "comma") {
			t.Errorf("Idempotency-Key %s: %d %s; want 400 idempotency_key_invalid saying why", key, resp.StatusCode, body)
		}
	}
	if len(f.seen) != 0 {
		t.Errorf("%d calls reached the server", len(f.seen))
	}
}

func TestDecodeErrors_NameFieldsAsTheJSONDoes(t *testing.T) {
	ts, _ := newAPI(t)
	for _, tc := range []struct{ body, want string }{
		{`{"amount":"5","expires_in_seconds":"soon"}`, `field \"expires_in_seconds\": want a whole number from -2147483648 to 2147483647`},
		{`{"expiresInSeconds":true}`, `field \"expiresInSeconds\": want a whole number`},
		{`{"amount":5}`, `field \"amount\": want a string of UTF-8 text`},
		{"{\"chain\":\"evm:\xff\"}", `field \"chain\": want a string of UTF-8 text`},
		{`{"amount":"5","tip":"1"}`, `unknown field \"tip\"`},
		{`{"amount":"5","amount":"6"}`, `field \"amount\" is sent twice`},
		{`{"amount":"5"} {}`, `the body is not valid JSON (at byte 16)`},
		{`[1]`, `the body is not a JSON object`},
	} {
		resp, body := do(t, "POST", ts.URL+"/v1/payment_intents", "application/json", tc.body, "Idempotency-Key", "k")
		if resp.StatusCode != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("body %s: %d %s; want 400 saying %s", tc.body, resp.StatusCode, body, tc.want)
		}
		if strings.Contains(body, "proto") || strings.Contains(body, "ExpiresInSeconds") {
			t.Errorf("body %s: %s names protobuf's words", tc.body, body)
		}
	}
}
