package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/storage"
)

// keyPath is the key page of key of principal.
func keyPath(key string) string {
	return "/key" + query(key)
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// wantAll fails t for each of wants that body lacks.
func wantAll(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Errorf("%s lacks %q", what, want)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", what, body)
	}
}

// A stored error's details are each shown by their type: a BadRequest's
// field violations as a table, an ErrorInfo's reason, domain and metadata,
// a RetryInfo's delay as a hint, a PreconditionFailure, a ResourceInfo, a
// Help's links, a LocalizedMessage, any other type by its type URL and
// protojson, and one this build does not know by its type URL alone. All
// of it is escaped, and the JSON API decodes each.
func TestKeyPage_ShowsEachDetailByItsType(t *testing.T) {
	f := start(t)
	st := &spb.Status{Code: int32(codes.InvalidArgument), Message: "the <request> is invalid", Details: []*anypb.Any{
		mustAny(t, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "amount", Description: "must be a whole number of minor units"},
			{Field: "<currency>", Description: "must be an ISO 4217 code"},
		}}),
		mustAny(t, &errdetails.ErrorInfo{Reason: "AMOUNT_NOT_WHOLE", Domain: "payments.example", Metadata: map[string]string{"zeta": "last", "alpha": "first"}}),
		mustAny(t, &errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)}),
		mustAny(t, &errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{Type: "TOS", Subject: "acme.example", Description: "terms not accepted"}}}),
		mustAny(t, &errdetails.ResourceInfo{ResourceType: "payment_intent", ResourceName: "pi_1", Owner: "alice", Description: "already captured"}),
		mustAny(t, &errdetails.Help{Links: []*errdetails.Help_Link{
			{Description: "Amounts", Url: "https://docs.example/amounts"},
			{Description: "Hostile", Url: "javascript:alert(1)"},
		}}),
		mustAny(t, &errdetails.LocalizedMessage{Locale: "fr-FR", Message: "montant invalide"}),
		mustAny(t, &errdetails.DebugInfo{Detail: "stack elided"}),
		{TypeUrl: "type.googleapis.com/acme.v1.Unheard", Value: []byte{1, 2, 3}},
	}}
	f.store(t, "order-1", &storage.Result{Status: st}, true)

	a := f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	if a.status != http.StatusOK {
		t.Fatalf("key page: %d %s", a.status, a.body)
	}
	wantAll(t, "the key page", a.body,
		`<td class="code-error" id="code">INVALID_ARGUMENT</td>`,
		`<td id="message">the &lt;request&gt; is invalid</td>`,
		// BadRequest
		`<h3>Bad request: field violations</h3>`,
		`<tr><td class="mono">amount</td><td>must be a whole number of minor units</td></tr>`,
		`<tr><td class="mono">&lt;currency&gt;</td><td>must be an ISO 4217 code</td></tr>`,
		// ErrorInfo, its metadata in order
		`<tr><th>Reason</th><td class="mono">AMOUNT_NOT_WHOLE</td></tr>`,
		`<tr><th>Domain</th><td class="mono">payments.example</td></tr>`,
		`<tr><th class="mono">alpha</th><td>first</td></tr>`+"\n"+`<tr><th class="mono">zeta</th><td>last</td></tr>`,
		// RetryInfo
		`The caller was told to retry after 1.5s: a hint, not a rule.`,
		// PreconditionFailure
		`<tr><td class="mono">TOS</td><td class="mono">acme.example</td><td>terms not accepted</td></tr>`,
		// ResourceInfo
		`<tr><th>Type</th><td class="mono">payment_intent</td></tr>`, `<tr><th>Owner</th><td class="mono">alice</td></tr>`,
		`<tr><th>Description</th><td>already captured</td></tr>`,
		// Help: a link, and a script's URL defused
		`<a href="https://docs.example/amounts" rel="noreferrer">Amounts</a>`, `<a href="#ZgotmplZ" rel="noreferrer">Hostile</a>`,
		// LocalizedMessage
		`<span class="mono">fr-FR</span>: montant invalide`,
		// any other type
		`<h3 class="mono">type.googleapis.com/google.rpc.DebugInfo</h3>`, `&#34;detail&#34;: &#34;stack elided&#34;`,
		// a type unknown to this build
		`<h3 class="mono">type.googleapis.com/acme.v1.Unheard</h3>`, `A type this build does not know`,
	)
	if strings.Contains(a.body, "<currency>") || strings.Contains(a.body, "<request>") {
		t.Errorf("the key page holds unescaped input")
	}

	v := decode(t, f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil))
	details, _ := v["details"].([]any)
	if len(details) != 9 {
		t.Fatalf("the API's details: %v", v["details"])
	}
	first := details[0].(map[string]any)
	violations := first["value"].(map[string]any)["fieldViolations"].([]any)
	if first["type"] != "type.googleapis.com/google.rpc.BadRequest" || violations[1].(map[string]any)["field"] != "<currency>" {
		t.Errorf("the API's BadRequest: %v", first)
	}
	if retry := details[2].(map[string]any); retry["value"].(map[string]any)["retryDelay"] != "1.500s" {
		t.Errorf("the API's RetryInfo: %v", retry)
	}
	if unknown := details[8].(map[string]any); unknown["type"] != "type.googleapis.com/acme.v1.Unheard" || unknown["value"] != nil {
		t.Errorf("the API's unknown detail: %v", unknown)
	}
}

// A key taken over after its lease ran out, then completed with a
// response and metadata, tells its story: attempt 2 and one takeover in
// words, the response as protojson, the header and trailer, the intent
// linked, and no release offered.
func TestKeyPage_TellsTheStoryOfATakeover(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	k := storage.RecordKey{Scope: principal, Key: "order-1"}
	first := time.Now().Add(-3 * time.Minute)
	req := storage.ClaimRequest{Key: k, Scheme: storage.FingerprintScheme, Now: first, Lease: time.Minute, TTL: time.Hour}
	if _, _, err := f.db.Claim(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Now = time.Now()
	outcome, rec, err := f.db.Claim(ctx, req)
	if err != nil || outcome != storage.OutcomeTakeover {
		t.Fatalf("second claim: %v %v", outcome, err)
	}
	a := f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	wantAll(t, "the key in flight", a.body,
		`<td id="state">in flight: a handler holds the key`, `<p id="attempts">Attempt 2. The handler ran 2 times: 1 takeover, after a lease ran out.</p>`,
		`<td id="lease">runs out in `, `<td class="mono" id="owner">`+rec.Owner+`</td>`,
		`<p id="no-answer">None yet: the handler has not stored a result.</p>`)
	if strings.Contains(a.body, releaseButton) {
		t.Errorf("a key in flight offers a release")
	}

	res := created(t, "pi_0123456789abcdef01234567")
	res.Header = map[string][]string{"x-request-id": {"req-<1>"}, "trace-bin": {"\x00\xff"}}
	res.Trailer = map[string][]string{"x-served-by": {"replica-a"}}
	done := rec.Completed(res)
	done.Durability = storage.Transactional
	if err := f.db.Complete(ctx, k, done); err != nil {
		t.Fatal(err)
	}
	a = f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	wantAll(t, "the key completed", a.body,
		`<td id="state">completed: a retry is answered with the stored answer below</td>`,
		`<td id="claim-time">`+rec.ClaimTime.UTC().Format(time.RFC3339)+` (`,
		`<td id="expiry">`+rec.Expiry.UTC().Format(time.RFC3339)+` (in `,
		`<p id="attempts">Attempt 2. The handler ran 2 times: 1 takeover, after a lease ran out.</p>`,
		`<span class="code-ok" id="code">OK</span>: a response of type <span class="mono">payments.v1.CreatePaymentIntentResponse</span>`,
		`&#34;amount&#34;: &#34;12.34&#34;`,
		`<tr><td class="mono">x-request-id</td><td class="mono">req-&lt;1&gt;</td></tr>`,
		`<tr><td class="mono">trace-bin</td><td class="mono">AP8</td></tr>`,
		`<tr><td class="mono">x-served-by</td><td class="mono">replica-a</td></tr>`,
		`<a href="/intent?id=pi_0123456789abcdef01234567&amp;principal=alice" id="intent">pi_0123456789abcdef01234567</a>`,
		`<td id="transactional">yes`,
	)
	if strings.Contains(a.body, `id="lease"`) || strings.Contains(a.body, releaseButton) {
		t.Errorf("a completed success shows a lease or offers a release")
	}
	v := decode(t, f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil))
	if h, _ := v["header"].(map[string]any); len(h) != 2 || v["details"] != nil {
		t.Errorf("the API's header and details: %v %v", v["header"], v["details"])
	}
}

// A run of many takeovers is counted in words too.
func TestAttemptsInWords(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	k := storage.RecordKey{Scope: principal, Key: "order-1"}
	start := time.Now().Add(-10 * time.Minute)
	for i := range 4 {
		req := storage.ClaimRequest{Key: k, Scheme: storage.FingerprintScheme, Now: start.Add(time.Duration(i) * 2 * time.Minute), Lease: time.Minute, TTL: time.Hour}
		if _, _, err := f.db.Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	a := f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	wantAll(t, "the key page", a.body,
		`<p id="attempts">Attempt 4. The handler ran 4 times: 3 takeovers, each after a lease ran out.</p>`,
		`<td id="state">in flight, its lease ran out</td>`, `<td id="lease">ran out `,
		`<td id="next-retry">The lease ran out: a retry takes the claim over, unless this process, which made the claim, still runs its handler or commit`)
}

// GET / with a principal and key leads to the key page; a key never used
// is a 404 naming it; a bad principal is a 400.
func TestLookup_ByPrincipalAndKey_LeadsToTheKeyPage(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", invalid(), true)
	req, _ := http.NewRequest("GET", f.url+"/"+query("order-1"), nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != keyPath("order-1") {
		t.Errorf("GET / with a principal and key: %d to %q, want 303 to %q", resp.StatusCode, loc, keyPath("order-1"))
	}
	if a := f.call(t, "GET", "/"+query("order-1"), operatorToken, nil); a.status != http.StatusOK || !strings.Contains(a.body, `id="record"`) {
		t.Errorf("the key page followed: %d", a.status)
	}
	if a := f.call(t, "GET", keyPath("never"), operatorToken, nil); a.status != http.StatusNotFound || !strings.Contains(a.body, `no record of key &#34;never&#34;`) {
		t.Errorf("a key never used: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/key?principal=a+b&key=k", operatorToken, nil); a.status != http.StatusBadRequest {
		t.Errorf("a principal that names none: %d %s", a.status, a.body)
	}
}

// The search form finds an intent by its id alone, whoever owns it, and
// leads to its page, which names the principal.
func TestLookup_ByIntentIDAlone_LeadsToTheIntent(t *testing.T) {
	f := start(t)
	const id = "pi_0123456789abcdef01234567"
	if err := f.intents.CreateIntent(context.Background(), "bob", "order-7", &paymentsv1.PaymentIntent{Id: id, Amount: "7"}); err != nil {
		t.Fatal(err)
	}
	a := f.call(t, "GET", "/?"+url.Values{"principal": {""}, "key": {id}}.Encode(), operatorToken, nil)
	wantAll(t, "the intent found by its id", a.body, `<td class="mono" id="intent-principal">bob</td>`, `&#34;amount&#34;: &#34;7&#34;`,
		`<a href="/key?key=order-7&amp;principal=bob" id="intent-key">order-7</a>`)
	if a.status != http.StatusOK {
		t.Errorf("the intent found by its id: %d", a.status)
	}
}

// A key looked up alone: held by one principal, its page opens; by
// several, they are listed, each linking to its page; by none, a 404 says
// so. GET /api/v1/keys lists the principals holding it.
func TestLookup_ByKeyAlone(t *testing.T) {
	f := start(t)
	f.storeAs(t, "bob", "shared", invalid(), false)
	f.storeAs(t, principal, "shared", invalid(), false)
	f.storeAs(t, "bob", "bobs-own", invalid(), false)

	a := f.call(t, "GET", "/?key=shared", operatorToken, nil)
	wantAll(t, "the principals holding a shared key", a.body,
		`<tr><td class="mono"><a href="/key?key=shared&amp;principal=alice">alice</a></td><td>completed</td></tr>`,
		`<tr><td class="mono"><a href="/key?key=shared&amp;principal=bob">bob</a></td><td>completed</td></tr>`)
	if a.status != http.StatusOK || strings.Contains(a.body, `id="more-holders"`) {
		t.Errorf("a key two principals hold: %d", a.status)
	}
	if a := f.call(t, "GET", "/?key=bobs-own", operatorToken, nil); a.status != http.StatusOK || !strings.Contains(a.body, `<td class="mono">bob</td>`) ||
		!strings.Contains(a.body, `id="record"`) {
		t.Errorf("a key one principal holds: %d, want its key page\n%s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/?key=nobodys", operatorToken, nil); a.status != http.StatusNotFound || !strings.Contains(a.body, `no principal holds key &#34;nobodys&#34;`) {
		t.Errorf("a key no principal holds: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/?key=a%01b", operatorToken, nil); a.status != http.StatusBadRequest {
		t.Errorf("a key that is none: %d %s", a.status, a.body)
	}

	v := decode(t, f.call(t, "GET", "/api/v1/keys?key=shared", operatorToken, nil))
	ps, _ := v["principals"].([]any)
	if len(ps) != 2 || ps[0].(map[string]any)["principal"] != "alice" || ps[1].(map[string]any)["principal"] != "bob" || v["more"] != false {
		t.Errorf("GET /api/v1/keys?key=shared: %v", v)
	}
	if a := f.call(t, "GET", "/api/v1/keys?key=", operatorToken, nil); a.status != http.StatusBadRequest {
		t.Errorf("GET /api/v1/keys without a key: %d %s", a.status, a.body)
	}
	if a := f.call(t, "GET", "/api/v1/keys?key=shared", "", nil); a.status != http.StatusUnauthorized || strings.Contains(a.body, "bob") {
		t.Errorf("GET /api/v1/keys without an operator key: %d %s", a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"msg":"console key lookup","operator":"carol","key":"shared","principals":2`) {
		t.Errorf("no log line of the key lookup:\n%s", log)
	}
}

// A key released and used again shows its release: when, by whom, the
// attempt and the error it held, on the page and in the JSON API. A key
// never released says so.
func TestKeyPage_ShowsTheReleaseHistory(t *testing.T) {
	f := start(t)
	f.store(t, "order-1", &storage.Result{Status: &spb.Status{Code: int32(codes.InvalidArgument), Message: "amount <must> be positive"}}, true)
	a := f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	wantAll(t, "the key never released", a.body, `<p id="no-releases">Never released.</p>`, releaseButton)
	before := time.Now()
	if a := f.call(t, "POST", "/api/v1/release", operatorToken, url.Values{"principal": {principal}, "key": {"order-1"}}); a.status != http.StatusOK {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	f.store(t, "order-1", created(t, "pi_0123456789abcdef01234567"), true)
	a = f.call(t, "GET", keyPath("order-1"), operatorToken, nil)
	wantAll(t, "the key released and used again", a.body,
		`<table id="releases">`, `<td>carol</td><td>1</td><td class="code-error">INVALID_ARGUMENT</td><td>amount &lt;must&gt; be positive</td></tr>`)
	v := decode(t, f.call(t, "GET", "/api/v1/record"+query("order-1"), operatorToken, nil))
	releases, _ := v["releases"].([]any)
	if len(releases) != 1 {
		t.Fatalf("the API's releases: %v", v["releases"])
	}
	r := releases[0].(map[string]any)
	at, err := time.Parse(time.RFC3339Nano, r["time"].(string))
	if err != nil || at.Before(before.Add(-time.Second)) || r["operator"] != "carol" || r["attempt"] != 1.0 || r["code"] != "INVALID_ARGUMENT" || r["message"] != "amount <must> be positive" {
		t.Errorf("the API's release: %v (%v)", r, err)
	}
}
