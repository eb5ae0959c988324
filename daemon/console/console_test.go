package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/console"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/testkit/logbuf"
	"github.com/paymentsd/paymentsd/storage"
)

const (
	operatorToken = "op-secret-token-1"
	principal     = "alice"
)

type fixture struct {
	url     string
	db      *boltstore.DB
	intents *boltintents.Store
	log     *logbuf.Buffer
	// operators are the keys the console reads on every request: a test
	// stores new ones as a reload of --admin-keys does.
	operators *atomic.Pointer[auth.Keys]
	// skew is how far the console's clock is ahead of time.Now (see
	// advance).
	skew *atomic.Int64
}

// advance moves the console's clock d ahead.
func (f *fixture) advance(d time.Duration) { f.skew.Add(int64(d)) }

// start serves a console over a bbolt file in t.TempDir(), with one
// operator, "carol", whose key is operatorToken.
func start(t *testing.T) *fixture {
	t.Helper()
	return startOn(t, filepath.Join(t.TempDir(), "paymentsd.db"))
}

// startOn is start over the bbolt file at path, which may hold records
// already.
func startOn(t *testing.T, path string) *fixture {
	t.Helper()
	return startWith(t, path, func(i console.Intents) console.Intents { return i })
}

// startWith is startOn with the console given wrap(its intents), so that
// a test may hide what the store can do.
func startWith(t *testing.T, path string, wrap func(console.Intents) console.Intents) *fixture {
	t.Helper()
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys, err := auth.ParseKeys([]byte(auth.KeyLine("carol", operatorToken)+"\n"), "admin-keys")
	if err != nil {
		t.Fatal(err)
	}
	intents, err := boltintents.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{db: db, intents: intents, log: new(logbuf.Buffer), operators: new(atomic.Pointer[auth.Keys]), skew: new(atomic.Int64)}
	f.operators.Store(keys)
	c := console.New(console.Config{Store: db, Intents: wrap(intents), Operators: f.operators.Load, Log: slog.New(slog.NewJSONHandler(f.log, nil)),
		Now: func() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) }})
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// store stores result for key as a completed record of principal.
func (f *fixture) store(t *testing.T, key string, result *storage.Result, transactional bool) {
	t.Helper()
	f.storeAs(t, principal, key, result, transactional)
}

// storeAs stores result for key as a completed record of p.
func (f *fixture) storeAs(t *testing.T, p, key string, result *storage.Result, transactional bool) {
	t.Helper()
	ctx := context.Background()
	k := storage.RecordKey{Scope: p, Key: key}
	_, rec, err := f.db.Claim(ctx, storage.ClaimRequest{Key: k, Scheme: storage.FingerprintScheme, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := rec.Completed(result)
	if transactional {
		done.Durability = storage.Transactional
	}
	if err := f.db.Complete(ctx, k, done); err != nil {
		t.Fatal(err)
	}
}

func created(t *testing.T, id string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(&paymentsv1.CreatePaymentIntentResponse{PaymentIntent: &paymentsv1.PaymentIntent{Id: id, Amount: "12.34"}})
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Response: resp}
}

func invalid() *storage.Result {
	return &storage.Result{Status: &spb.Status{Code: int32(codes.InvalidArgument), Message: "amount must be positive"}}
}

type answer struct {
	status int
	header http.Header
	body   string
}

// call makes a request to the console with the operator token token
// ("" for none) and a form, if any.
func (f *fixture) call(t *testing.T, method, path, token string, form url.Values) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("%s %s: Cache-Control %q, want no-store", method, path, got)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func query(key string) string {
	return "?" + url.Values{"principal": {principal}, "key": {key}}.Encode()
}

func decode(t *testing.T, a answer) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return v
}

func TestAPIRecord_Found_ShowsTheRecordAndLogsTheOperator(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", created(t, "pi_123"), true)
	a := f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	v := decode(t, a)
	rec := v["record"].(map[string]any)
	resp, _ := v["response"].(map[string]any)
	if v["found"] != true || rec["state"] != "completed" || rec["intent_id"] != "pi_123" || rec["code"] != "OK" ||
		rec["transactional"] != true || v["intent_path"] != "/v1/payment_intents/pi_123" ||
		resp["@type"] != "type.googleapis.com/payments.v1.CreatePaymentIntentResponse" {
		t.Errorf("lookup answered %s", a.body)
	}
	log := f.log.String()
	for _, want := range []string{`"msg":"console lookup"`, `"operator":"carol"`, `"principal_hash":"` + auth.PrincipalHash(principal) + `"`, `"key":"order-1"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, operatorToken) {
		t.Errorf("the log holds the operator's token:\n%s", log)
	}
}

func TestAPIRecord_Missing_Is404(t *testing.T) {
	f := start(t)
	a := f.call(t, "GET", "/api/v1/record"+query("never-used"), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusNotFound || v["found"] != false || v["record"] != nil {
		t.Errorf("a key never used: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/api/v1/record?principal=a+b&key=k", operatorToken, nil); a.status != http.StatusBadRequest {
		t.Errorf("a principal that names none: %d %s", a.status, a.body)
	}
}

func TestEveryRoute_WithoutAnOperatorKey_Is401(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", invalid(), true)
	release := url.Values{"principal": {principal}, "key": {"order-1"}}
	for _, token := range []string{"", "not-an-operator", "Bearer"} {
		for _, c := range []struct {
			method, path string
			form         url.Values
		}{
			{"GET", "/api/v1/record" + query("order-1"), nil},
			{"POST", "/api/v1/release", release},
			{"GET", "/" + query("order-1"), nil},
			{"POST", "/release", release},
			{"GET", "/no-such-page", nil},
			{"PUT", "/api/v1/record", nil},
			{"GET", "/api/v1/in-flight", nil},
			{"GET", "/in-flight", nil},
			{"GET", "/api/v1/intents?principal=" + principal, nil},
			{"GET", "/intents?principal=" + principal, nil},
			{"GET", "/api/v1/duplicates?principal=" + principal, nil},
			{"GET", "/duplicates?principal=" + principal, nil},
		} {
			a := f.call(t, c.method, c.path, token, c.form)
			if a.status != http.StatusUnauthorized || strings.Contains(a.body, "order-1") {
				t.Errorf("%s %s with token %q: %d %s", c.method, c.path, token, a.status, a.body)
			}
			f.advance(time.Minute) // past the limit of failures (TestFailures_Limited)
		}
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil); a.status != http.StatusOK {
		t.Errorf("the record after the refusals: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/no-such-page", operatorToken, nil); a.status != http.StatusNotFound {
		t.Errorf("an operator's request of no page: %d %s", a.status, a.body)
	}
	big := url.Values{"principal": {principal}, "key": {"order-1"}, "pad": {strings.Repeat("x", 1<<20)}}
	if a := f.call(t, "POST", "/api/v1/release", operatorToken, big); a.status != http.StatusBadRequest {
		t.Errorf("a release with a body of a megabyte: %d %s", a.status, a.body)
	}
}

func TestAPIRelease_OfASuccess_IsRefused(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", created(t, "pi_1"), true)
	a := f.call(t, "POST", "/api/v1/release", operatorToken, url.Values{"principal": {principal}, "key": {"order-1"}})
	if v := decode(t, a); a.status != http.StatusConflict || v["released"] != false || v["refusal"] != "success" ||
		!strings.Contains(v["message"].(string), "its effects stand") {
		t.Errorf("release of a success: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil); a.status != http.StatusOK {
		t.Errorf("the success after the refusal: %d %s", a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"refusal":"success"`) || !strings.Contains(log, `"operator":"carol"`) {
		t.Errorf("the refusal's log line:\n%s", log)
	}
}

func TestAPIRelease_OfATransactionalError_Releases(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", invalid(), true)
	f.store(t, "order-2", invalid(), false)
	a := f.call(t, "POST", "/api/v1/release", operatorToken, url.Values{"principal": {principal}, "key": {"order-1"}})
	if v := decode(t, a); a.status != http.StatusOK || v["released"] != true || v["record"].(map[string]any)["code"] != "INVALID_ARGUMENT" {
		t.Errorf("release of a transactional error: %d %s", a.status, a.body)
	}
	a = f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusOK || v["found"] != false || v["released"] != true {
		t.Errorf("the key after its release: %d %s, want 200 with released true", a.status, a.body)
	}
	a = f.call(t, "POST", "/api/v1/release"+query("order-2"), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusConflict || v["refusal"] != "not_transactional" {
		t.Errorf("release of another method's error: %d %s", a.status, a.body)
	}
	log := f.log.String()
	for _, want := range []string{`"msg":"idempotency key released"`, `"code":"INVALID_ARGUMENT"`, `"principal_hash":"` + auth.PrincipalHash(principal) + `"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

func TestPage_ShowsTheRecordEscaped(t *testing.T) {
	f := start(t)
	f.store(t, "<b>order</b>", created(t, "pi_<script>"), true)
	a := f.call(t, "GET", "/"+query("<b>order</b>"), operatorToken, nil)
	if a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", a.status, a.body)
	}
	for _, want := range []string{`<td id="state">completed`, "pi_&lt;script&gt;", "GET /v1/payment_intents/pi_&lt;script&gt;", `&#34;amount&#34;: &#34;12.34&#34;`} {
		if !strings.Contains(a.body, want) {
			t.Errorf("page lacks %q:\n%s", want, a.body)
		}
	}
	if strings.Contains(a.body, "<script>") || strings.Contains(a.body, "<b>order") {
		t.Errorf("page holds unescaped input:\n%s", a.body)
	}
	if a := f.call(t, "GET", "/"+query("nope"), operatorToken, nil); a.status != http.StatusNotFound || !strings.Contains(a.body, "no record of key") {
		t.Errorf("page of a missing key: %d %s", a.status, a.body)
	}
}

// A browser logs in with the form: the cookie it gets is out of scripts'
// and other sites' reach, and its POSTs need the page's CSRF token.
func TestLogin_SessionCookie_AndCSRF(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", invalid(), true)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	if resp, err := browser.PostForm(f.url+"/login", url.Values{"token": {"wrong"}}); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("login with a wrong key: %v %v", resp, err)
	}
	resp, err := browser.PostForm(f.url+"/login", url.Values{"token": {operatorToken}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cookie := resp.Request.Response.Header.Get("Set-Cookie") // the login's, before the redirect
	if resp.StatusCode != http.StatusOK || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, "Secure") {
		t.Fatalf("login: %d, cookie %q", resp.StatusCode, cookie)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(page))
	if csrf == nil {
		t.Fatalf("the page after login has no CSRF token:\n%s", page)
	}
	form := f.confirmForm(t, browser, "order-1")
	if form.Get("csrf") != csrf[1] {
		t.Errorf("the confirmation's CSRF token %q is not the session's %q", form.Get("csrf"), csrf[1])
	}
	form.Del("csrf")
	if resp, err := browser.PostForm(f.url+"/release", form); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a release without the CSRF token: %v %v", resp, err)
	}
	form.Set("csrf", csrf[1])
	resp, err = browser.PostForm(f.url+"/release", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "was released") {
		t.Errorf("a release with the CSRF token: %d\n%s", resp.StatusCode, body)
	}
	if resp, err := browser.PostForm(f.url+"/release", form); err != nil || resp.StatusCode != http.StatusConflict {
		t.Errorf("a second release: %v %v", resp, err)
	}
}

// login logs a browser in with token and returns it.
func (f *fixture) login(t *testing.T, token string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(f.url+"/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	return browser
}

// get is the status of GET path by browser.
func get(t *testing.T, browser *http.Client, url string) int {
	t.Helper()
	resp, err := browser.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Operator keys reloaded take effect at the next request: a key removed,
// or replaced by a new one of the same operator, is refused as a bearer
// token and ends the sessions it logged in; a key added is accepted.
func TestOperatorKeysReloaded_EndSessionsOfRemovedKeys(t *testing.T) {
	f := start(t)
	kept := f.login(t, operatorToken)
	other := "op-secret-token-2"
	reload := func(lines ...string) {
		keys, err := auth.ParseKeys([]byte(strings.Join(lines, "\n")+"\n"), "admin-keys")
		if err != nil {
			t.Fatal(err)
		}
		f.operators.Store(keys)
	}
	reload(auth.KeyLine("carol", operatorToken), auth.KeyLine("dave", other))
	if a := f.call(t, "GET", "/in-flight", other, nil); a.status != http.StatusOK || !strings.Contains(a.body, "dave") {
		t.Errorf("a key added: %d", a.status)
	}
	if got := get(t, kept, f.url+"/in-flight"); got != http.StatusOK {
		t.Errorf("a session whose key stays, after a reload: %d", got)
	}
	davesSession := f.login(t, other)
	reload(auth.KeyLine("carol", "op-secret-token-3"), auth.KeyLine("erin", other+"-erin"))
	for _, c := range []struct {
		name    string
		browser *http.Client
	}{{"a session of a key replaced", kept}, {"a session of a key removed", davesSession}} {
		if got := get(t, c.browser, f.url+"/in-flight"); got != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", c.name, got)
		}
	}
	for _, token := range []string{operatorToken, other} {
		if a := f.call(t, "GET", "/in-flight", token, nil); a.status != http.StatusUnauthorized {
			t.Errorf("a bearer key no longer listed: %d, want 401", a.status)
		}
	}
	if log := f.log.String(); strings.Count(log, "console session ended: its operator key is no longer listed") != 2 {
		t.Errorf("want a log line for each session ended:\n%s", log)
	}
}

// After a burst of failed authentications from one address, by login
// form or bearer token, every authentication from it is refused 429 with
// Retry-After, a right key's too, until its allowance grows back; a
// session already logged in is not refused.
func TestFailures_Limited(t *testing.T) {
	f := start(t)
	browser := f.login(t, operatorToken)
	for i := range 10 {
		if i%2 == 0 {
			if a := f.call(t, "POST", "/login", "", url.Values{"token": {"guess"}}); a.status != http.StatusUnauthorized {
				t.Fatalf("failed login %d: %d", i, a.status)
			}
		} else if a := f.call(t, "GET", "/api/v1/in-flight", "guess", nil); a.status != http.StatusUnauthorized {
			t.Fatalf("failed bearer request %d: %d", i, a.status)
		}
	}
	for _, a := range []answer{
		f.call(t, "POST", "/login", "", url.Values{"token": {operatorToken}}),
		f.call(t, "GET", "/api/v1/in-flight", operatorToken, nil),
	} {
		if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, "too many failed authentications") {
			t.Errorf("the right key after 10 failures: %d %v %s", a.status, a.header, a.body)
		}
	}
	if got := get(t, browser, f.url+"/in-flight"); got != http.StatusOK {
		t.Errorf("a session logged in before: %d", got)
	}
	if !strings.Contains(f.log.String(), "console authentication refused: too many failures from this address") {
		t.Errorf("no log line of the refusal:\n%s", f.log)
	}
	f.advance(6 * time.Second) // one failure's worth of allowance
	if a := f.call(t, "GET", "/api/v1/in-flight", operatorToken, nil); a.status != http.StatusOK {
		t.Errorf("the right key once the allowance grew back: %d", a.status)
	}
}
