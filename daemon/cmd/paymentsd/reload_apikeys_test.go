package main

// --api-keys read again, without a restart, on a change or SIGHUP: a file
// renamed over, rewritten in place, swapped by a symbolic link, broken, a
// FIFO or writable by others; and no token in the log.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// The log's messages of a reload of --api-keys.
const (
	keysReloaded = "api keys reloaded"
	keysRefused  = "api keys not reloaded: the previous keys stay in use"
)

// writeInPlace writes data into path's existing file (or a new one) and
// sets its mode exactly, whatever the umask.
func writeInPlace(t *testing.T, path string, mode os.FileMode, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// replaceByRename writes data to a temp name in path's directory and
// renames it over path, as an operator's atomic update does.
func replaceByRename(t *testing.T, path string, mode os.FileMode, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	writeInPlace(t, tmp, mode, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// keyFile is the content of an API key file listing each principal, token
// pair.
func keyFile(pairs ...string) string {
	var b strings.Builder
	b.WriteString("# principal sha256:<hex>\n")
	for i := 0; i < len(pairs); i += 2 {
		b.WriteString(auth.KeyLine(pairs[i], pairs[i+1]) + "\n")
	}
	return b.String()
}

// startWithKeys writes an API key file of alice's token and starts
// paymentsd on it, as s says, once it watches the file. It returns the
// file's path.
func startWithKeys(t *testing.T, token string, s spec) (*daemon, string) {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", token))
	s.args = append([]string{"--api-keys", keys}, s.args...)
	d := start(t, s)
	d.waitAdmin(t) // the watch starts once Run has returned; the admin socket comes after
	return d, keys
}

// authCode is the code of a ListPaymentIntents with token: OK when the
// token is accepted, UNAUTHENTICATED when it is not.
func (d *daemon) authCode(token string) codes.Code {
	ctx, cancel := context.WithTimeout(withCreds(token, ""), 5*time.Second)
	defer cancel()
	_, err := d.client.ListPaymentIntents(ctx, &paymentsv1.ListPaymentIntentsRequest{PageSize: 1})
	return status.Code(err)
}

// waitTokens waits until within after since for d to refuse the token gone
// and accept next. It reports whether it did, with the codes each got last.
func (d *daemon) waitTokens(since time.Time, within time.Duration, gone, next string) (codes.Code, codes.Code, bool) {
	for ; ; time.Sleep(20 * time.Millisecond) {
		cGone, cNext := d.authCode(gone), d.authCode(next)
		if cGone == codes.Unauthenticated && cNext == codes.OK {
			return cGone, cNext, true
		}
		if time.Since(since) > within {
			return cGone, cNext, false
		}
	}
}

// stillRunning fails t if d's process has exited or has started serving
// more than once: a reload must not be a restart.
func (d *daemon) stillRunning(t *testing.T) {
	t.Helper()
	d.wantRunning(t, "on a reload")
	if n := len(d.lines("paymentsd listening")); n != 1 {
		t.Fatalf("paymentsd started listening %d times, want once:\n%s", n, d.stderr())
	}
}

func TestReload_APIKeys_RenameSIGHUPAndBrokenFile(t *testing.T) {
	const t1, t2, t3 = "reload-token-one", "reload-token-two", "reload-token-333"
	d, keys := startWithKeys(t, t1, spec{metrics: true})
	if c := d.authCode(t1); c != codes.OK {
		t.Fatalf("t1 at start: %v, want OK", c)
	}
	if c := d.authCode(t2); c != codes.Unauthenticated {
		t.Fatalf("t2 at start: %v, want UNAUTHENTICATED", c)
	}
	keysRenamedOver(t, d, keys, t1, t2)
	keysRewrittenThenHUP(t, d, keys, t2, t3)
	keysBroken(t, d, keys, t2, t3)
}

// keysRenamedOver: a new file, of t2, renamed over the old one: t2 in, t1
// out, within a second, by the same process.
func keysRenamedOver(t *testing.T, d *daemon, keys, t1, t2 string) {
	t.Helper()
	replaceByRename(t, keys, 0o600, keyFile("bob", t2))
	renamed := time.Now()
	if c1, c2, ok := d.waitTokens(renamed, time.Second, t1, t2); !ok {
		t.Fatalf("1s after the rename: t1 %v, t2 %v; want UNAUTHENTICATED and OK:\n%s", c1, c2, d.stderr())
	}
	t.Logf("rename seen after %v", time.Since(renamed).Round(time.Millisecond))
	d.stillRunning(t)
	d.waitLine(t, keysReloaded, map[string]any{"trigger": "file changed", "principals": 1.0}, time.Second)
	if a := d.createSeed(t2, "after-rename", "1"); a.err != nil {
		t.Errorf("create with t2 after the rename: %v", a.err)
	}
	if a := d.createSeed(t1, "after-rename-t1", "1"); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("create with t1 after the rename: %v, want UNAUTHENTICATED", a.err)
	}
}

// keysRewrittenThenHUP: the file rewritten in place (the same inode) with
// t3 for t2, then SIGHUP at once.
func keysRewrittenThenHUP(t *testing.T, d *daemon, keys, t2, t3 string) {
	t.Helper()
	before, err := os.Stat(keys)
	if err != nil {
		t.Fatal(err)
	}
	writeInPlace(t, keys, 0o600, keyFile("carol", t3))
	d.hup(t)
	hupped := time.Now()
	after, err := os.Stat(keys)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("the in-place rewrite made a new file; the test is wrong")
	}
	if c2, c3, ok := d.waitTokens(hupped, time.Second, t2, t3); !ok {
		t.Fatalf("1s after SIGHUP: t2 %v, t3 %v; want UNAUTHENTICATED and OK:\n%s", c2, c3, d.stderr())
	}
	d.waitLine(t, keysReloaded, map[string]any{"trigger": "SIGHUP"}, time.Second)
	d.stillRunning(t)
}

// keysBroken: a broken file: the previous keys (t3's) stay, the log says
// why, the metric counts an error; SIGHUP with the file still broken is
// refused again, without harm.
func keysBroken(t *testing.T, d *daemon, keys, t2, t3 string) {
	t.Helper()
	const errSeries = `paymentsd_credential_reloads_total{file="api_keys",result="error"}`
	const okSeries = `paymentsd_credential_reloads_total{file="api_keys",result="ok"}`
	m := d.scrape(t)
	errsBefore, ok := m[errSeries]
	if !ok {
		t.Fatalf("%s not exported", errSeries)
	}
	if m[okSeries] < 2 {
		t.Errorf("%s = %v after two reloads, want at least 2", okSeries, m[okSeries])
	}
	replaceByRename(t, keys, 0o600, keyFile("carol", t3)+"this line is not a key\n")
	line := d.waitLine(t, keysRefused, map[string]any{"trigger": "file changed"}, 2*time.Second)
	if e := line.str("err"); !strings.Contains(e, keys+":3") {
		t.Errorf("the refusal %q does not name the file and line (%s:3)", e, keys)
	}
	waitFor(t, 2*time.Second, errSeries+" counting the broken file", func() bool { return d.scrape(t)[errSeries] > errsBefore })
	if c := d.authCode(t3); c != codes.OK {
		t.Errorf("t3 after a broken file: %v, want OK (the previous keys stay)", c)
	}
	if c := d.authCode(t2); c != codes.Unauthenticated {
		t.Errorf("t2 after a broken file: %v, want UNAUTHENTICATED", c)
	}
	d.hup(t)
	d.waitLine(t, keysRefused, map[string]any{"trigger": "SIGHUP"}, time.Second)
	if c := d.authCode(t3); c != codes.OK {
		t.Errorf("t3 after SIGHUP on a broken file: %v, want OK", c)
	}
	d.stillRunning(t)
}

func TestReload_APIKeys_SymlinkSwapped(t *testing.T) {
	// As Kubernetes updates a mounted secret: api-keys -> ..data/api-keys,
	// and ..data a link moved from one directory of the files to the next.
	secret := filepath.Join(t.TempDir(), "secret")
	for _, v := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(secret, v), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeInPlace(t, filepath.Join(secret, "v1", "api-keys"), 0o600, keyFile("alice", "link-token-one"))
	writeInPlace(t, filepath.Join(secret, "v2", "api-keys"), 0o600, keyFile("alice", "link-token-two"))
	if err := os.Symlink("v1", filepath.Join(secret, "..data")); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(secret, "api-keys")
	if err := os.Symlink(filepath.Join("..data", "api-keys"), keys); err != nil {
		t.Fatal(err)
	}
	d := start(t, spec{args: []string{"--api-keys", keys}})
	d.waitAdmin(t)
	if c := d.authCode("link-token-one"); c != codes.OK {
		t.Fatalf("token of v1 at start: %v", c)
	}
	tmp := filepath.Join(secret, "..data_tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(secret, "..data")); err != nil {
		t.Fatal(err)
	}
	if c1, c2, ok := d.waitTokens(time.Now(), time.Second, "link-token-one", "link-token-two"); !ok {
		t.Fatalf("1s after the link moved: v1's token %v, v2's %v; want UNAUTHENTICATED and OK:\n%s", c1, c2, d.stderr())
	}
	d.stillRunning(t)
}

func TestFIFO_APIKeys_ReplacedWhileRunning_RefusedNotHanging(t *testing.T) {
	d, keys := startWithKeys(t, "fifo-token-one", spec{})

	// A FIFO renamed over the file: refused at the next look, without
	// waiting for a writer.
	fifo := filepath.Join(filepath.Dir(keys), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, keys); err != nil {
		t.Fatal(err)
	}
	line := d.waitLine(t, keysRefused, map[string]any{"trigger": "file changed"}, 2*time.Second)
	if e := line.str("err"); !strings.Contains(e, "FIFO") {
		t.Errorf("refusal %q does not say FIFO", e)
	}
	if c := d.authCode("fifo-token-one"); c != codes.OK {
		t.Errorf("previous token with a FIFO in place: %v, want OK", c)
	}
	// The reloads are not stuck: SIGHUP is answered, and a file put back
	// is read.
	d.hup(t)
	d.waitLine(t, keysRefused, map[string]any{"trigger": "SIGHUP"}, 2*time.Second)
	if err := os.Remove(keys); err != nil {
		t.Fatal(err)
	}
	writeInPlace(t, keys, 0o600, keyFile("alice", "fifo-token-two"))
	d.waitLine(t, keysReloaded, map[string]any{"trigger": "file changed"}, 2*time.Second)
	if c := d.authCode("fifo-token-two"); c != codes.OK {
		t.Errorf("token of the file put back: %v, want OK", c)
	}
	if c := d.authCode("fifo-token-one"); c != codes.Unauthenticated {
		t.Errorf("previous token once the file is back: %v, want UNAUTHENTICATED", c)
	}
	d.stillRunning(t)
}

func TestWorldWritable_APIKeys_WhileRunning_PreviousKeysStay(t *testing.T) {
	d, keys := startWithKeys(t, "ww-token-one", spec{})
	// Someone else could now have written their own key in: refused.
	writeInPlace(t, keys, 0o666, keyFile("mallory", "ww-token-mallory"))
	line := d.waitLine(t, keysRefused, map[string]any{"trigger": "file changed"}, 2*time.Second)
	if e := line.str("err"); !strings.Contains(e, "0666") {
		t.Errorf("refusal %q does not name the mode", e)
	}
	if c := d.authCode("ww-token-mallory"); c != codes.Unauthenticated {
		t.Errorf("token of a world-writable file: %v, want UNAUTHENTICATED", c)
	}
	if c := d.authCode("ww-token-one"); c != codes.OK {
		t.Errorf("previous token: %v, want OK", c)
	}
	d.stillRunning(t)
}

func TestSecret_TokensNeverLogged(t *testing.T) {
	const (
		valid   = "canary-valid-7f3a9c"
		invalid = "canary-invalid-b81e2d"
		next    = "canary-next-44c0aa"
		odd     = "canary-odd-\u00e9-91d2" // refused by its byte, over HTTP
	)
	d, keys := startWithKeys(t, valid, spec{http: true})
	base := d.intentsURL()

	if a := d.createSeed(valid, "s-1", "1"); a.err != nil {
		t.Fatalf("valid token: %v", a.err)
	}
	if a := d.createSeed(invalid, "s-2", "1"); status.Code(a.err) != codes.Unauthenticated {
		t.Fatalf("invalid token: %v, want UNAUTHENTICATED", a.err)
	}
	if a := d.httpCreate(t, valid, "s-3", seedBody); a.status != 201 {
		t.Errorf("valid token over HTTP: %d %s", a.status, a.body)
	}
	if a := d.httpCreate(t, invalid, "s-4", seedBody); a.status != 401 {
		t.Errorf("invalid token over HTTP: %d %s, want 401", a.status, a.body)
	}
	if a := httpCall(t, "GET", base, "", bearerHeader(odd)...); a.status != 401 && a.status != 400 {
		t.Errorf("token with a non-ASCII byte over HTTP: %d %s, want 400 or 401", a.status, a.body)
	}
	if a := httpCall(t, "GET", base, "", "Authorization", "Bearer "+valid+" "+invalid); a.status != 401 && a.status != 400 {
		t.Errorf("two words after Bearer: %d %s, want 400 or 401", a.status, a.body)
	}

	// A reload: valid out, next in; then a broken file and SIGHUP.
	replaceByRename(t, keys, 0o600, keyFile("alice", next))
	d.waitLine(t, keysReloaded, map[string]any{"trigger": "file changed"}, 2*time.Second)
	if a := d.createSeed(valid, "s-5", "1"); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("removed token: %v, want UNAUTHENTICATED", a.err)
	}
	if a := d.createSeed(next, "s-6", "1"); a.err != nil {
		t.Errorf("new token: %v", a.err)
	}
	replaceByRename(t, keys, 0o600, keyFile("alice", next)+valid+"\n") // a token pasted by mistake
	d.waitLine(t, keysRefused, map[string]any{"trigger": "file changed"}, 2*time.Second)
	d.hup(t)
	d.waitLine(t, keysRefused, map[string]any{"trigger": "SIGHUP"}, 2*time.Second)

	if err := d.stop(t); err != nil { // every line is written once it has exited
		t.Errorf("stop: %v", err)
	}
	log := d.stderr()
	for _, secret := range []string{valid, invalid, next, odd, "canary-"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
}
