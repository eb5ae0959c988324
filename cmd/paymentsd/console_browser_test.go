package main

import (
	"context"
	"encoding/json"
	"flag"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
)

// updateScreenshots has TestConsole_InABrowser write the screenshots that
// docs/console.md shows, as go test -run TestConsole_InABrowser
// ./cmd/paymentsd -update-screenshots. Without it they are taken, not
// written.
var updateScreenshots = flag.Bool("update-screenshots", false, "write the console's screenshots in docs/")

// browser is a headless Chromium driven through the DevTools protocol.
type browser struct{ ctx context.Context }

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
	return &browser{ctx: ctx}
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

// screenshot takes a PNG of the whole page. With -update-screenshots, it
// writes it to docs/name.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserStep)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(900, 600)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if *updateScreenshots {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lookUp submits the page's lookup form for principal and key, and
// returns the status of the page that answers.
func (b *browser) lookUp(t *testing.T, principal, key string) int64 {
	t.Helper()
	return b.load(t, "look up "+key,
		chromedp.SetValue(chromedp.CSS(`input[name="principal"]`), principal),
		chromedp.SetValue(chromedp.CSS(`input[name="key"]`), key),
		chromedp.Submit(chromedp.CSS(`input[name="key"]`)),
	)
}

// The console in a real browser: an operator logs in with the form (a
// wrong key is answered 401), looks up a create made over gRPC and sees
// its state and intent, and follows the link to the intent. The success
// offers no release. A stored validation error does: its release button
// opens a confirmation naming what will be deleted, confirming releases
// it, and the key then runs fresh with a corrected body.
func TestConsole_InABrowser(t *testing.T) {
	b := newBrowser(t)
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--admin-listen", "127.0.0.1:0", "--admin-keys", adminKeysFile(t))
	base := "http://" + d.logAddr(t, "console listening")
	principal := devPrincipal("tok-browser")
	ok := d.create(withCreds("tok-browser", "order-ok"), seedRequest("100000000"))
	if ok.err != nil {
		t.Fatal(ok.err)
	}
	id := ok.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
	if a := d.create(withCreds("tok-browser", "order-bad"), seedRequest("12.34")); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("a create of a bad amount: %v", a.err)
	}

	if got := b.load(t, "open the console", chromedp.Navigate(base+"/")); got != 401 {
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
	if who := b.text(t, "strong"); got != 200 || who != consoleOperator {
		t.Fatalf("logged in: %d as %q, want 200 as %q", got, who, consoleOperator)
	}

	if got := b.lookUp(t, principal, "order-ok"); got != 200 {
		t.Errorf("lookup of the create: %d", got)
	}
	if rec, intent := b.text(t, "#record"), b.text(t, "#intent"); !strings.Contains(rec, "state:              completed") || intent != id {
		t.Errorf("lookup of the create: intent %q (want %q), record:\n%s", intent, id, rec)
	}
	if got := b.load(t, "follow the record's link to its intent", chromedp.Click(chromedp.ID("intent"))); got != 200 {
		t.Errorf("the intent's page: %d", got)
	}
	// protojson varies its spacing on purpose: read the JSON, not its bytes.
	var intent struct{ ID, Amount string }
	if text := b.text(t, "#intent-json"); json.Unmarshal([]byte(text), &intent) != nil || intent.ID != id || intent.Amount != "100000000" {
		t.Errorf("the intent's page shows:\n%s", text)
	}
	b.load(t, "open the record again", chromedp.Navigate(base+"/?"+url.Values{"principal": {principal}, "key": {"order-ok"}}.Encode()))
	if b.has(t, `form[action="/release"]`) {
		t.Errorf("the success's page offers a release, which the rules always refuse")
	}

	b.lookUp(t, principal, "order-bad")
	if rec := b.text(t, "#record"); !strings.Contains(rec, "INVALID_ARGUMENT") {
		t.Errorf("lookup of the stored error:\n%s", rec)
	}
	got = b.load(t, "release the stored error", chromedp.Click(chromedp.CSS(`form#release button`)))
	confirm := b.text(t, "#confirm")
	for _, want := range []string{principal, "order-bad", "INVALID_ARGUMENT", "Attempt\t1"} {
		if !strings.Contains(confirm, want) {
			t.Errorf("the confirmation lacks %q: %d\n%s", want, got, confirm)
		}
	}
	if got != 200 {
		t.Errorf("the confirmation: %d", got)
	}
	b.screenshot(t, "console-release.png")
	got = b.load(t, "confirm the release", chromedp.Click(chromedp.CSS(`form#confirm-release button`)))
	if released := b.text(t, "#released"); got != 200 || !strings.Contains(released, "order-bad") {
		t.Errorf("release of the stored error: %d %q", got, released)
	}
	if got := b.lookUp(t, principal, "order-bad"); got != 404 || !strings.Contains(b.text(t, "#missing"), "no record of key") {
		t.Errorf("the key after its release: %d, want 404", got)
	}
	fresh := d.create(withCreds("tok-browser", "order-bad"), seedRequest("200000000"))
	if fresh.err != nil || fresh.replayed() {
		t.Fatalf("the key after its release, with a corrected body: %v, replayed %v", fresh.err, fresh.replayed())
	}
	b.lookUp(t, principal, "order-bad")
	freshID := fresh.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
	if intent := b.text(t, "#intent"); intent != freshID {
		t.Errorf("the key's record after it ran fresh names intent %q, want %q", intent, freshID)
	}

	if got := b.load(t, "open the keys in flight", chromedp.Click(chromedp.ID("in-flight-link"))); got != 200 {
		t.Errorf("the keys in flight: %d", got)
	}
	if none := b.text(t, "#none-in-flight"); none != "No key is in flight." {
		t.Errorf("the keys in flight: %q", none)
	}
	d.waitLogText(t, "idempotency key released", `"operator":"carol"`, `"code":"INVALID_ARGUMENT"`)
	d.waitLogText(t, "console in-flight list", `"operator":"carol"`)
}
