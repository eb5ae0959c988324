package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// consoleOperator's key is consoleToken in the files adminKeysFile writes.
const (
	consoleOperator = "carol"
	consoleToken    = "operator-token-e2e"
)

// adminKeysFile writes an --admin-keys file naming consoleOperator.
func adminKeysFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-keys")
	if err := os.WriteFile(path, []byte(auth.KeyLine(consoleOperator, consoleToken)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// consoleRecordURL is the console API's lookup of key of principal.
func consoleRecordURL(base, principal, key string) string {
	return base + "/api/v1/record?" + url.Values{"principal": {principal}, "key": {key}}.Encode()
}

// startConsole starts paymentsd as s says with the console on a free
// port, its operators those of the file keys ("" for adminKeysFile's),
// and returns it with the console's base URL.
func startConsole(t *testing.T, keys string, s spec) (*daemon, string) {
	t.Helper()
	if keys == "" {
		keys = adminKeysFile(t)
	}
	s.args = append([]string{"--admin-listen", "127.0.0.1:0", "--admin-keys", keys}, s.args...)
	d := start(t, s)
	scheme := "http://"
	if s.tls != nil {
		scheme = "https://"
	}
	return d, scheme + d.logAddr(t, "console listening")
}

// A create over gRPC is found through the console's JSON API with an
// operator's key, the lookup logged with the operator's name; a wrong key
// and a customer's token get 401. A stored validation error is released
// through it, after which the key runs fresh with a corrected body; its
// intent is found by its id alone, naming its principal; the release of
// that success is refused.
func TestConsole_LooksUpAndReleasesAGRPCCreate(t *testing.T) {
	d, base := startConsole(t, "", spec{})
	principal := devPrincipal("tok-console")
	if a := d.createSeed("tok-console", "order-1", "12.34"); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("a create of a bad amount: %v", a.err)
	}
	release := base + "/api/v1/release?" + url.Values{"principal": {principal}, "key": {"order-1"}}.Encode()
	if a := httpCall(t, "POST", release, "", bearerHeader(consoleToken)...); a.status != 200 || !strings.Contains(string(a.body), `"code": "INVALID_ARGUMENT"`) {
		t.Fatalf("release of the stored error: %d %s", a.status, a.body)
	}
	a := d.createSeed("tok-console", "order-1", "100000000")
	if a.err != nil || a.replayed() {
		t.Fatalf("the key after its release: %v, replayed %v", a.err, a.replayed())
	}
	id := a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
	byID := base + "/api/v1/intent?id=" + id // by its id alone: the answer names its owner
	if got := httpCall(t, "GET", byID, "", bearerHeader(consoleToken)...); got.status != 200 ||
		!strings.Contains(string(got.body), `"principal": "`+principal+`"`) || !strings.Contains(string(got.body), `"amount": "100000000"`) {
		t.Errorf("intent %s by its id alone: %d %s", id, got.status, got.body)
	}
	target := consoleRecordURL(base, principal, "order-1")
	if got := httpCall(t, "GET", target, "", bearerHeader(consoleToken)...); got.status != 200 ||
		!strings.Contains(string(got.body), `"state": "completed"`) || !strings.Contains(string(got.body), `"intent_id": "`+id+`"`) {
		t.Errorf("lookup of intent %s: %d %s", id, got.status, got.body)
	}
	if a := httpCall(t, "POST", release, "", bearerHeader(consoleToken)...); a.status != 409 || !strings.Contains(string(a.body), `"refusal": "success"`) {
		t.Errorf("release of the success: %d %s", a.status, a.body)
	}
	for _, token := range []string{"wrong-operator-token", "tok-console"} {
		if a := httpCall(t, "GET", target, "", bearerHeader(token)...); a.status != 401 || strings.Contains(string(a.body), id) {
			t.Errorf("lookup with %q: %d %s", token, a.status, a.body)
		}
	}
	line := d.waitLine(t, "console lookup", map[string]any{"operator": "carol"}, logWait)
	if line["principal_hash"] != auth.PrincipalHash(principal) || strings.Contains(d.stderr(), consoleToken) {
		t.Errorf("lookup's log line %v; log holds the operator's token: %v", line, strings.Contains(d.stderr(), consoleToken))
	}
	d.waitLine(t, "idempotency key released", map[string]any{"operator": "carol", "code": "INVALID_ARGUMENT"}, logWait)
}

// With --tls-cert the console is served over TLS with the daemon's
// certificate; --admin-listen without --admin-keys does not start.
func TestConsole_TLS_AndItsFlags(t *testing.T) {
	certs := newCertSet(t, "console")
	_, base := startConsole(t, "", spec{tls: certs})
	client := httpsClient(t, certs.clientTLS(t, ""))
	if a := mustHTTPS(t, client, "GET", consoleRecordURL(base, "alice", "never-used"), "", bearerHeader(consoleToken)...); a.status != 404 {
		t.Errorf("a lookup over TLS: %d %s", a.status, a.body)
	}
	if a := mustHTTPS(t, client, "GET", base+"/", ""); a.status != 401 || a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("the page without a key: %d %v", a.status, a.header)
	}
	if code, stderr, _ := runToExit(t, "--admin-listen", "127.0.0.1:0"); code != 2 || !strings.Contains(stderr, "--admin-listen needs --admin-keys") {
		t.Errorf("--admin-listen alone: exit %d\n%s", code, stderr)
	}
}

// The operators' file is read again when it changes, without a restart:
// a key added is accepted and a key removed refused from then on, and the
// reload is logged and counted.
func TestConsole_AdminKeysReloaded(t *testing.T) {
	keys := adminKeysFile(t)
	d, base := startConsole(t, keys, spec{metrics: true})
	target := consoleRecordURL(base, "alice", "never-used")
	if a := httpCall(t, "GET", target, "", bearerHeader(consoleToken)...); a.status != 404 {
		t.Fatalf("a lookup with carol's key: %d %s", a.status, a.body)
	}
	tmp := keys + ".new"
	if err := os.WriteFile(tmp, []byte(auth.KeyLine("dave", "operator-token-dave")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, keys); err != nil {
		t.Fatal(err)
	}
	d.waitLine(t, "operator keys reloaded", map[string]any{"trigger": "file changed"}, logWait)
	if a := httpCall(t, "GET", target, "", bearerHeader("operator-token-dave")...); a.status != 404 {
		t.Errorf("a lookup with dave's key, added: %d %s", a.status, a.body)
	}
	if a := httpCall(t, "GET", target, "", bearerHeader(consoleToken)...); a.status != 401 {
		t.Errorf("a lookup with carol's key, removed: %d %s", a.status, a.body)
	}
	if got := d.scrape(t)[`paymentsd_credential_reloads_total{file="admin_keys",result="ok"}`]; got != 1 {
		t.Errorf("admin_keys reloads counted: %v, want 1", got)
	}
}

// On PostgreSQL too, the console finds an intent by its id alone and
// names its principal.
func TestConsole_Postgres_IntentByIDAlone(t *testing.T) {
	d, base := startConsole(t, "", spec{db: postgresURL(t)})
	a := d.createSeed("tok-console", "order-1", "100000000")
	if a.err != nil {
		t.Fatal(a.err)
	}
	id := a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
	got := httpCall(t, "GET", base+"/api/v1/intent?id="+id, "", bearerHeader(consoleToken)...)
	if got.status != 200 || !strings.Contains(string(got.body), `"principal": "`+devPrincipal("tok-console")+`"`) {
		t.Errorf("intent %s by its id alone: %d %s", id, got.status, got.body)
	}
	if got := httpCall(t, "GET", base+"/api/v1/intent?id=pi_ffffffffffffffffffffffff", "", bearerHeader(consoleToken)...); got.status != 404 {
		t.Errorf("a missing intent by its id alone: %d %s", got.status, got.body)
	}
}

// createIntent creates an intent of amount over gRPC with token and key,
// and returns its id.
func createIntent(t *testing.T, d *daemon, token, key, amount string) string {
	t.Helper()
	a := d.createSeed(token, key, amount)
	if a.err != nil || a.replayed() {
		t.Fatalf("create %s: %v, replayed %v", key, a.err, a.replayed())
	}
	return a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId()
}

// holdCreate sends a create of key with token and holds it in flight:
// every fsync of d waits until the returned func lets it go, and the
// create's commit with them. It returns once the console lists the key.
// Letting go waits for the create's answer, an intent.
func holdCreate(t *testing.T, d *daemon, base, token, key string) (letGo func()) {
	t.Helper()
	const tenMinutes = "600000000" // µs
	detach := attachStrace(t, d, "-e", "trace=fdatasync,fsync", "-e", "inject=fdatasync:delay_enter="+tenMinutes, "-e", "inject=fsync:delay_enter="+tenMinutes)
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(withCreds(token, key), 5*time.Minute)
		defer cancel()
		done <- d.create(ctx, seedRequest("400000000"))
	}()
	for tries := 0; ; tries++ {
		a := httpCall(t, "GET", base+"/api/v1/in-flight", "", bearerHeader(consoleToken)...)
		if strings.Contains(string(a.body), key) {
			break
		}
		if tries == 3000 {
			detach()
			t.Fatalf("the held create of %s is not listed in flight: %d %s", key, a.status, a.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	letGo = func() {
		once.Do(func() {
			detach()
			if a := <-done; a.err != nil {
				t.Errorf("the held create of %s: %v", key, a.err)
			}
		})
	}
	t.Cleanup(letGo)
	return letGo
}

// A create held in flight is listed by the JSON API and the page as a
// transactional claim, the JSON naming its principal, key and attempt.
// Its lookup finds it in flight, held in memory, and its release is
// refused as in flight at once, although its commit waits on the disk. A
// key held by two principals is listed by GET /api/v1/keys.
func TestConsole_InFlight_AHeldCreateIsTransactional(t *testing.T) {
	d, base := startConsole(t, "", spec{})
	createIntent(t, d, "tok-a", "shared", "100000000")
	createIntent(t, d, "tok-b", "shared", "100000000")
	a := httpCall(t, "GET", base+"/api/v1/keys?key=shared", "", bearerHeader(consoleToken)...)
	var keys struct {
		Principals []struct{ Principal, State string }
	}
	if json.Unmarshal(a.body, &keys) != nil || a.status != 200 || len(keys.Principals) != 2 || keys.Principals[0].State != "completed" {
		t.Errorf("GET /api/v1/keys?key=shared: %d %s", a.status, a.body)
	}
	for _, p := range keys.Principals {
		if p.Principal != devPrincipal("tok-a") && p.Principal != devPrincipal("tok-b") {
			t.Errorf("GET /api/v1/keys?key=shared lists %q", p.Principal)
		}
	}

	letGo := holdCreate(t, d, base, "tok-a", "held")
	a = httpCall(t, "GET", base+"/api/v1/in-flight", "", bearerHeader(consoleToken)...)
	var page struct {
		Claims []struct {
			Principal, Key, State string
			Attempt               int
			Transactional         bool
		}
	}
	if err := json.Unmarshal(a.body, &page); err != nil || len(page.Claims) != 1 {
		t.Fatalf("the keys in flight: %v %s", err, a.body)
	}
	if c := page.Claims[0]; c.Principal != devPrincipal("tok-a") || c.Key != "held" || c.State != "in_flight" || c.Attempt != 1 || !c.Transactional {
		t.Errorf("the held create in the JSON API: %+v, want transactional", c)
	}
	html := httpCall(t, "GET", base+"/in-flight", "", bearerHeader(consoleToken)...)
	if !strings.Contains(string(html.body), `<td class="transactional">yes</td>`) {
		t.Errorf("the page of keys in flight does not say transactional:\n%s", html.body)
	}
	held := httpCall(t, "GET", consoleRecordURL(base, devPrincipal("tok-a"), "held"), "", bearerHeader(consoleToken)...)
	for _, want := range []string{`"found": true`, `"stored": false`, `"state": "in_flight"`, `"transactional": true`, `"next_request": "This process holds the claim`} {
		if held.status != 200 || !strings.Contains(string(held.body), want) {
			t.Errorf("the held create's lookup lacks %s: %d %s", want, held.status, held.body)
		}
	}
	release := base + "/api/v1/release?" + url.Values{"principal": {devPrincipal("tok-a")}, "key": {"held"}}.Encode()
	if a := httpCall(t, "POST", release, "", bearerHeader(consoleToken)...); a.status != 409 || !strings.Contains(string(a.body), `"refusal": "in_flight"`) {
		t.Errorf("the release of the held create: %d %s", a.status, a.body)
	}
	letGo()
	if a := httpCall(t, "GET", base+"/api/v1/in-flight", "", bearerHeader(consoleToken)...); !strings.Contains(string(a.body), `"claims": []`) {
		t.Errorf("the keys in flight once the create is done: %s", a.body)
	}
}
