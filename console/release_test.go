package console_test

import (
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
		"<th>Principal</th><td>alice</td>", "<th>Key</th><td>&lt;b&gt;tx-error&lt;/b&gt;</td>",
		"<th>Code</th><td>INVALID_ARGUMENT</td>", "<th>Message</th><td>amount must be positive</td>", "<th>Attempt</th><td>1</td>",
		`<form method="post" action="/release" id="confirm-release">`, `name="key" value="&lt;b&gt;tx-error&lt;/b&gt;"`,
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
// carries the session's CSRF token, and the key is released.
func TestPageConfirmRelease_ConfirmingReleases(t *testing.T) {
	f := start(t)
	f.store(t, "tx-error", invalid(), true)
	browser := f.login(t, operatorToken)
	resp, err := browser.Get(f.url + "/release" + query("tx-error"))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := regexp.MustCompile(`<form method="post" action="/release" id="confirm-release">\s*` +
		`<input type="hidden" name="principal" value="alice">\s*<input type="hidden" name="key" value="tx-error">\s*` +
		`<input type="hidden" name="csrf" value="([^"]+)">`).FindStringSubmatch(string(page))
	if resp.StatusCode != http.StatusOK || csrf == nil {
		t.Fatalf("confirmation: %d, no confirm form with the CSRF token:\n%s", resp.StatusCode, page)
	}
	resp, err = browser.PostForm(f.url+"/release", url.Values{"principal": {principal}, "key": {"tx-error"}, "csrf": {csrf[1]}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "was released") {
		t.Errorf("confirming: %d\n%s", resp.StatusCode, body)
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("tx-error"), operatorToken, nil); a.status != http.StatusNotFound {
		t.Errorf("the key after its release: %d %s", a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"msg":"idempotency key released"`) || !strings.Contains(log, `"operator":"carol"`) {
		t.Errorf("no log line of the release:\n%s", log)
	}
}
