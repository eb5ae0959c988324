package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// screenshotsEnv names the directory TestConsole_InABrowser writes its
// screenshots to. A relative one is relative to the repository's root,
// so PAYMENTSD_CONSOLE_SCREENSHOTS=docs writes those docs/console.md
// shows. Without it they go to the test's temporary directory.
const screenshotsEnv = "PAYMENTSD_CONSOLE_SCREENSHOTS"

// browser is a headless Chromium driven through the DevTools protocol.
type browser struct {
	ctx   context.Context
	shots string // where screenshots go without screenshotsEnv
}

// newBrowser starts Debian's chromium, headless, for the test's length.
// Without it the test is skipped, or fails under CI=true.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		needTool(t, "chromium not found: apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root, whom Chromium's sandbox refuses
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to ctx alone
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{ctx: ctx, shots: t.TempDir()}
}

// browserStep bounds one step in the browser.
const browserStep = time.Minute

// load runs steps, which load a page, and returns that page's HTTP status.
func (b *browser) load(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return resp.Status
}

// text is the text of the element matching the CSS selector sel.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// has reports whether the page has an element matching the CSS selector
// sel.
func (b *browser) has(t *testing.T, sel string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	q, _ := json.Marshal(sel)
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+string(q)+`).length`))
	if err != nil {
		t.Fatalf("look for %s: %v", sel, err)
	}
	return n > 0
}

// Viewports of the screenshots: a laptop's, and a phone's.
const (
	wideWidth, wideHeight   = 1280, 900
	phoneWidth, phoneHeight = 390, 844
)

// screenshot takes a PNG of the whole page at width by height, as name in
// the directory of screenshotsEnv, and sets the viewport back to wide.
func (b *browser) screenshot(t *testing.T, name string, width, height int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(wideWidth, wideHeight)); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv(screenshotsEnv)
	switch {
	case dir == "":
		dir = b.shots
	case !filepath.IsAbs(dir):
		dir = filepath.Join("..", "..", "..", dir) // from the top of the repository
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// eval is the value of the JavaScript expression js on the page. The
// page itself runs none: this is the test reading it, as DevTools does.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// lookUp opens the lookup page by the nav bar's link, submits its form
// for principal ("" for none) and key, and returns the status of the page
// that answers.
func (b *browser) lookUp(t *testing.T, principal, key string) int64 {
	t.Helper()
	b.load(t, "open the lookup", chromedp.Click(chromedp.ID("lookup-link")))
	steps := []chromedp.Action[chromedp.Void]{chromedp.SetValue(chromedp.CSS(`input[name="key"]`), key)}
	if principal != "" { // the form opens empty; chromedp cannot set "", which it reads back as no value
		steps = append(steps, chromedp.SetValue(chromedp.CSS(`input[name="principal"]`), principal))
	}
	return b.load(t, "look up "+key, append(steps, chromedp.Submit(chromedp.CSS(`input[name="key"]`)))...)
}

// The console in a real browser, against the real binary: every page,
// each way of looking up, the release's whole flow, its refusals, a
// released key's history, and a create held in flight: its page, what a
// retry gets once its lease ran out, and its release refused. Screenshots
// of the key page, the confirmation, the keys in flight and a phone's
// view are taken (screenshotsEnv). The lease is a second, so that the
// held create's runs out.
func TestConsole_InABrowser(t *testing.T) {
	b := newBrowser(t)
	d, base := startConsole(t, "", spec{args: []string{"--lease", "1s"}})
	c := &consoleTour{b: b, d: d, base: base, principal: devPrincipal("tok-browser"), other: devPrincipal("tok-browser-2")}
	c.id = createIntent(t, d, "tok-browser", "order-ok", "100000000")
	if a := d.createSeed("tok-browser", "order-bad", "12.34"); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("a create of a bad amount: %v", a.err)
	}
	createIntent(t, d, "tok-browser", "shared-key", "300000000")
	createIntent(t, d, "tok-browser-2", "shared-key", "300000000")

	c.logIn(t)
	c.storedError(t)
	c.byIntentID(t)
	c.byKeyAlone(t)
	c.release(t)
	c.refusals(t)
	c.inFlight(t)
	d.waitLine(t, "idempotency key released", map[string]any{"operator": "carol", "code": "INVALID_ARGUMENT"}, logWait)
	d.waitLine(t, "console in-flight list", map[string]any{"operator": "carol"}, logWait)
}

// consoleTour is TestConsole_InABrowser's browser and daemon, with the
// intent order-ok made and the principals of tok-browser and tok-browser-2.
type consoleTour struct {
	b                    *browser
	d                    *daemon
	base                 string
	principal, other, id string
}

// logIn: the login page, a wrong key refused, then consoleToken's.
func (c *consoleTour) logIn(t *testing.T) {
	t.Helper()
	b := c.b
	if got := b.load(t, "open the console", chromedp.Navigate(c.base+"/")); got != 401 || !b.has(t, `input[name="token"][type="password"]`) {
		t.Errorf("the page without a key: %d, want 401 and the login form", got)
	}
	got := b.load(t, "log in with a wrong key",
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "not-an-operator-key"),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)))
	if msg := b.text(t, "p.error"); got != 401 || !strings.Contains(msg, "not an operator key") {
		t.Errorf("login with a wrong key: %d %q, want 401", got, msg)
	}
	got = b.load(t, "log in",
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), consoleToken),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)))
	if who := b.text(t, "#operator"); got != 200 || who != consoleOperator || !b.has(t, "form#lookup") || !b.has(t, "nav #in-flight-link") {
		t.Fatalf("logged in: %d as %q, want 200 as %q and the lookup form", got, who, consoleOperator)
	}
}

// storedError: by principal and key, the stored error, its BadRequest a
// table.
func (c *consoleTour) storedError(t *testing.T) {
	t.Helper()
	b := c.b
	if got := b.lookUp(t, c.principal, "order-bad"); got != 200 {
		t.Errorf("lookup of the stored error: %d", got)
	}
	if code, state := b.text(t, "#code"), b.text(t, "#state"); code != "INVALID_ARGUMENT" || !strings.HasPrefix(state, "completed") {
		t.Errorf("the stored error's page: code %q, state %q", code, state)
	}
	if violations := b.text(t, "table.bad-request"); !strings.Contains(violations, "amount") {
		t.Errorf("the stored error's field violations: %q", violations)
	}
	if attempts := b.text(t, "#attempts"); attempts != "Attempt 1. The handler ran once: no takeover." {
		t.Errorf("the stored error's attempts: %q", attempts)
	}
	if !b.has(t, "#no-releases") || !b.has(t, "form#release") {
		t.Errorf("the stored error's page lacks its empty release history or its release button")
	}
	b.screenshot(t, "console-key.png", wideWidth, wideHeight)
}

// byIntentID: by intent id alone, the intent's page names its principal
// and the key that created it, which links to the key's page.
func (c *consoleTour) byIntentID(t *testing.T) {
	t.Helper()
	b := c.b
	if got := b.lookUp(t, "", c.id); got != 200 {
		t.Errorf("lookup of intent %s: %d", c.id, got)
	}
	if owner, key := b.text(t, "#intent-principal"), b.text(t, "#intent-key"); owner != c.principal || key != "order-ok" {
		t.Errorf("the intent's page names principal %q and key %q", owner, key)
	}
	// protojson varies its spacing on purpose: read the JSON, not its bytes.
	var intent struct{ ID, Amount string }
	if text := b.text(t, "#intent-json"); json.Unmarshal([]byte(text), &intent) != nil || intent.ID != c.id || intent.Amount != "100000000" {
		t.Errorf("the intent's page shows:\n%s", text)
	}
	if got := b.load(t, "follow the intent's key", chromedp.Click(chromedp.ID("intent-key"))); got != 200 || b.text(t, "#intent") != c.id {
		t.Errorf("the key page of the intent's key: %d", got)
	}
	if b.has(t, "form#release") {
		t.Errorf("the success's page offers a release, which the rules always refuse")
	}
}

// byKeyAlone: held by one principal, its page opens; by two, both are
// listed, each linking to its page.
func (c *consoleTour) byKeyAlone(t *testing.T) {
	t.Helper()
	b := c.b
	if got := b.lookUp(t, "", "order-ok"); got != 200 || b.text(t, "#intent") != c.id {
		t.Errorf("lookup of a key one principal holds: %d", got)
	}
	if got := b.lookUp(t, "", "shared-key"); got != 200 || eval[int](t, b, `document.querySelectorAll("#holders tbody tr").length`) != 2 {
		t.Fatalf("lookup of a key two principals hold: %d", got)
	}
	if got := b.load(t, "pick the other principal", chromedp.Click(chromedp.CSS(`#holders a[href*="`+c.other[4:]+`"]`))); got != 200 ||
		!strings.Contains(b.text(t, "#record"), c.other) {
		t.Errorf("the key page of the principal picked: %d", got)
	}
}

// release: button, confirmation, done; then the key's history, before and
// after it runs fresh.
func (c *consoleTour) release(t *testing.T) {
	t.Helper()
	b := c.b
	b.lookUp(t, c.principal, "order-bad")
	got := b.load(t, "release the stored error", chromedp.Click(chromedp.CSS(`form#release button`)))
	confirm := b.text(t, "#confirm")
	for _, want := range []string{c.principal, "order-bad", "INVALID_ARGUMENT", "Attempt\t1", "Attempt began"} {
		if !strings.Contains(confirm, want) {
			t.Errorf("the confirmation lacks %q: %d\n%s", want, got, confirm)
		}
	}
	if got != 200 || !b.has(t, `form#confirm-release input[name="attempt"][value="1"]`) || !b.has(t, "a#cancel") {
		t.Errorf("the confirmation: %d, or its form lacks the attempt", got)
	}
	b.screenshot(t, "console-release.png", wideWidth, wideHeight)
	got = b.load(t, "confirm the release", chromedp.Click(chromedp.CSS(`form#confirm-release button`)))
	if released := b.text(t, "#released"); got != 200 || !strings.Contains(released, "order-bad") {
		t.Errorf("release of the stored error: %d %q", got, released)
	}
	// Released and not used since: its page shows its history.
	if got := b.lookUp(t, c.principal, "order-bad"); got != 200 || b.has(t, "#missing") {
		t.Errorf("the key after its release: %d, want 200, its page", got)
	}
	if next, releases := b.text(t, "#next-request"), b.text(t, "#releases tbody"); !strings.Contains(next, "runs afresh") ||
		!strings.Contains(releases, consoleOperator) || !strings.Contains(releases, "INVALID_ARGUMENT") || !strings.Contains(releases, "amount") {
		t.Errorf("the released key's page: next request %q, releases %q", next, releases)
	}
	freshID := createIntent(t, c.d, "tok-browser", "order-bad", "200000000")
	b.lookUp(t, c.principal, "order-bad")
	if intent := b.text(t, "#intent"); intent != freshID {
		t.Errorf("the key's record after it ran fresh names intent %q, want %q", intent, freshID)
	}
	if releases := b.text(t, "#releases tbody"); !strings.Contains(releases, consoleOperator) || !strings.Contains(releases, "INVALID_ARGUMENT") {
		t.Errorf("the key's release history: %q", releases)
	}
}

// refusals: a success's release, and a release confirmed of a record
// since released and stored again.
func (c *consoleTour) refusals(t *testing.T) {
	t.Helper()
	b, d, base, principal := c.b, c.d, c.base, c.principal
	if got := b.load(t, "release a success", chromedp.Navigate(base+"/release?"+url.Values{"principal": {principal}, "key": {"order-ok"}}.Encode())); got != 409 ||
		!strings.Contains(b.text(t, "#refusal"), "its effects stand") || b.has(t, "form#confirm-release") {
		t.Errorf("the release of a success: %d", got)
	}
	if a := d.createSeed("tok-browser", "order-stale", "12.34"); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("a create of a bad amount: %v", a.err)
	}
	b.load(t, "open a confirmation", chromedp.Navigate(base+"/release?"+url.Values{"principal": {principal}, "key": {"order-stale"}}.Encode()))
	release := base + "/api/v1/release?" + url.Values{"principal": {principal}, "key": {"order-stale"}}.Encode()
	if a := httpCall(t, "POST", release, "", bearerHeader(consoleToken)...); a.status != 200 {
		t.Fatalf("release behind the confirmation's back: %d %s", a.status, a.body)
	}
	if a := d.createSeed("tok-browser", "order-stale", "12.34"); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("the bad create again: %v", a.err)
	}
	got := b.load(t, "confirm the stale release", chromedp.Click(chromedp.CSS(`form#confirm-release button`)))
	if refusal := b.text(t, "#refusal"); got != 409 || !strings.Contains(refusal, "changed since you confirmed") || !b.has(t, "a#back") {
		t.Errorf("a release confirmed of a record since replaced: %d %q", got, refusal)
	}
	if a := httpCall(t, "GET", consoleRecordURL(base, principal, "order-stale"), "", bearerHeader(consoleToken)...); a.status != 200 {
		t.Errorf("the record after the refusal: %d, want it kept", a.status)
	}
}

// inFlight: a create held in flight, listed, transactional, in a table
// that fits a laptop and scrolls in its own box on a phone; then its page
// (heldInTheBrowser), and the list once it is let go.
func (c *consoleTour) inFlight(t *testing.T) {
	t.Helper()
	b := c.b
	heldKey := "checkout-2026-cart-7f3a9c1e5b2d4a6f8e0c1b3d5f7a9c2e-attempt-1"
	letGo := holdCreate(t, c.d, c.base, "tok-browser", heldKey)
	if got := b.load(t, "open the keys in flight", chromedp.Click(chromedp.ID("in-flight-link"))); got != 200 {
		t.Errorf("the keys in flight: %d", got)
	}
	if row := b.text(t, "#in-flight tbody tr"); !strings.Contains(row, heldKey) || !strings.Contains(row, c.principal) || b.text(t, "#in-flight td.transactional") != "yes" {
		t.Errorf("the held create's row: %q, transactional %q", row, b.text(t, "#in-flight td.transactional"))
	}
	if fits := eval[bool](t, b, `(s => s.scrollWidth <= s.clientWidth)(document.querySelector("#in-flight").parentElement)`); !fits {
		t.Errorf("the table of keys in flight overflows its box at %d px", wideWidth)
	}
	b.screenshot(t, "console-in-flight.png", wideWidth, wideHeight)
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(phoneWidth, phoneHeight, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if page, inner := eval[int](t, b, `document.documentElement.scrollWidth`), eval[int](t, b, `window.innerWidth`); page > inner {
		t.Errorf("on a phone the page is %d px wide, more than its %d px: the table must scroll in its own box", page, inner)
	}
	b.screenshot(t, "console-phone.png", phoneWidth, phoneHeight)
	heldInTheBrowser(t, b, c.d, c.base, c.principal, heldKey)
	letGo()
	if got := b.load(t, "the keys in flight once the create is done", chromedp.Click(chromedp.ID("in-flight-link"))); got != 200 || b.text(t, "#none-in-flight") != "No key is in flight." {
		t.Errorf("the keys in flight once the create is done: %d", got)
	}
}

// heldInTheBrowser opens the page of key, a create of principal that
// holdCreate holds, from its row of the keys in flight, once its lease
// ran out. The page shows it in flight, held by this process, and says a
// retry is told so however late the lease: a retry then is ABORTED. Its
// release is refused as in flight, from the page and by the JSON API.
func heldInTheBrowser(t *testing.T, b *browser, d *daemon, base, principal, key string) {
	t.Helper()
	a := httpCall(t, "GET", consoleRecordURL(base, principal, key), "", bearerHeader(consoleToken)...)
	var held struct {
		Found, Stored bool
		Record        struct {
			LeaseExpiry time.Time `json:"lease_expiry"`
		}
	}
	if err := json.Unmarshal(a.body, &held); err != nil || a.status != 200 || !held.Found || held.Stored {
		t.Fatalf("the held create in the JSON API: %d %s", a.status, a.body)
	}
	time.Sleep(time.Until(held.Record.LeaseExpiry) + 100*time.Millisecond)
	if got := b.load(t, "open the held create's page", chromedp.Click(chromedp.ID("in-flight-link")), chromedp.Click(chromedp.CSS(`#in-flight tbody a`))); got != 200 {
		t.Errorf("the held create's page, from its row: %d, want 200", got)
	}
	state, next, lease := b.text(t, "#state"), b.text(t, "#next-retry"), b.text(t, "#lease")
	if state != "in flight: a handler of this process holds the key" || !strings.Contains(next, "This process holds the claim") ||
		!strings.Contains(lease, "ran out") || !strings.Contains(lease, "does not apply while this process holds the claim") ||
		!strings.Contains(b.text(t, "#holder"), "this process") || !strings.HasPrefix(b.text(t, "#transactional"), "yes") ||
		!strings.HasPrefix(b.text(t, "#attempts"), "Attempt 1.") {
		t.Errorf("the held create's page: state %q, next retry %q, lease %q", state, next, lease)
	}
	if !b.has(t, "#no-release") || b.has(t, "form#release") {
		t.Errorf("the held create's page offers a release, or does not say why not")
	}
	ctx, cancel := context.WithTimeout(withCreds("tok-browser", key), time.Minute)
	defer cancel()
	if a := d.create(ctx, seedRequest("400000000")); status.Code(a.err) != codes.Aborted {
		t.Errorf("a retry of the held create once its lease ran out: %v, want ABORTED, in flight, as its page says", a.err)
	}
	got := b.load(t, "release the held create", chromedp.Navigate(base+"/release?"+url.Values{"principal": {principal}, "key": {key}}.Encode()))
	if refusal := b.text(t, "#refusal"); got != 409 || !strings.Contains(refusal, "the key is in flight") {
		t.Errorf("the release of the held create from the page: %d %q", got, refusal)
	}
	release := base + "/api/v1/release?" + url.Values{"principal": {principal}, "key": {key}}.Encode()
	if a := httpCall(t, "POST", release, "", bearerHeader(consoleToken)...); a.status != 409 || !strings.Contains(string(a.body), `"refusal": "in_flight"`) {
		t.Errorf("the release of the held create by the API: %d %s", a.status, a.body)
	}
}

// A principal's intents and their suspected double payments in a real
// browser, against the real binary over a seeded file (seedPayments):
// from the lookup page's form, the intents page lists the 4 newest
// first, each with its key; the duplicates page finds the one group,
// both order-7 intents, and neither order-8 nor order-6. Screenshots of
// both pages are taken (screenshotsEnv).
func TestConsole_InABrowser_IntentsAndDuplicates(t *testing.T) {
	b := newBrowser(t)
	principal := devPrincipal("shop-token")
	path, twice := seedPayments(t, principal, time.Now())
	d, base := startConsole(t, "", spec{db: path})
	b.load(t, "open the console", chromedp.Navigate(base+"/"))
	if got := b.load(t, "log in",
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), consoleToken),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`))); got != 200 || !b.has(t, "form#principal-search") {
		t.Fatalf("logged in: %d, or the lookup page offers no search of a principal's intents", got)
	}
	texts := func(sel string) []string { // as JSON: an array is not returned by value
		q, _ := json.Marshal(sel)
		var out []string
		if err := json.Unmarshal([]byte(eval[string](t, b, `JSON.stringify(Array.from(document.querySelectorAll(`+string(q)+`), e => e.textContent))`)), &out); err != nil {
			t.Fatalf("the texts of %s: %v", sel, err)
		}
		return out
	}
	search := func(button string) int64 {
		got := b.load(t, "search by "+button, chromedp.Click(chromedp.ID("lookup-link")),
			chromedp.SetValue(chromedp.CSS(`#principal-search input[name="principal"]`), principal),
			chromedp.Click(chromedp.ID(button)))
		b.text(t, "#duplicates-link, #intents-link") // the page's end: it is all there
		return got
	}

	if got := search("list-intents"); got != 200 {
		t.Errorf("the intents page: %d", got)
	}
	wantKeys := []string{"order-7-try-2", "order-8", "order-7-try-1", "order-6"}
	if keys := texts("table.intents td.intent-key"); !slices.Equal(keys, wantKeys) {
		t.Errorf("the intents page lists the keys %q, want %q, newest first", keys, wantKeys)
	}
	if ids := texts("table.intents td.intent-id"); len(ids) != 4 || ids[0] != twice[0] || b.has(t, "#next-page") {
		t.Errorf("the intents page lists the ids %q, or offers a next page", ids)
	}
	b.screenshot(t, "console-intents.png", wideWidth, wideHeight)

	if got := search("find-duplicates"); got != 200 || !strings.Contains(b.text(t, "#suspect-note"), "not a proof") {
		t.Errorf("the duplicates page: %d, or it does not say a group is no proof", got)
	}
	if groups, ids := texts("section.group"), texts("section.group td.intent-id"); len(groups) != 1 || !slices.Equal(ids, twice) {
		t.Errorf("the duplicates page shows %d groups of intents %q, want one of %q", len(groups), ids, twice)
	}
	if keys := texts("section.group td.intent-key"); !slices.Equal(keys, []string{"order-7-try-2", "order-7-try-1"}) {
		t.Errorf("the group's keys: %q", keys)
	}
	if main := b.text(t, "main"); strings.Contains(main, "order-8") || strings.Contains(main, "order-6") {
		t.Errorf("the duplicates page names a payment that is no duplicate:\n%s", main)
	}
	b.screenshot(t, "console-duplicates.png", wideWidth, wideHeight)
	d.waitLine(t, "console duplicates search", map[string]any{"operator": "carol", "groups": 1.0}, logWait)
}
