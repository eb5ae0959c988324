package main

// The PAYMENTSD_* environment against the real binary: it configures the
// server and the operator commands, a flag wins over it, and no invalid
// value or database password is repeated in the log.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestEnv_ConfiguresServer_FlagWins(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "env-token"))
	dbPath := filepath.Join(dir, "env.db")
	t.Run("variables alone", func(t *testing.T) { envAlone(t, keys, dbPath) })
	t.Run("flag wins", func(t *testing.T) { envFlagWins(t, dir, keys) })
	t.Run("invalid value", func(t *testing.T) { envInvalid(t, dir) })
	t.Run("check reads PAYMENTSD_DB", func(t *testing.T) { envCheck(t, dir, dbPath) })
	t.Run("help", func(t *testing.T) {
		r := runBounded(t, 30*time.Second, "", cleanEnv(), "help")
		r.want(t, 0, "PAYMENTSD_", "PAYMENTSD_API_KEYS", "PAYMENTSD_DB")
	})
}

// envAlone: the server configured by its environment alone, on dbPath
// with keys.
func envAlone(t *testing.T, keys, dbPath string) {
	d := start(t, spec{exact: true, env: cleanEnv(
		"PAYMENTSD_LISTEN=127.0.0.1:0",
		"PAYMENTSD_HTTP_LISTEN=127.0.0.1:0",
		"PAYMENTSD_METRICS_LISTEN=127.0.0.1:0",
		"PAYMENTSD_DB="+dbPath,
		"PAYMENTSD_API_KEYS="+keys,
		"PAYMENTSD_LEASE=3s",
	)})
	if c := d.authCode("env-token"); c != codes.OK {
		t.Errorf("listed token: %v, want OK (PAYMENTSD_API_KEYS)", c)
	}
	if c := d.authCode("other-token"); c != codes.Unauthenticated {
		t.Errorf("unlisted token: %v, want UNAUTHENTICATED (PAYMENTSD_API_KEYS)", c)
	}
	if line := d.waitLine(t, "paymentsd listening", nil, time.Second); line["db"] != dbPath || line["lease"] != "3s" {
		t.Errorf("listening line %v: want db %s (PAYMENTSD_DB), lease 3s (PAYMENTSD_LEASE)", line, dbPath)
	}
	httpBase := "http://" + d.logAddr(t, "http listening")
	if a := httpCall(t, "GET", httpBase+"/v1/payment_intents", "", bearerHeader("env-token")...); a.status != 200 {
		t.Errorf("HTTP face (PAYMENTSD_HTTP_LISTEN): %d %s, want 200", a.status, a.body)
	}
	d.scrape(t) // PAYMENTSD_METRICS_LISTEN
	if err := d.stop(t); err != nil {
		t.Fatalf("stop: %v\n%s", err, d.stderr())
	}
}

// envFlagWins: the flags given win over the variables.
func envFlagWins(t *testing.T, dir, keys string) {
	flagDB := filepath.Join(dir, "flag.db")
	d := start(t, spec{exact: true, env: cleanEnv(
		"PAYMENTSD_LISTEN=256.0.0.1:0", // would fail if used
		"PAYMENTSD_HTTP_LISTEN=",
		"PAYMENTSD_DB="+filepath.Join(dir, "not-this.db"),
		"PAYMENTSD_API_KEYS="+filepath.Join(dir, "no-such-keys"),
	), args: []string{"--listen", "127.0.0.1:0", "--db", flagDB, "--api-keys", keys}})
	if line := d.waitLine(t, "paymentsd listening", nil, time.Second); line["db"] != flagDB {
		t.Errorf("listening line %v: want the flag's db %s", line, flagDB)
	}
	if _, err := os.Stat(filepath.Join(dir, "not-this.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PAYMENTSD_DB's file was made although --db was given: %v", err)
	}
	d.stop(t)
}

// envInvalid: a variable's invalid value stops the server at once, naming
// the variable and not repeating the value.
func envInvalid(t *testing.T, dir string) {
	for _, kv := range [][2]string{
		{"PAYMENTSD_LEASE", "abc"},
		{"PAYMENTSD_SHUTDOWN_GRACE", "hunter2-not-a-duration"},
		{"PAYMENTSD_DB_POOL", "s3cr3t-pool"},
	} {
		d := start(t, spec{exact: true, noWait: true, env: cleanEnv(kv[0]+"="+kv[1], "PAYMENTSD_LISTEN=127.0.0.1:0", "PAYMENTSD_HTTP_LISTEN=",
			"PAYMENTSD_DB="+filepath.Join(dir, "data-invalid", "x.db"))})
		if code := d.exitCode(t, exitBound); code != 2 {
			t.Errorf("%s=%s: exit %d, want 2:\n%s", kv[0], kv[1], code, d.stderr())
		}
		if !strings.Contains(d.stderr(), kv[0]) {
			t.Errorf("%s=%s: stderr does not name the variable:\n%s", kv[0], kv[1], d.stderr())
		}
		if strings.Contains(d.stderr(), kv[1]) {
			t.Errorf("%s=%s: stderr repeats the value:\n%s", kv[0], kv[1], d.stderr())
		}
	}
	noDataDir(t, filepath.Join(dir, "data-invalid"))
}

// envCheck: check reads PAYMENTSD_DB, and its flag wins.
func envCheck(t *testing.T, dir, dbPath string) {
	r := runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+dbPath), "check")
	r.want(t, 0, dbPath+": sound")
	// The flag wins in a subcommand too.
	r = runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+filepath.Join(dir, "no-such.db")), "check", "--db", dbPath)
	r.want(t, 0, dbPath+": sound")
	// And without the flag, the variable is what is read.
	r = runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+filepath.Join(dir, "no-such.db")), "check")
	if r.code != 3 || !strings.Contains(r.stderr, filepath.Join(dir, "no-such.db")) {
		t.Errorf("check with PAYMENTSD_DB naming no file: exit %d, stderr %q; want 3 naming it", r.code, r.stderr)
	}
}

func TestEnv_DatabasePassword_NeverLogged(t *testing.T) {
	const password = "s3cr3t-pw"
	url := "postgres://u:" + password + "@127.0.0.1:1/db?connect_timeout=2"
	d := start(t, spec{exact: true, noWait: true, env: cleanEnv("PAYMENTSD_DB="+url, "PAYMENTSD_LISTEN=127.0.0.1:0", "PAYMENTSD_HTTP_LISTEN=")})
	if code := d.exitCode(t, 20*time.Second); code == 0 {
		t.Errorf("a database that does not answer: exit 0, want a failure:\n%s", d.stderr())
	}
	if d.stderr() == "" {
		t.Error("paymentsd failed without a word")
	}
	if strings.Contains(d.stderr(), password) {
		t.Errorf("the log holds the password of PAYMENTSD_DB:\n%s", d.stderr())
	}
	// The operator commands read PAYMENTSD_DB too, and say as little.
	r := runBounded(t, 20*time.Second, "", cleanEnv("PAYMENTSD_DB="+url), "record", "--principal", "p", "--key", "k")
	if r.code == 0 {
		t.Errorf("record on a database that does not answer: exit 0")
	}
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("record printed the password of PAYMENTSD_DB:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

func TestEnv_Record_APIKeysFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	writeInPlace(t, keys, 0o600, keyFile("alice", "record-env-token"))
	dbPath := filepath.Join(dir, "paymentsd.db")
	d := start(t, spec{db: dbPath, args: []string{"--api-keys", keys}})
	if a := d.createSeed("record-env-token", "order-env", "1"); a.err != nil {
		t.Fatal(a.err)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	// The environment the server ran with, as an operator's shell has it.
	env := cleanEnv("PAYMENTSD_DB="+dbPath, "PAYMENTSD_API_KEYS="+keys)

	t.Run("token-stdin finds the principal in PAYMENTSD_API_KEYS", func(t *testing.T) {
		cmd := exec.Command(paymentsdBinary, "record", "--token-stdin", "--key", "order-env", "--json")
		cmd.Env = env
		cmd.Stdin = strings.NewReader("record-env-token")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("record --token-stdin: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), `"alice"`) {
			t.Errorf("record --token-stdin did not find alice's record:\n%s", out)
		}
	})
	t.Run("principal given, PAYMENTSD_API_KEYS set", func(t *testing.T) {
		// PAYMENTSD_API_KEYS sets no flag the operator gave: record
		// --principal must not be refused for it.
		r := runBounded(t, 30*time.Second, "", env, "record", "--principal", "alice", "--key", "order-env", "--json")
		r.want(t, 0, `"alice"`)
	})
	t.Run("subcommand-only flags are not read from the environment", func(t *testing.T) {
		r := runBounded(t, 30*time.Second, "", cleanEnv("PAYMENTSD_DB="+dbPath, "PAYMENTSD_PRINCIPAL=alice", "PAYMENTSD_KEY=order-env"), "record")
		if r.code != 2 || !strings.Contains(r.stderr, "--key is required") {
			t.Errorf("record with PAYMENTSD_KEY and PAYMENTSD_PRINCIPAL only: exit %d, stderr %q; want 2, --key is required", r.code, r.stderr)
		}
	})
}
