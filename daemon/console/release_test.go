package console_test

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// releaseButton is the key page's release control: a form leading to the
// confirmation.
const releaseButton = `<form method="get" action="/release"`

// The key page offers a release only where the rules allow one: a stored
// error of a transactional method. A success, another method's error and a
// claim in flight have no release control.
func TestPage_ReleaseButton_OnlyWhereTheRulesAllow(t *testing.T) {
	f := start(t)
	f.store(t, "created", created(t, "pi_1"), true)
	f.store(t, "other-error", invalid(), false)
	f.store(t, "tx-error", invalid(), true)
	f.claim(t, "running", time.Now())
	for key, want := range map[string]bool{"created": false, "other-error": false, "running": false, "tx-error": true} {
		a := f.call(t, "GET", "/"+query(key), operatorToken, nil)
		if a.status != http.StatusOK {
			t.Fatalf("page of %s: %d %s", key, a.status, a.body)
		}
		if got := strings.Contains(a.body, releaseButton); got != want {
			t.Errorf("page of %s has a release control: %v, want %v\n%s", key, got, want, a.body)
		}
		if strings.Contains(a.body, `method="post" action="/release"`) {
			t.Errorf("page of %s releases without a confirmation:\n%s", key, a.body)
		}
	}
}

// The release button leads to a page naming what will be deleted, which
// deletes nothing itself. Where the rules refuse, it says why instead.
func TestPageConfirmRelease_NamesWhatWillBeDeleted(t *testing.T) {
	f := start(t)
	f.store(t, "<b>tx-error</b>", invalid(), true)
	f.store(t, "created", created(t, "pi_1"), true)
	a := f.call(t, "GET", "/release"+query("<b>tx-error</b>"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Fatalf("confirmation: %d %s", a.status, a.body)
	}
	for _, want := range []string{
		`<th>Principal</th><td class="mono">alice</td>`, `<th>Key</th><td class="mono">&lt;b&gt;tx-error&lt;/b&gt;</td>`,
		`<th>Code</th><td class="code-error">INVALID_ARGUMENT</td>`, "<th>Message</th><td>amount must be positive</td>", "<th>Attempt</th><td>1</td>",
		`<form method="post" action="/release" id="confirm-release">`, `name="key" value="&lt;b&gt;tx-error&lt;/b&gt;"`,
		`<input type="hidden" name="attempt" value="1">`,
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("confirmation lacks %q:\n%s", want, a.body)
		}
	}
	if strings.Contains(a.body, "<b>tx-error") {
		t.Errorf("confirmation holds unescaped input:\n%s", a.body)
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("<b>tx-error</b>"), operatorToken, nil); a.status != http.StatusOK {
		t.Errorf("the record after its confirmation page: %d %s", a.status, a.body)
	}

	a = f.call(t, "GET", "/release"+query("created"), operatorToken, nil)
	if a.status != http.StatusConflict || !strings.Contains(a.body, `id="refusal"`) || !strings.Contains(a.body, "its effects stand") ||
		strings.Contains(a.body, "confirm-release") {
		t.Errorf("confirmation of a success's release: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/release"+query("nope"), operatorToken, nil); a.status != http.StatusConflict || strings.Contains(a.body, "confirm-release") {
		t.Errorf("confirmation of a missing key's release: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/release?principal=alice", operatorToken, nil); a.status != http.StatusBadRequest {
		t.Errorf("confirmation without a key: %d %s", a.status, a.body)
	}
}

// A logged-in operator confirms with the confirmation's form, which
// carries the session's CSRF token and the attempt and claim time shown,
// and the key is released.
func TestPageConfirmRelease_ConfirmingReleases(t *testing.T) {
	f := start(t)
	f.store(t, "tx-error", invalid(), true)
	browser := f.login(t, operatorToken)
	form := f.confirmForm(t, browser, "tx-error")
	if form.Get("principal") != principal || form.Get("key") != "tx-error" || form.Get("attempt") != "1" || form.Get("claim_time") == "" {
		t.Errorf("the confirmation's form: %v", form)
	}
	resp, err := browser.PostForm(f.url+"/release", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "was released") {
		t.Errorf("confirming: %d\n%s", resp.StatusCode, body)
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("tx-error"), operatorToken, nil); a.status != http.StatusOK || decode(t, a)["released"] != true {
		t.Errorf("the key after its release: %d %s, want 200 with released true", a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"msg":"idempotency key released"`) || !strings.Contains(log, `"operator":"carol"`) {
		t.Errorf("no log line of the release:\n%s", log)
	}
}

// confirmForm opens the release confirmation of key by browser and
// returns the values its form posts.
func (f *fixture) confirmForm(t *testing.T, browser *http.Client, key string) url.Values {
	t.Helper()
	resp, err := browser.Get(f.url + "/release" + query(key))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	form := regexp.MustCompile(`(?s)<form method="post" action="/release" id="confirm-release">(.*?)</form>`).FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || form == nil {
		t.Fatalf("confirmation of %s: %d, no confirm form:\n%s", key, resp.StatusCode, page)
	}
	v := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllSubmatch(form[1], -1) {
		v.Set(string(m[1]), html.UnescapeString(string(m[2])))
	}
	return v
}

// A release confirmed for one record refuses, 409 and nothing deleted,
// once the key holds another: here it was released and used again
// meanwhile, and the new error is a new claim. By the JSON API, an attempt
// that does not match is refused alike. An attempt that is no number or
// 0, or a claim time without an attempt, is a 400: none may pass for a
// release with no check.
func TestRelease_OfARecordChangedSinceConfirmed_IsRefused(t *testing.T) {
	f := start(t)
	f.store(t, "tx-error", invalid(), true)
	browser := f.login(t, operatorToken)
	form := f.confirmForm(t, browser, "tx-error")
	if a := f.call(t, "POST", "/api/v1/release", operatorToken, url.Values{"principal": {principal}, "key": {"tx-error"}}); a.status != http.StatusOK {
		t.Fatalf("release by the API: %d %s", a.status, a.body)
	}
	f.store(t, "tx-error", invalid(), true) // the key used again: a new claim
	resp, err := browser.PostForm(f.url+"/release", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "the record changed since you confirmed") ||
		!strings.Contains(string(body), `<a href="/key?key=tx-error&amp;principal=alice" id="back">`) {
		t.Errorf("a release of a record changed since confirmed: %d\n%s", resp.StatusCode, body)
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("tx-error"), operatorToken, nil); a.status != http.StatusOK {
		t.Errorf("the new record after the refusal: %d %s", a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"refusal":"changed"`) || !strings.Contains(log, `"confirmed_attempt":1`) {
		t.Errorf("no log line of the refusal, with the attempt confirmed:\n%s", log)
	}

	api := url.Values{"principal": {principal}, "key": {"tx-error"}, "attempt": {"2"}}
	a := f.call(t, "POST", "/api/v1/release", operatorToken, api)
	if v := decode(t, a); a.status != http.StatusConflict || v["refusal"] != "changed" || v["released"] != false {
		t.Errorf("a release by the API of attempt 2, the record's being 1: %d %s", a.status, a.body)
	}
	for _, bad := range []url.Values{
		{"attempt": {"two"}},
		{"attempt": {"0"}, "claim_time": {form.Get("claim_time")}}, // no record has attempt 0
		{"claim_time": {form.Get("claim_time")}},                   // not the attempt it began
	} {
		bad.Set("principal", principal)
		bad.Set("key", "tx-error")
		if a := f.call(t, "POST", "/api/v1/release", operatorToken, bad); a.status != http.StatusBadRequest {
			t.Errorf("a release by the API of %v: %d %s", bad, a.status, a.body)
		}
	}
	form = f.confirmForm(t, browser, "tx-error")
	form.Del("attempt")
	if resp, err := browser.PostForm(f.url+"/release", form); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a page's release naming no attempt: %v %v", resp, err)
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("tx-error"), operatorToken, nil); a.status != http.StatusOK {
		t.Errorf("the record after the refusals: %d %s", a.status, a.body)
	}
	if resp, err := browser.PostForm(f.url+"/release", f.confirmForm(t, browser, "tx-error")); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a release confirmed of the record as it stands: %v %v", resp, err)
	}
}
