package main

// End-to-end tests of the HTTP face's edges, on the real binary: parameters
// that are not UTF-8, and the Idempotency-Key echoed on every answer.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	embedded "github.com/paymentsd/paymentsd/daemon"
)

// documentParams is each operation of the OpenAPI document, as "METHOD
// template", with the names of its path and query parameters: the routes
// the face serves, as the gateway was generated from the same rules.
func documentParams(t *testing.T) map[string]struct{ path, query []string } {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string }
		}
	}
	if err := json.Unmarshal(embedded.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]struct{ path, query []string }{}
	for tmpl, methods := range doc.Paths {
		for m, op := range methods {
			var p struct{ path, query []string }
			for _, param := range op.Parameters {
				switch param.In {
				case "path":
					p.path = append(p.path, param.Name)
				case "query":
					p.query = append(p.query, param.Name)
				}
			}
			ops[strings.ToUpper(m)+" "+tmpl] = p
		}
	}
	return ops
}

// TestHTTP_NotUTF8Parameters_InvalidArgumentOnEveryRoute: on every
// operation of the document, a path parameter, a query parameter of its
// own and one it does not have, each %ff (a byte that is not UTF-8), are
// answered 400 invalid_argument naming the parameter, as gRPC answers
// INVALID_ARGUMENT, never 500; nothing is stored, and the keys sent stay
// unused. A path that is no route, %ff in it, is still 404 and 405.
func TestHTTP_NotUTF8Parameters_InvalidArgumentOnEveryRoute(t *testing.T) {
	d := start(t, spec{http: true})
	base := d.httpBase
	const token = "not-utf8"
	setup := d.httpCreate(t, token, "setup", seedBody)
	if setup.status != http.StatusCreated {
		t.Fatalf("setup: %d %s", setup.status, setup.body)
	}
	id := setup.intent(t)["id"].(string)
	param := regexp.MustCompile(`\{([^/}]+)\}`)
	type attempt struct{ method, tmpl, url, field, key string }
	var attempts []attempt
	withPath, withQuery := 0, 0
	for op, params := range documentParams(t) {
		method, tmpl, _ := strings.Cut(op, " ")
		valid := base + param.ReplaceAllString(tmpl, id)
		for _, name := range params.path {
			withPath++
			bad := param.ReplaceAllStringFunc(tmpl, func(m string) string {
				if m == "{"+name+"}" {
					return "%ff"
				}
				return id
			})
			attempts = append(attempts, attempt{method, tmpl, base + bad, name, ""})
		}
		for _, name := range params.query {
			withQuery++
			attempts = append(attempts, attempt{method, tmpl, valid + "?" + name + "=%ff", name, ""})
		}
		attempts = append(attempts, attempt{method, tmpl, valid + "?utm_source=a%ffb", "utm_source", ""}, attempt{method, tmpl, valid + "?%ff=1", `\xff`, ""})
	}
	if withPath < 2 || withQuery < 1 {
		t.Fatalf("the document has %d path and %d query parameters: want the get's and cancel's id, and the list's", withPath, withQuery)
	}
	for i, a := range attempts {
		a.key = fmt.Sprint("not-utf8-", i)
		attempts[i] = a
		body := ""
		if a.method == "POST" && a.tmpl == "/v1/payment_intents" {
			body = seedBody
		}
		got := httpCall(t, a.method, a.url, body, withHTTPKey(token, a.key)...)
		p := got.problem(t)
		if got.status != http.StatusBadRequest || p.Status != 400 || p.Error != "invalid_argument" {
			t.Errorf("%s %s: %d %s, want 400 invalid_argument", a.method, a.url, got.status, got.body)
			continue
		}
		if len(p.FieldViolations) != 1 || p.FieldViolations[0].Field != a.field || !strings.Contains(p.FieldViolations[0].Description, "must be UTF-8 text") {
			t.Errorf("%s %s: violations %+v, want one naming %s as not UTF-8", a.method, a.url, p.FieldViolations, a.field)
		}
	}
	intents := d.list(t, token)
	if len(intents) != 1 || intents[0].GetId() != id || intents[0].GetCancelTime() != nil {
		t.Errorf("after the refusals: %v, want the setup's intent alone, not canceled", intents)
	}
	// Each key still runs fresh: its refusal stored nothing under it.
	for _, a := range attempts[:3] {
		if got := d.httpCreate(t, token, a.key, seedBody); got.status != http.StatusCreated || got.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("key %s after its refusal: %d, Idempotent-Replayed %q; want a fresh 201", a.key, got.status, got.header.Get("Idempotent-Replayed"))
		}
	}
	for _, c := range []struct {
		method, path string
		status       int
		code, detail string
	}{
		{"GET", "/v1/nothing/%ff", 404, "route_not_found", "no route for GET /v1/nothing/%ff"},
		{"DELETE", "/v1/payment_intents/%ff", 405, "method_not_allowed", "DELETE is not allowed on /v1/payment_intents/%ff; it takes GET"},
	} {
		got := httpCall(t, c.method, base+c.path, "", bearerHeader(token)...)
		if p := got.problem(t); got.status != c.status || p.Error != c.code || p.Detail != c.detail {
			t.Errorf("%s %s: %d %s, want %d %s %q", c.method, c.path, got.status, got.body, c.status, c.code, c.detail)
		}
	}
}

// TestHTTP_IdempotencyKey_EchoedAsSentOnEveryAnswer: an answer to a
// request with Idempotency-Key carries it back byte for byte, quotes and
// all, whether the answer is fresh, a replay, a mismatch, in flight or an
// error of any layer; an answer to a request without one carries none.
func TestHTTP_IdempotencyKey_EchoedAsSentOnEveryAnswer(t *testing.T) {
	d := start(t, spec{http: true, args: []string{"--in-flight-wait", "0"}})
	base := d.httpBase
	const token = "echo"
	url := d.intentsURL()
	quoted := `"order-\"7\""` // a structured-field string, naming the key order-"7"
	first := httpCall(t, "POST", url, seedBody, withHTTPKey(token, quoted)...)
	if first.status != http.StatusCreated {
		t.Fatalf("create: %d %s", first.status, first.body)
	}
	one := url + "/" + first.intent(t)["id"].(string)
	for _, c := range []struct {
		name, method, url, body string
		headers                 []string
		status                  int
	}{
		{"replay", "POST", url, seedBody, withHTTPKey(token, quoted), 201},
		{"mismatch", "POST", url, strings.Replace(seedBody, "100000000", "7", 1), withHTTPKey(token, quoted), 422},
		{"bare key", "POST", url, seedBody, withHTTPKey(token, "bare key 1"), 201},
		{"no credential", "POST", url, seedBody, []string{"Idempotency-Key", "k-401"}, 401},
		{"key that names no key", "POST", url, seedBody, withHTTPKey(token, `"unterminated`), 400},
		{"key with a comma", "POST", url, seedBody, withHTTPKey(token, "a, b"), 400},
		{"invalid field", "POST", url, strings.Replace(seedBody, "100000000", "0", 1), withHTTPKey(token, "k-400"), 400},
		{"body too large", "POST", url, `{"chain":"` + strings.Repeat("9", 1<<20) + `"}`, withHTTPKey(token, "k-413"), 413},
		{"not JSON", "POST", url, seedBody, append(withHTTPKey(token, "k-415"), "Content-Type", "text/plain"), 415},
		{"cancel", "POST", one + "/cancel", "", withHTTPKey(token, "c-1"), 200},
		{"cancel of no intent", "POST", url + "/pi_000000000000000000000000/cancel", "", withHTTPKey(token, "c-404"), 404},
		{"get", "GET", one, "", withHTTPKey(token, "g-1"), 200},
		{"path not UTF-8", "GET", url + "/%ff", "", withHTTPKey(token, "g-400"), 400},
		{"no route", "GET", base + "/v1/nothing", "", withHTTPKey(token, "r-404"), 404},
		{"method not allowed", "PUT", url, "", withHTTPKey(token, "r-405"), 405},
	} {
		a := httpCall(t, c.method, c.url, c.body, c.headers...)
		sent := sentKey(c.headers)
		if a.status != c.status {
			t.Errorf("%s: %d %.200s, want %d", c.name, a.status, a.body, c.status)
		}
		if got := a.header.Values("Idempotency-Key"); len(got) != 1 || got[0] != sent {
			t.Errorf("%s: Idempotency-Key %q on the answer, want [%q] as sent", c.name, got, sent)
		}
	}
	if got := httpCall(t, "GET", url, "", bearerHeader(token)...); got.header.Values("Idempotency-Key") != nil {
		t.Errorf("an answer to a request without a key carries %q", got.header.Values("Idempotency-Key"))
	}
	two := httpCall(t, "POST", url, seedBody, append(withHTTPKey(token, "two-1"), "Idempotency-Key", `"two-2"`)...)
	if got := two.header.Values("Idempotency-Key"); two.status != http.StatusBadRequest || strings.Join(got, "|") != `two-1|"two-2"` {
		t.Errorf("two key lines: %d, echoed %q; want 400 and both lines as sent", two.status, got)
	}

	// In flight: with every fsync slowed to a second, of two creates of
	// one key sent at once, one is answered 201 and the other 409 at once
	// (--in-flight-wait 0), both with their key.
	slowFsync(t, d, time.Second)
	for round := 0; ; round++ {
		key := fmt.Sprint("slow-", round)
		answers := make(chan httpAnswer, 2)
		for range 2 {
			go func() { answers <- httpCall(t, "POST", url, seedBody, withHTTPKey(token, key)...) }()
		}
		statuses := map[int]bool{}
		for range 2 {
			a := <-answers
			statuses[a.status] = true
			if got := a.header.Values("Idempotency-Key"); len(got) != 1 || got[0] != key {
				t.Errorf("in flight: %d %s, Idempotency-Key %q; want %q", a.status, a.body, got, key)
			}
		}
		if statuses[http.StatusCreated] && statuses[http.StatusConflict] {
			break
		}
		if round == 4 {
			t.Fatalf("five rounds of two creates of one key under 1 s fsyncs, none in flight while the other ran: last %v", statuses)
		}
	}
}

// sentKey is the Idempotency-Key value among headers, name, value pairs.
func sentKey(headers []string) string {
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Idempotency-Key" {
			return headers[i+1]
		}
	}
	return ""
}
