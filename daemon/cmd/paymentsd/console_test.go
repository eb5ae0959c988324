package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// A create over gRPC is found through the console's JSON API with an
// operator's key, the lookup logged with the operator's name; a wrong key
// and a customer's token get 401. A stored validation error is released
// through it, after which the key runs fresh with a corrected body; its
// intent is found by its id alone, naming its principal; the release of
// that success is refused.
func TestConsole_LooksUpAndReleasesAGRPCCreate(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--admin-listen", "127.0.0.1:0", "--admin-keys", adminKeysFile(t))
	base := "http://" + d.logAddr(t, "console listening")
	principal := devPrincipal("tok-console")
	if a := d.create(withCreds("tok-console", "order-1"), seedRequest("12.34")); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("a create of a bad amount: %v", a.err)
	}
	release := base + "/api/v1/release?" + url.Values{"principal": {principal}, "key": {"order-1"}}.Encode()
	if a := httpCall(t, "POST", release, "", bearerHeader(consoleToken)...); a.status != 200 || !strings.Contains(string(a.body), `"code": "INVALID_ARGUMENT"`) {
		t.Fatalf("release of the stored error: %d %s", a.status, a.body)
	}
	a := d.create(withCreds("tok-console", "order-1"), seedRequest("100000000"))
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
	line := d.waitLogText(t, "console lookup", `"operator":"carol"`)
	if !strings.Contains(line, auth.PrincipalHash(principal)) || strings.Contains(d.stderr(), consoleToken) {
		t.Errorf("lookup's log line %s; log holds the operator's token: %v", line, strings.Contains(d.stderr(), consoleToken))
	}
	d.waitLogText(t, "idempotency key released", `"operator":"carol"`, `"code":"INVALID_ARGUMENT"`)
}

// With --tls-cert the console is served over TLS with the daemon's
// certificate; --admin-listen without --admin-keys does not start.
func TestConsole_TLS_AndItsFlags(t *testing.T) {
	certs := newCertSet(t, "console")
	d := startTLSDaemon(t, certs, "", "--admin-listen", "127.0.0.1:0", "--admin-keys", adminKeysFile(t))
	base := "https://" + d.logAddr(t, "console listening")
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
	d := startDaemon(t, filepath.Join(t.TempDir(), "paymentsd.db"), "--admin-listen", "127.0.0.1:0", "--admin-keys", keys,
		"--metrics-listen", "127.0.0.1:0")
	base := "http://" + d.logAddr(t, "console listening")
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
	d.waitLogText(t, "operator keys reloaded", `"trigger":"file changed"`)
	if a := httpCall(t, "GET", target, "", bearerHeader("operator-token-dave")...); a.status != 404 {
		t.Errorf("a lookup with dave's key, added: %d %s", a.status, a.body)
	}
	if a := httpCall(t, "GET", target, "", bearerHeader(consoleToken)...); a.status != 401 {
		t.Errorf("a lookup with carol's key, removed: %d %s", a.status, a.body)
	}
	if got := scrape(t, d.metricsAddr(t))[`paymentsd_credential_reloads_total{file="admin_keys",result="ok"}`]; got != 1 {
		t.Errorf("admin_keys reloads counted: %v, want 1", got)
	}
}

// On PostgreSQL too, the console finds an intent by its id alone and
// names its principal.
func TestConsole_Postgres_IntentByIDAlone(t *testing.T) {
	d := startDaemon(t, postgresURL(t), "--admin-listen", "127.0.0.1:0", "--admin-keys", adminKeysFile(t))
	base := "http://" + d.logAddr(t, "console listening")
	a := d.create(withCreds("tok-console", "order-1"), seedRequest("100000000"))
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
