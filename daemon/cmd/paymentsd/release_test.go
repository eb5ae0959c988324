package main

// paymentsd release against the real binary: through a running server's
// admin socket (which logs), on the file itself (the command logs), and on
// PostgreSQL, whose server answers the key from memory until the release.

import (
	"context"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/storage"
)

// wantLogged fails t unless log has a line holding each of want.
func wantLogged(t *testing.T, log string, want ...string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		found := true
		for _, w := range want {
			found = found && strings.Contains(line, w)
		}
		if found {
			return
		}
	}
	t.Errorf("no log line holds all of %q:\n%s", want, log)
}

func osUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func TestRelease_WhileRunning_RefusesASuccessReleasesAValidationError(t *testing.T) {
	db := filepath.Join(t.TempDir(), "data", "paymentsd.db")
	d := start(t, spec{db: db})
	d.waitAdmin(t)
	const token = "merchant-demo"
	principal := devPrincipal(token)
	if a := d.createSeed(token, "order-1", "100000000"); a.err != nil {
		t.Fatal(a.err)
	}
	if a := d.createSeed(token, "order-zero", "0"); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("amount 0: %v", a.err)
	}
	rec := parseRecord(t, paymentsd(t, "", "record", "--db", db, "--principal", principal, "--key", "order-zero", "--json"))
	if !rec.Transactional {
		t.Errorf("record of a create's error: transactional false, want true")
	}

	r := paymentsd(t, "", "release", "--db", db, "--principal", principal, "--key", "order-1")
	r.want(t, 1)
	if !strings.Contains(r.stderr, "refused") || !strings.Contains(r.stderr, "success") {
		t.Errorf("release of a success: stderr %q, want a refusal saying it is a success", r.stderr)
	}
	wantLogged(t, d.stderr(), `"idempotency key release refused"`, `"refusal":"success"`, `"key":"order-1"`,
		`"operator":"`+osUser(t)+`"`, `"principal_hash":"`+auth.PrincipalHash(principal)+`"`)
	if a := d.createSeed(token, "order-1", "100000000"); a.err != nil || !a.replayed() {
		t.Errorf("after a refused release: replayed %t, %v; want the stored success", a.replayed(), a.err)
	}

	paymentsd(t, token, "release", "--db", db, "--token-stdin", "--key", "order-zero").want(t, 0,
		"released", "through the running server", "code:               INVALID_ARGUMENT", "transactional:      yes")
	wantLogged(t, d.stderr(), `"idempotency key released"`, `"code":"INVALID_ARGUMENT"`, `"key":"order-zero"`,
		`"operator":"`+osUser(t)+`"`, `"principal_hash":"`+auth.PrincipalHash(principal)+`"`)
	if strings.Contains(d.stderr(), principal) {
		t.Errorf("the server's log names the principal in clear:\n%s", d.stderr())
	}
	// The same key with a corrected body runs fresh.
	if a := d.createSeed(token, "order-zero", "5"); a.err != nil || a.replayed() {
		t.Errorf("after the release, a corrected create: replayed %t, %v; want a fresh run", a.replayed(), a.err)
	}
	paymentsd(t, "", "release", "--db", db, "--principal", principal, "--key", "never").want(t, 1)
	paymentsd(t, "", "release", "--db", db, "--principal", principal).want(t, 2)
	paymentsd(t, "", "release", "--db", db+"-missing", "--principal", principal, "--key", "k").want(t, 3)
}

// With no server, the command releases in the file and logs the line
// itself; records a create could not leave here (an error of a method
// that is not transactional, a claim in flight) are made with boltstore.
func TestRelease_Stopped_RefusesWhatAHandlerMayHaveActedOn(t *testing.T) {
	db := filepath.Join(t.TempDir(), "paymentsd.db")
	b, err := boltstore.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := func(key string) storage.ClaimRequest {
		return storage.ClaimRequest{Key: storage.RecordKey{Scope: "acme-shop", Key: key}, Scheme: storage.FingerprintScheme,
			Now: time.Now(), Lease: time.Hour, TTL: 24 * time.Hour}
	}
	ctx := context.Background()
	_, claim, err := b.Claim(ctx, req("charged"))
	if err == nil {
		err = b.Complete(ctx, req("charged").Key, claim.Completed(&storage.Result{Status: &spb.Status{Code: int32(codes.Unavailable), Message: "downstream"}}))
	}
	if err == nil {
		_, _, err = b.Claim(ctx, req("running"))
	}
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	for key, why := range map[string][]string{
		"charged": {"not transactional", "refusal=not_transactional"},
		"running": {"in flight", "refusal=in_flight"},
		"none":    {"no live record", "refusal=no_record"},
	} {
		r := paymentsd(t, "", "release", "--db", db, "--principal", "acme-shop", "--key", key)
		r.want(t, 1)
		for _, w := range append(why, "operator="+osUser(t), "principal_hash="+auth.PrincipalHash("acme-shop"), "key="+key) {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("release of %s: stderr does not say %q:\n%s", key, w, r.stderr)
			}
		}
	}
	paymentsd(t, "", "record", "--db", db, "--principal", "acme-shop", "--key", "charged").want(t, 0, "UNAVAILABLE")
}

// On PostgreSQL the server answers a completed key's retries from memory;
// once release returns, it runs the key fresh.
func TestRelease_Postgres_ServerStopsReplaying(t *testing.T) {
	url := postgresURL(t)
	d := start(t, spec{db: url})
	const token = "merchant-demo"
	for range 2 { // the second is answered from the server's memory
		if a := d.createSeed(token, "order-pg", "0"); status.Code(a.err) != codes.InvalidArgument {
			t.Fatalf("amount 0: %v", a.err)
		}
	}
	paymentsd(t, token, "release", "--db", url, "--token-stdin", "--key", "order-pg").want(t, 0, "released", "INVALID_ARGUMENT")
	if a := d.createSeed(token, "order-pg", "0"); status.Code(a.err) != codes.InvalidArgument || a.replayed() {
		t.Errorf("after the release: replayed %t, %v; want a fresh run's INVALID_ARGUMENT", a.replayed(), a.err)
	}
}
