package main

// The OpenAPI document against the real binary's answers: every status
// that httpCall sees, in any test of the package, must be declared for its
// operation, so that a generated client is never surprised by one.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	embedded "github.com/paymentsd/paymentsd/daemon"
)

// observed is every (operation, status) httpCall has seen, as
// "POST /v1/payment_intents/{id}/cancel 404".
var observed struct {
	sync.Mutex
	pairs map[string]bool
}

// operation is one operation of the document: its method, path template
// and the statuses it declares.
type operation struct {
	method, template string
	path             *regexp.Regexp
	declared         map[string]bool
}

var operations = sync.OnceValue(func() []operation {
	var doc struct {
		Paths map[string]map[string]struct{ Responses map[string]any }
	}
	if err := json.Unmarshal(embedded.OpenAPI, &doc); err != nil {
		panic(err)
	}
	var ops []operation
	for tmpl, methods := range doc.Paths {
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[^/]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), "[^/]+") + "$")
		for m, op := range methods {
			declared := map[string]bool{}
			for code := range op.Responses {
				declared[code] = true
			}
			ops = append(ops, operation{strings.ToUpper(m), tmpl, re, declared})
		}
	}
	return ops
})

// observe notes an answer to method on rawURL; one to no operation of the
// document (a route or method it does not have) is left out.
func observe(method, rawURL string, status int) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	for _, op := range operations() {
		if op.method != method || !op.path.MatchString(u.Path) {
			continue
		}
		observed.Lock()
		if observed.pairs == nil {
			observed.pairs = map[string]bool{}
		}
		observed.pairs[fmt.Sprintf("%s %s %d", method, op.template, status)] = true
		observed.Unlock()
	}
}

// undeclared lists the observed pairs whose status the document does not
// declare for their operation.
func undeclared() []string {
	observed.Lock()
	defer observed.Unlock()
	var missing []string
	for pair := range observed.pairs {
		f := strings.Fields(pair)
		for _, op := range operations() {
			if op.method == f[0] && op.template == f[1] && !op.declared[f[2]] {
				missing = append(missing, pair)
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// TestHTTP_OpenAPI_DeclaresTheStatusesServed provokes, on the real
// binary, each status it can of each operation, then checks those and
// every other answer seen so far against the document. TestMain checks
// again after every test, for the answers of the tests run after this one.
func TestHTTP_OpenAPI_DeclaresTheStatusesServed(t *testing.T) {
	d := start(t, spec{http: true})
	url := d.intentsURL()
	a := httpCall(t, "POST", url, seedBody, withHTTPKey("doc", "k1")...)
	if a.status != http.StatusCreated {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	one := url + "/" + a.intent(t)["id"].(string)
	other := httpCall(t, "POST", url, seedBody, withHTTPKey("doc", "k2")...).intent(t)["id"].(string)
	big := `{"chain":"` + strings.Repeat("9", 1<<20) + `"}`
	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	badKey := withHTTPKey("doc", `"unterminated`)
	for _, c := range []struct {
		method, url, body string
		headers           []string
		status            int
	}{
		{"POST", url, seedBody, []string{"Idempotency-Key", "k"}, 401},
		{"POST", url, seedBody, bearerHeader("doc"), 400},
		{"POST", url, seedBody, badKey, 400},
		{"POST", url, strings.Replace(seedBody, "100000000", "0", 1), withHTTPKey("doc", "k3"), 400},
		{"POST", url, big, withHTTPKey("doc", "k4"), 413},
		{"POST", url, seedBody, append(withHTTPKey("doc", "k5"), form...), 415},
		{"POST", url, strings.Replace(seedBody, "100000000", "7", 1), withHTTPKey("doc", "k1"), 422},
		{"GET", url, "", nil, 401},
		{"GET", url + "?page_size=many", "", bearerHeader("doc"), 400},
		{"GET", url, "", bearerHeader("doc"), 200},
		{"GET", one, "", nil, 401},
		{"GET", one, "", badKey, 400},
		{"GET", url + "/pi_000000000000000000000000", "", bearerHeader("doc"), 404},
		{"POST", one + "/cancel", "", nil, 401},
		{"POST", one + "/cancel", "", badKey, 400},
		{"POST", url + "/pi_000000000000000000000000/cancel", "", bearerHeader("doc"), 404},
		{"POST", one + "/cancel", big, bearerHeader("doc"), 413},
		{"POST", one + "/cancel", "{}", append(bearerHeader("doc"), form...), 415},
		{"POST", one + "/cancel", "", withHTTPKey("doc", "c1"), 200},
		{"POST", url + "/" + other + "/cancel", "", withHTTPKey("doc", "c1"), 422},
	} {
		if a := httpCall(t, c.method, c.url, c.body, c.headers...); a.status != c.status {
			t.Errorf("%s %s: %d %.200s, want %d", c.method, c.url, a.status, a.body, c.status)
		}
	}
	observed.Lock()
	seen := observed.pairs["POST /v1/payment_intents/{id}/cancel 422"]
	observed.Unlock()
	if !seen {
		t.Fatalf("observed %v: the cancel's 422 is not among them", observed.pairs)
	}
	if missing := undeclared(); len(missing) > 0 {
		t.Errorf("answers the OpenAPI document does not declare for their operation: %v", missing)
	}
}

// TestHTTP_OpenAPI_VersionIsTheBinarys: the document the real binary
// serves names the release its version subcommand prints, and the license.
func TestHTTP_OpenAPI_VersionIsTheBinarys(t *testing.T) {
	d := start(t, spec{http: true})
	base := d.httpBase
	a := httpCall(t, "GET", base+"/v1/openapi.json", "")
	var doc struct {
		Info struct {
			Version string
			License struct{ Name, URL string }
		}
	}
	if err := json.Unmarshal(a.body, &doc); a.status != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/openapi.json: %d, %v", a.status, err)
	}
	first, _, _ := strings.Cut(paymentsd(t, "", "--version").stdout, "\n")
	m := versionLine.FindStringSubmatch(first)
	if m == nil || doc.Info.Version != m[1] {
		t.Errorf("info.version %q; paymentsd --version says %q", doc.Info.Version, first)
	}
	if doc.Info.License.Name != "Apache-2.0" || doc.Info.License.URL != "https://www.apache.org/licenses/LICENSE-2.0" {
		t.Errorf("info.license %+v, want Apache-2.0 and its URL", doc.Info.License)
	}
}
