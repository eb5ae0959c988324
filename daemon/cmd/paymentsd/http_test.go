package main

// End-to-end tests of the HTTP/JSON API (--http-listen): the real binary,
// curl's view of it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

func TestHTTP_SeedTranscript_CreatedReplayedReused(t *testing.T) {
	d := start(t, spec{http: true})
	url := d.intentsURL()
	hdr := withHTTPKey("merchant-demo", "order-1001")

	first := httpCall(t, "POST", url, seedBody, hdr...)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s, want 201", first.status, first.body)
	}
	intent := first.intent(t)
	id, _ := intent["id"].(string)
	if loc := first.header.Get("Location"); loc != "/v1/payment_intents/"+id || !strings.HasPrefix(id, "pi_") {
		t.Errorf("Location %q for intent %q, want /v1/payment_intents/<id>", loc, id)
	}
	if intent["state"] != "STATE_CREATED" || intent["amount"] != "100000000" || intent["expires_in_seconds"] != nil || intent["expire_time"] == nil {
		t.Errorf("body %s: want the intent itself, snake_case, created", first.body)
	}
	if first.header.Get("Idempotent-Replayed") != "" || first.header.Get("Idempotency-Expires-At") == "" {
		t.Errorf("first answer's headers %v: want Idempotency-Expires-At and no Idempotent-Replayed", first.header)
	}

	second := httpCall(t, "POST", url, seedBody, hdr...)
	if second.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("second: %d, Idempotent-Replayed %q; want 201, true", second.status, second.header.Get("Idempotent-Replayed"))
	}
	if second.header.Get("Location") != first.header.Get("Location") {
		t.Errorf("replay's Location %q, want %q", second.header.Get("Location"), first.header.Get("Location"))
	}
	if !bytes.Equal(second.body, first.body) {
		t.Errorf("replay's body differs:\n got %s\nwant %s", second.body, first.body)
	}

	third := httpCall(t, "POST", url, strings.Replace(seedBody, "100000000", "999000000", 1), hdr...)
	p := third.problem(t)
	if third.status != http.StatusUnprocessableEntity || p.Status != 422 || p.Error != "idempotency_key_reused" {
		t.Errorf("third: %d %s, want 422 idempotency_key_reused", third.status, third.body)
	}
	if want := `Idempotency-Key "order-1001" was already used for a different request (fingerprint `; !strings.HasPrefix(p.Detail, want) {
		t.Errorf("detail %q, want it to start %q", p.Detail, want)
	}
	for h := range third.header {
		if strings.HasPrefix(h, "Grpc-") {
			t.Errorf("gRPC metadata leaked: %s: %v", h, third.header[h])
		}
	}
}

func TestHTTP_ErrorStatuses(t *testing.T) {
	d := start(t, spec{http: true})
	url := d.intentsURL()
	for _, tc := range []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code                     string
		header, headerValue      string
		detail                   string // "" to skip; a detail never speaks gRPC or protobuf
	}{
		{"no credential", "POST", "", seedBody, []string{"Idempotency-Key", "k"}, 401, "unauthenticated", "WWW-Authenticate", `Bearer realm="paymentsd"`, ""},
		{"not Bearer", "GET", "", "", []string{"Authorization", "Basic eDp5"}, 401, "unauthenticated", "WWW-Authenticate", `Bearer realm="paymentsd"`, ""},
		{"unknown intent", "GET", "/pi_000000000000000000000000", "", bearerHeader("t"), 404, "not_found", "", "", ""},
		{"body over 1 MiB", "POST", "", `{"chain":"` + strings.Repeat("9", 1<<20) + `"}`, withHTTPKey("t", "k"), 413, "request_too_large", "", "", ""},
		{"form body, as curl -d sends", "POST", "", seedBody, append(withHTTPKey("t", "k"), "Content-Type", "application/x-www-form-urlencoded"), 415, "unsupported_media_type", "", "", ""},
		{"405 says Allow", "DELETE", "/pi_000000000000000000000000", "", bearerHeader("t"), 405, "method_not_allowed", "Allow", "GET", "it takes GET"},
		{"405 on the collection", "PUT", "", "", bearerHeader("t"), 405, "method_not_allowed", "Allow", "GET, POST", "it takes GET, POST"},
		{"two Content-Type lines", "POST", "", seedBody, append(withHTTPKey("t", "two-types"), "Content-Type", "application/json", "Content-Type", "text/plain"), 415, "unsupported_media_type", "", "", "2 Content-Type header lines"},
		{"two keys merged by a proxy", "POST", "", seedBody, withHTTPKey("t", "k1, k2"), 400, "idempotency_key_invalid", "", "", "comma"},
		{"no key: the header named, not the gRPC method", "POST", "", seedBody, bearerHeader("t"), 400, "idempotency_key_missing", "", "", "requires an Idempotency-Key header"},
		{"a field named as the JSON does", "POST", "", `{"expires_in_seconds":"soon"}`, withHTTPKey("t", "bad-json"), 400, "invalid_argument", "", "", `field "expires_in_seconds": want a whole number`},
		{"unknown field", "POST", "", `{"tip":"1"}`, withHTTPKey("t", "bad-json"), 400, "invalid_argument", "", "", `unknown field "tip"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := httpCall(t, tc.method, url+tc.path, tc.body, tc.headers...)
			p := a.problem(t)
			if a.status != tc.status || p.Status != tc.status || p.Error != tc.code {
				t.Errorf("%d %s, want %d %s", a.status, a.body, tc.status, tc.code)
			}
			if p.Type == "" || p.Title == "" || p.Detail == "" {
				t.Errorf("problem %s: want type, title and detail", a.body)
			}
			if tc.header != "" && a.header.Get(tc.header) != tc.headerValue {
				t.Errorf("%s: %q, want %q", tc.header, a.header.Get(tc.header), tc.headerValue)
			}
			if !strings.Contains(p.Detail, tc.detail) || strings.Contains(p.Detail, "payments.v1") || strings.Contains(p.Detail, "proto:") {
				t.Errorf("detail %q: want it to say %q, and no gRPC method or protobuf words", p.Detail, tc.detail)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q, want application/problem+json", ct)
			}
		})
	}
}

func TestHTTP_ConcurrentDuplicates_OneIntent(t *testing.T) {
	d := start(t, spec{http: true})
	const n = 50
	var wg sync.WaitGroup
	answers := make([]httpAnswer, n)
	ready := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-ready
			answers[i] = d.httpCreate(t, "racer", "same-key", seedBody)
		})
	}
	close(ready)
	wg.Wait()
	var created []byte
	counts := map[int]int{}
	for _, a := range answers {
		counts[a.status]++
		switch a.status {
		case http.StatusCreated:
			if created != nil && !bytes.Equal(a.body, created) {
				t.Errorf("two 201 bodies differ:\n%s\n%s", created, a.body)
			}
			created = a.body
		case http.StatusConflict:
			if p := a.problem(t); p.Error != "idempotency_key_in_use" || a.header.Get("Retry-After") == "" {
				t.Errorf("409 %s, Retry-After %q: want idempotency_key_in_use with Retry-After", a.body, a.header.Get("Retry-After"))
			}
		default:
			t.Errorf("answer %d %s, want 201 or 409", a.status, a.body)
		}
	}
	if got := d.list(t, "racer"); len(got) != 1 {
		t.Errorf("%d intents after %d identical POSTs (answers %v), want 1", len(got), n, counts)
	}
	t.Logf("answers by status: %v", counts)
}

func TestHTTP_ReorderedJSONAndCamelCase_AreTheSameRequest(t *testing.T) {
	d := start(t, spec{http: true})
	url := d.intentsURL()
	hdr := withHTTPKey("merchant-demo", "order-2002")
	first := httpCall(t, "POST", url, seedBody, hdr...)
	reordered := `{ "expiresInSeconds": 900, "amount": "100000000",
	  "merchant": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "payer": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
	  "token": "0x5FbDB2315678afecb367f032d93F642f64180aa3", "chain": "evm:31337" }`
	second := httpCall(t, "POST", url, reordered, withHTTPKey("merchant-demo", `"order-2002"`)...) // and the key as a structured-field string
	if first.status != 201 || second.status != 201 || second.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, second.body) {
		t.Errorf("reordered: %d then %d (replayed %q), bodies\n%s\n%s\nwant 201, then 201 replayed with the same body",
			first.status, second.status, second.header.Get("Idempotent-Replayed"), first.body, second.body)
	}
}

func TestHTTP_GRPCAndHTTP_SameKeySameContent_OneRequest(t *testing.T) {
	d := start(t, spec{http: true})
	url := d.intentsURL()

	// gRPC first, then HTTP.
	var header metadata.MD
	g := d.createSeed("merchant-demo", "cross-1", "100000000")
	if g.err != nil {
		t.Fatal(g.err)
	}
	header = g.header
	h := httpCall(t, "POST", url, seedBody, withHTTPKey("merchant-demo", "cross-1")...)
	id := intentID(g)
	if h.status != 201 || h.header.Get("Idempotent-Replayed") != "true" || h.intent(t)["id"] != id {
		t.Errorf("HTTP after gRPC: %d replayed %q body %s; want 201, replayed, intent %s", h.status, h.header.Get("Idempotent-Replayed"), h.body, id)
	}
	if got := h.header.Get("Idempotency-Expires-At"); got == "" || got != fmt.Sprint(header.Get("idempotency-expires-at")[0]) {
		t.Errorf("HTTP Idempotency-Expires-At %q, gRPC's %q: want the same record's", got, header.Get("idempotency-expires-at"))
	}

	// HTTP first, then gRPC.
	h = httpCall(t, "POST", url, seedBody, withHTTPKey("merchant-demo", "cross-2")...)
	g = d.createSeed("merchant-demo", "cross-2", "100000000")
	if h.status != 201 || g.err != nil || !g.replayed() || intentID(g) != h.intent(t)["id"] {
		t.Errorf("gRPC after HTTP: %v replayed %t, want the HTTP call's intent replayed", g.err, g.replayed())
	}
	if got := d.list(t, "merchant-demo"); len(got) != 2 {
		t.Errorf("%d intents, want 2 (one per key)", len(got))
	}
}

func TestHTTP_GetListCancel(t *testing.T) {
	d := start(t, spec{http: true})
	url := d.intentsURL()
	var ids []string
	for i := range 3 {
		a := httpCall(t, "POST", url, strings.Replace(seedBody, "100000000", fmt.Sprint(i+1), 1), withHTTPKey("lister", fmt.Sprint("k", i))...)
		if a.status != 201 {
			t.Fatalf("create: %d %s", a.status, a.body)
		}
		ids = append(ids, a.intent(t)["id"].(string))
	}

	if a := httpCall(t, "GET", url+"/"+ids[0], "", bearerHeader("lister")...); a.status != 200 || a.intent(t)["id"] != ids[0] {
		t.Errorf("get: %d %s", a.status, a.body)
	}
	if a := httpCall(t, "GET", url+"/"+ids[0], "", bearerHeader("someone-else")...); a.status != 404 {
		t.Errorf("another principal's get: %d %s, want 404", a.status, a.body)
	}

	var page struct {
		PaymentIntents []struct{ ID string } `json:"payment_intents"`
		NextPageToken  string                `json:"next_page_token"`
	}
	var listed []string
	for token := ""; ; {
		a := httpCall(t, "GET", url+"?page_size=2&page_token="+token, "", bearerHeader("lister")...)
		if a.status != 200 {
			t.Fatalf("list: %d %s", a.status, a.body)
		}
		if err := json.Unmarshal(a.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, pi := range page.PaymentIntents {
			listed = append(listed, pi.ID)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if strings.Join(listed, ",") != strings.Join(ids, ",") {
		t.Errorf("listed %v, want %v", listed, ids)
	}

	cancel := httpCall(t, "POST", url+"/"+ids[1]+"/cancel", "", withHTTPKey("lister", "cancel-1")...)
	if cancel.status != 200 || cancel.intent(t)["state"] != "STATE_CANCELED" || cancel.intent(t)["cancellation_reason"] != "CANCELLATION_REASON_REQUESTED" {
		t.Errorf("cancel: %d %s, want 200 and the canceled intent", cancel.status, cancel.body)
	}
	again := httpCall(t, "POST", url+"/"+ids[1]+"/cancel", "{}", withHTTPKey("lister", "cancel-1")...)
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("cancel again with the key: %d replayed %q, want 200 replayed", again.status, again.header.Get("Idempotent-Replayed"))
	}
}

func TestHTTP_OpenAPIServed(t *testing.T) {
	d := start(t, spec{http: true})
	base := d.httpBase
	a := httpCall(t, "GET", base+"/v1/openapi.json", "")
	var doc struct {
		Swagger string
		Paths   map[string]any
	}
	if err := json.Unmarshal(a.body, &doc); a.status != 200 || err != nil || doc.Swagger != "2.0" || len(doc.Paths) != 3 {
		t.Errorf("openapi.json: %d, %v, %d paths; want 200, a Swagger 2.0 document with 3 paths", a.status, err, len(doc.Paths))
	}
}

// TestHTTP_SIGTERM_FinishesCallsInProgress sends SIGTERM while an HTTP
// create waits on a slowed fsync: it is answered 201, then both listeners
// close and paymentsd exits 0.
func TestHTTP_SIGTERM_FinishesCallsInProgress(t *testing.T) {
	d := start(t, spec{http: true})
	base := d.httpBase
	slowFsync(t, d, 700*time.Millisecond)
	answered := make(chan httpAnswer, 1)
	go func() {
		answered <- d.httpCreate(t, "t", "in-progress", seedBody)
	}()
	time.Sleep(300 * time.Millisecond) // the create waits on its fsync
	if err := d.stop(t); err != nil {
		t.Fatalf("exit: %v\n%s", err, d.stderr())
	}
	select {
	case a := <-answered:
		if a.status != http.StatusCreated {
			t.Errorf("the create in progress at SIGTERM: %d %s, want 201", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Error("the create in progress at SIGTERM got no answer")
	}
	if !strings.Contains(d.stderr(), `"msg":"closed"`) {
		t.Errorf("no clean close:\n%s", d.stderr())
	}
	if _, err := http.Get(base + "/v1/openapi.json"); err == nil {
		t.Error("the HTTP listener still answers after exit")
	}
}
