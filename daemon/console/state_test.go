package console_test

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/storage"
)

// claimReq is a claim of key of principal at now, with a lease of a
// minute, the same request as every other claim of the tests.
func claimReq(key string, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{Key: storage.RecordKey{Scope: principal, Key: key}, Scheme: storage.FingerprintScheme,
		Now: now, Lease: time.Minute, TTL: time.Hour}
}

// claimTx claims key through a Tx of durability d at now and leaves the
// Tx running, as a handler still running does. The Tx is rolled back when
// the test ends.
func claimTx(t *testing.T, db storage.TxStore, key string, d storage.Durability, now time.Time) storage.Tx {
	t.Helper()
	outcome, _, tx, err := db.ClaimTx(context.Background(), claimReq(key, now), d)
	if err != nil || tx == nil {
		t.Fatalf("claim of %s: %v %v", key, outcome, err)
	}
	t.Cleanup(tx.Rollback)
	return tx
}

// retry claims key again at now, as a retry of the same request does,
// and returns what the store decided. A claim it makes is rolled back.
func retry(t *testing.T, db storage.TxStore, key string, d storage.Durability, now time.Time) storage.Outcome {
	t.Helper()
	outcome, _, tx, err := db.ClaimTx(context.Background(), claimReq(key, now), d)
	if err != nil {
		t.Fatalf("retry of %s: %v", key, err)
	}
	if tx != nil {
		tx.Rollback()
	}
	return outcome
}

// A key released and not used since is known by its releases: its page
// and the JSON API (200, released true) show who released it, when, and
// what the released record had answered, and say its next request runs
// afresh. A second release, and the confirmation page, say it was
// released, not that it may never have been used. A key never used is
// still a 404.
func TestKeyPage_ReleasedKey_ShowsItsHistory(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", &storage.Result{Status: &spb.Status{Code: int32(codes.InvalidArgument), Message: "amount <must> be positive"}}, true)
	release := url.Values{"principal": {principal}, "key": {"order-1"}}
	if a := f.call(t, "POST", "/api/v1/release", operatorToken, release); a.status != http.StatusOK {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	a := f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Errorf("the released key's page: %d, want 200", a.status)
	}
	wantAll(t, "the released key's page", a.body,
		`<td id="state">released: no record is stored</td>`,
		`<td id="next-request">The next request with the key runs afresh: no record of it is stored.</td>`,
		`it was released at `, ` by carol, and no record of it is stored since.`,
		`<td>carol</td><td>1</td><td class="code-error">INVALID_ARGUMENT</td><td>amount &lt;must&gt; be positive</td></tr>`)
	if strings.Contains(a.body, "never used") || strings.Contains(a.body, "not seen here") {
		t.Errorf("the released key's page says it may never have been used, or that a bbolt file is shared:\n%s", a.body)
	}

	a = f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil)
	v := decode(t, a)
	releases, _ := v["releases"].([]any)
	if a.status != http.StatusOK || v["found"] != false || v["released"] != true || v["record"] != nil || len(releases) != 1 ||
		!strings.Contains(v["next_request"].(string), "runs afresh") {
		t.Fatalf("the released key in the JSON API: %d %s", a.status, a.body)
	}
	if r := releases[0].(map[string]any); r["operator"] != "carol" || r["code"] != "INVALID_ARGUMENT" || r["message"] != "amount <must> be positive" {
		t.Errorf("the API's release: %v", r)
	}

	a = f.call(t, "POST", "/api/v1/release", operatorToken, release)
	if v := decode(t, a); a.status != http.StatusConflict || v["refusal"] != "no_record" ||
		!strings.Contains(v["message"].(string), "the key was released at ") || strings.Contains(a.body, "never used") {
		t.Errorf("a second release: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/release"+query("order-1"), operatorToken, nil); a.status != http.StatusConflict ||
		!strings.Contains(a.body, "the key was released at ") || strings.Contains(a.body, "never used") {
		t.Errorf("the confirmation of a released key's release: %d %s", a.status, a.body)
	}

	a = f.call(t, "GET", "/api/v1/record"+query("never-used"), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusNotFound || v["released"] != false || v["found"] != false {
		t.Errorf("a key never used: %d %s", a.status, a.body)
	}
}

// A transactional claim this process holds in memory, which Get cannot
// see, is in flight on its page and in the JSON API: its holder, attempt,
// lease and durability, and what a retry gets. The In-flight page links
// to that page. Its release is refused as in flight, by the API, the
// confirmation and the page's form. Once its lease ran out, it is still
// held, and a retry is still told it is in flight, as the page says. Once
// its Tx ends without a result, the key runs afresh, as the page says too.
func TestKeyPage_AClaimHeldInMemory_IsInFlight(t *testing.T) {
	f := start(t)
	now := time.Now()
	for _, key := range []string{"held-0", "held-0~", "held-0~~", "held-1!", "held-10"} { // its neighbours in the file's order
		f.claim(t, key, now)
	}
	tx := claimTx(t, f.db, "held-1", storage.Transactional, now)

	inFlight := f.call(t, "GET", "/in-flight", operatorToken, nil)
	wantAll(t, "the keys in flight", inFlight.body, `<a href="/key?key=held-1&amp;principal=alice">held-1</a>`,
		`<td class="next-retry">in flight while this process runs it</td>`)
	a := f.call(t, "GET", keyPath("held-1"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Errorf("the held key's page, linked from In flight: %d, want 200", a.status)
	}
	wantAll(t, "the held key's page", a.body,
		`<td id="state">in flight: a handler of this process holds the key</td>`,
		`<td id="next-retry">This process holds the claim and still runs its handler or commit: a retry is told the key is in flight (ABORTED; 409 over HTTP)`,
		`Nothing of it is stored: should the run end without a result, the next request runs afresh.`,
		`<td class="mono" id="owner">`+f.db.Claimant().ID+`</td>`,
		`<td id="holder">this process, which holds the claim in its memory: it is not stored until it commits</td>`,
		`<td id="transactional">yes`, `<td id="lease">runs out in `, `<p id="attempts">Attempt 1.`,
		`<p class="note" id="no-release">Not releasable now: the key is in flight`)
	if strings.Contains(a.body, releaseButton) || strings.Contains(a.body, "never used") {
		t.Errorf("the held key's page offers a release, or says the key may never have been used")
	}
	v := decode(t, f.call(t, "GET", "/api/v1/record"+query("held-1"), operatorToken, nil))
	rec, _ := v["record"].(map[string]any)
	if v["found"] != true || v["stored"] != false || rec["state"] != "in_flight" || rec["transactional"] != true || rec["attempt"] != 1.0 ||
		rec["owner"] != f.db.Claimant().ID || rec["lease_expiry"] == nil || !strings.Contains(v["next_request"].(string), "This process holds the claim") {
		t.Errorf("the held key in the JSON API: %v", v)
	}
	for _, key := range []string{"held-0", "held-0~~", "held-1!", "held-10"} {
		if v := decode(t, f.call(t, "GET", "/api/v1/record"+query(key), operatorToken, nil)); v["stored"] != true {
			t.Errorf("the stored claim %s: %v", key, v)
		}
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("held-00"), operatorToken, nil); a.status != http.StatusNotFound {
		t.Errorf("a key never used, beside the held one: %d %s", a.status, a.body)
	}

	refusesInFlight(t, f, "held-1")
	f.advance(2 * time.Minute)
	wantAll(t, "the held key's page once its lease ran out", f.call(t, "GET", keyPath("held-1"), operatorToken, nil).body,
		`<td id="lease">ran out 1m0s ago; it does not apply while this process holds the claim</td>`,
		`<td id="next-retry">This process holds the claim and still runs its handler or commit`)
	if got := retry(t, f.db, "held-1", storage.Transactional, now.Add(2*time.Minute)); got != storage.OutcomeInFlight {
		t.Errorf("a retry once the held claim's lease ran out: %v, want in flight, as the page says", got)
	}
	tx.Rollback()
	if a := f.call(t, "GET", keyPath("held-1"), operatorToken, nil); a.status != http.StatusNotFound {
		t.Errorf("the key once its Tx ended without a result: %d, want 404", a.status)
	}
	if got := retry(t, f.db, "held-1", storage.Transactional, now.Add(2*time.Minute)); got != storage.OutcomeFresh {
		t.Errorf("a retry once the Tx ended without a result: %v, want fresh, as the page said", got)
	}
}

// refusesInFlight checks that the release of key, in flight, is refused as
// in flight with its reason: by the JSON API, the confirmation page and
// the page's form. The refusal is logged.
func refusesInFlight(t *testing.T, f *fixture, key string) {
	t.Helper()
	form := url.Values{"principal": {principal}, "key": {key}}
	a := f.call(t, "POST", "/api/v1/release", operatorToken, form)
	if v := decode(t, a); a.status != http.StatusConflict || v["refusal"] != "in_flight" || !strings.Contains(v["message"].(string), "the key is in flight") {
		t.Errorf("the release of %s by the API: %d %s", key, a.status, a.body)
	}
	if a := f.call(t, "GET", "/release"+query(key), operatorToken, nil); a.status != http.StatusConflict ||
		!strings.Contains(a.body, `<p class="refusal" id="refusal">Release refused: the key is in flight`) {
		t.Errorf("the confirmation of %s's release: %d %s", key, a.status, a.body)
	}
	form.Set("attempt", "1")
	if a := f.call(t, "POST", "/release", operatorToken, form); a.status != http.StatusConflict || !strings.Contains(a.body, "Release refused: the key is in flight") {
		t.Errorf("the release of %s by the page's form: %d %s", key, a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"refusal":"in_flight"`) {
		t.Errorf("no log line of the refusal:\n%s", log)
	}
}

// What the key's page says a retry gets is what the store then decides.
// A durable claim whose lease ran out is taken over unless this process
// still runs it, which the console cannot see: the same sentence is true
// while its Tx runs (the retry is in flight) and once it ended (the
// retry takes it over), where "the next retry takes it over" was wrong
// the first time. A claim with a live lease is in flight to a retry.
func TestKeyPage_NextRetry_IsWhatTheRetryGets(t *testing.T) {
	f := start(t)
	now := time.Now()
	tx := claimTx(t, f.db, "durable", storage.Durable, now)
	f.claim(t, "live", now)
	f.advance(2 * time.Minute)
	lapsed := `<td id="next-retry">The lease ran out: a retry takes the claim over, unless this process, which made the claim, ` +
		`still runs its handler or commit: then the retry is told the key is in flight (ABORTED; 409 over HTTP), or waits up to --in-flight-wait for its result. ` +
		`Whether that run has ended, the console cannot tell.</td>`
	wantAll(t, "the page of a durable claim run now", f.call(t, "GET", keyPath("durable"), operatorToken, nil).body,
		`<td id="state">in flight, its lease ran out</td>`, lapsed, `<td id="holder">this process made the claim</td>`,
		`<td id="transactional">no: durable, its claim is stored before its handler runs</td>`)
	if got := retry(t, f.db, "durable", storage.Durable, now.Add(2*time.Minute)); got != storage.OutcomeInFlight {
		t.Errorf("a retry while the claim's Tx runs: %v, want in flight", got)
	}
	tx.Rollback() // a durable claim stays in flight, under the lease rule
	wantAll(t, "the page of a durable claim whose run ended", f.call(t, "GET", keyPath("durable"), operatorToken, nil).body, lapsed)
	if got := retry(t, f.db, "durable", storage.Durable, now.Add(2*time.Minute)); got != storage.OutcomeTakeover {
		t.Errorf("a retry once the claim's Tx ended: %v, want a takeover", got)
	}

	f.claim(t, "live-now", now.Add(2*time.Minute))
	wantAll(t, "the page of a claim with a live lease", f.call(t, "GET", keyPath("live-now"), operatorToken, nil).body,
		`<td id="state">in flight: a handler holds the key</td>`,
		`<td id="next-retry">While the lease holds, a retry is told the key is in flight`)
	if got := retry(t, f.db, "live-now", storage.Durable, now.Add(2*time.Minute)); got != storage.OutcomeInFlight {
		t.Errorf("a retry of a claim with a live lease: %v, want in flight", got)
	}
}

// A claim left by an earlier process that used the bbolt file is taken
// over by the next retry at once, lease or not, as its page says: the
// file is one process's at a time.
func TestKeyPage_NextRetry_OfAnEarlierProcesssClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	earlier, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, err := earlier.Claim(context.Background(), claimReq("orphan", now)); err != nil {
		t.Fatal(err)
	}
	owner := earlier.Claimant().ID
	earlier.Close()
	f := startOn(t, path)
	a := f.call(t, "GET", keyPath("orphan"), operatorToken, nil)
	wantAll(t, "the page of an earlier process's claim", a.body,
		`<td class="mono" id="owner">`+owner+`</td>`,
		`<td id="holder">an earlier process, which has ended: this store is used by one process at a time</td>`,
		`<td id="next-retry">The claim was left by an earlier process. This store is used by one process at a time, so the next retry takes it over at once, whatever the lease.</td>`,
		`<td id="lease">runs out in `)
	if got := retry(t, f.db, "orphan", storage.Durable, now); got != storage.OutcomeTakeover {
		t.Errorf("a retry of an earlier process's claim: %v, want a takeover", got)
	}
}
