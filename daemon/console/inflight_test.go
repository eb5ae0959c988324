package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// claim leaves key of principal in flight, claimed at claimed, as a
// handler still running or a crashed process leaves it.
func (f *fixture) claim(t *testing.T, key string, claimed time.Time) {
	t.Helper()
	k := storage.RecordKey{Scope: principal, Key: key}
	req := storage.ClaimRequest{Key: k, Scheme: storage.FingerprintScheme, Now: claimed, Lease: time.Minute, TTL: time.Hour}
	if _, _, err := f.db.Claim(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// The JSON API pages through the keys in flight, each once, with their
// age and lease; completed records are not listed.
func TestAPIInFlight_PagesThroughTheClaims(t *testing.T) {
	f := start(t)
	now := time.Now()
	for i := range 5 {
		f.claim(t, fmt.Sprintf("running-%d", i), now.Add(-time.Duration(i)*time.Second))
	}
	f.claim(t, "orphan", now.Add(-2*time.Minute)) // its lease ran out a minute ago
	f.store(t, "done", created(t, "pi_1"), true)

	seen := map[string]map[string]any{}
	path := "/api/v1/in-flight?limit=2"
	for pages := 0; path != ""; pages++ {
		if pages > 4 {
			t.Fatalf("more than 4 pages of 2 for 6 claims")
		}
		a := f.call(t, "GET", path, operatorToken, nil)
		v := decode(t, a)
		claims, _ := v["claims"].([]any)
		if a.status != http.StatusOK || len(claims) > 2 {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		for _, c := range claims {
			c := c.(map[string]any)
			key := c["key"].(string)
			if seen[key] != nil {
				t.Fatalf("key %s listed twice", key)
			}
			seen[key] = c
		}
		path = ""
		if next, ok := v["next"].(map[string]any); ok {
			path = "/api/v1/in-flight?" + url.Values{"after_principal": {next["after_principal"].(string)},
				"after_key": {next["after_key"].(string)}, "limit": {"2"}}.Encode()
		}
	}
	if len(seen) != 6 || seen["done"] != nil {
		t.Fatalf("listed %d keys (%v), want the 6 in flight", len(seen), seen)
	}
	orphan := seen["orphan"]
	if age, _ := orphan["age_seconds"].(float64); age < 119 || orphan["state"] != "in_flight" || orphan["lease_expiry"] == nil ||
		orphan["principal"] != principal || orphan["attempt"] != 1.0 {
		t.Errorf("the orphan as listed: %v", orphan)
	}
	if log := f.log.String(); !strings.Contains(log, `"msg":"console in-flight list","operator":"carol"`) {
		t.Errorf("no log line of the list naming its operator:\n%s", f.log)
	}
}

// The page shows the keys in flight as a table, each linking to its
// lookup, and a link to the next page.
func TestPageInFlight_ShowsTheTableAndTheNextPage(t *testing.T) {
	f := start(t)
	now := time.Now()
	f.claim(t, "running-<b>", now.Add(-3*time.Second))
	f.claim(t, "orphan", now.Add(-2*time.Minute))
	a := f.call(t, "GET", "/in-flight?limit=1", operatorToken, nil)
	if a.status != http.StatusOK || !strings.Contains(a.body, `id="next-page"`) || strings.Contains(a.body, "running-<b>") {
		t.Fatalf("first page of 1: %d\n%s", a.status, a.body)
	}
	a = f.call(t, "GET", "/in-flight", operatorToken, nil)
	for _, want := range []string{
		`<td class="mono"><a href="/key?key=orphan&amp;principal=alice">orphan</a></td>`,
		`<td class="transactional">no</td>`,
		"running-&lt;b&gt;",
		"<td>ran out 1m0s ago</td>",
		`<td class="next-retry">takes it over, unless its holder still runs it</td>`,
		"runs out in 57s",
		"<td>2m0s</td>",
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("the page lacks %q:\n%s", want, a.body)
		}
	}
	if strings.Contains(a.body, `id="next-page"`) {
		t.Errorf("a page of every claim links to a next page:\n%s", a.body)
	}
}

// A page query that names no key, or a limit out of range, is a 400.
func TestInFlight_BadPageQuery_Is400(t *testing.T) {
	f := start(t)
	for _, q := range []string{"limit=0", "limit=501", "limit=x", "after_principal=alice", "after_key=k", "after_principal=alice&after_key=a%01b", "after_principal=no%20such&after_key=k"} {
		for _, path := range []string{"/api/v1/in-flight?", "/in-flight?"} {
			if a := f.call(t, "GET", path+q, operatorToken, nil); a.status != http.StatusBadRequest {
				t.Errorf("GET %s%s: %d %s", path, q, a.status, a.body)
			}
		}
	}
}
