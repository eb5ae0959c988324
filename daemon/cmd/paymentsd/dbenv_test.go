package main

// What --db and the PAYMENTSD_ environment may not do quietly: make a new
// data file of a connection string, and leave authentication off through
// a misspelled or empty variable.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dbPassword is the password in the connection strings below: it must
// appear nowhere in what paymentsd prints, nor in a file name.
const dbPassword = "S3cretPW-canary"

// emptyDir fails t if paymentsd left anything in dir, its working
// directory.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("paymentsd made %q in its working directory; want nothing made", e.Name())
	}
}

// noPassword fails t if r printed dbPassword.
func noPassword(t *testing.T, r run) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, dbPassword) {
		t.Errorf("the password was printed:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

// dbCommands are the commands that take --db, each with what else it
// needs to get as far as --db.
var dbCommands = []struct {
	name string
	args []string
}{
	{"server", []string{"--listen", "127.0.0.1:0", "--http-listen", ""}},
	{"check", []string{"check"}},
	{"record", []string{"record", "--principal", "alice", "--key", "order-1"}},
	{"backup", []string{"backup", "copy.db"}},
}

func TestDB_ConnectionStringsNotTaken_RefusedWithoutFileOrPassword(t *testing.T) {
	bad := []struct{ form, db string }{
		{"no slashes", "postgres:bob:" + dbPassword + "@127.0.0.1/pay"},
		{"no slashes upper", "POSTGRESQL:bob:" + dbPassword + "@127.0.0.1/pay"},
		{"key=value", "host=127.0.0.1 port=1 password=" + dbPassword},
		{"other scheme", "mysql://bob:" + dbPassword + "@127.0.0.1/pay"},
		{"no colon", "postgres//bob:" + dbPassword + "@127.0.0.1/pay?sslmode=disable"},
	}
	for _, b := range bad {
		for _, c := range dbCommands {
			for _, from := range []string{"flag", "env"} {
				t.Run(b.form+" "+c.name+" "+from, func(t *testing.T) {
					dir := t.TempDir()
					args, env := c.args, cleanEnv()
					if from == "flag" {
						args = append(append([]string{}, args...), "--db", b.db)
					} else {
						env = cleanEnv("PAYMENTSD_DB=" + b.db)
					}
					r := runBounded(t, 30*time.Second, dir, env, args...)
					if r.code != 2 || !strings.Contains(r.stderr, "--db must be a bbolt file's path, or a PostgreSQL URL") {
						t.Errorf("exit %d, want 2 saying what --db takes\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
					}
					noPassword(t, r)
					emptyDir(t, dir)
				})
			}
		}
	}
}

// A PostgreSQL URL's scheme is matched in any case: POSTGRES:// is
// PostgreSQL, whatever the command makes of it, and never a file.
func TestDB_UpperCaseScheme_IsPostgres(t *testing.T) {
	const db = "POSTGRES://bob:" + dbPassword + "@127.0.0.1:1/pay?connect_timeout=2"
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"server", []string{"--listen", "127.0.0.1:0", "--http-listen", "", "--db", db}, 1, "pgstore: connect"},
		{"record", []string{"record", "--principal", "alice", "--key", "order-1", "--db", db}, 3, "pgstore: connect"},
		{"check", []string{"check", "--db", db}, 2, "PostgreSQL checks its own"},
		{"backup", []string{"backup", "copy.db", "--db", db}, 2, "pg_dump"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runBounded(t, 30*time.Second, dir, cleanEnv(), c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.says) {
				t.Errorf("exit %d, want %d saying %q\nstdout:\n%s\nstderr:\n%s", r.code, c.code, c.says, r.stdout, r.stderr)
			}
			noPassword(t, r)
			emptyDir(t, dir)
		})
	}
}

// A real database reached with an upper-case scheme is served: the scheme
// pgx sees is lower-cased.
func TestDB_UpperCaseScheme_ServesPostgres(t *testing.T) {
	scheme, rest, _ := strings.Cut(postgresURL(t), "://")
	d := start(t, spec{db: strings.ToUpper(scheme) + "://" + rest})
	if r := d.createSeed("merchant-demo", "order-1", "100"); r.err != nil {
		t.Fatalf("create: %v\n%s", r.err, d.stderr())
	}
	if strings.Contains(d.stderr(), "admin socket") {
		t.Errorf("a bbolt admin socket was opened for a PostgreSQL URL:\n%s", d.stderr())
	}
}

func TestEnv_MisspelledSetting_Refused(t *testing.T) {
	for _, kv := range []string{
		"PAYMENTSD_API_KEY=" + dbPassword,
		"PAYMENTSD_API-KEYS=" + dbPassword,
		"paymentsd_api_keys=" + dbPassword,
		"PAYMENTSD_APIKEY=" + dbPassword,
	} {
		name, _, _ := strings.Cut(kv, "=")
		want := name + " is not a setting; did you mean PAYMENTSD_API_KEYS?"
		for _, c := range dbCommands {
			t.Run(name+" "+c.name, func(t *testing.T) {
				dir := t.TempDir()
				r := runBounded(t, 30*time.Second, dir, cleanEnv(kv), c.args...)
				if r.code != 2 || !strings.Contains(r.stderr, want) {
					t.Errorf("exit %d, want 2 saying %q\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
				}
				noPassword(t, r)
				emptyDir(t, dir)
			})
		}
	}
}

// Variables far from every flag's are other programs' (the tests'
// own), and left alone.
func TestEnv_UnrelatedVariables_LeftAlone(t *testing.T) {
	tests := []string{"PAYMENTSD_CRASH_ROUNDS=3", "PAYMENTSD_REPLICA_ROUNDS=3", "PAYMENTSD_FAILOVER_ROUNDS=3",
		"PAYMENTSD_ASYNC_FAILOVER=1", "PAYMENTSD_SCALE_RECORDS=10"}
	env := cleanEnv(append(tests, "PAYMENTSD_LISTEN=127.0.0.1:0", "PAYMENTSD_HTTP_LISTEN=", "PAYMENTSD_METRICS_LISTEN=",
		"PAYMENTSD_DB="+filepath.Join(t.TempDir(), "paymentsd.db"))...)
	start(t, spec{exact: true, env: env})
	dir := t.TempDir()
	r := runBounded(t, 30*time.Second, dir, cleanEnv(tests...), "check", "--db", "no-such.db")
	if r.code != 3 {
		t.Errorf("check of a missing file beside the tests' variables: exit %d, want 3\nstderr:\n%s", r.code, r.stderr)
	}
}

func TestEnv_EmptySetting_Refused(t *testing.T) {
	server := []string{"--listen", "127.0.0.1:0", "--http-listen", ""}
	for _, c := range []struct {
		env, cmd string
		args     []string
	}{
		{"PAYMENTSD_API_KEYS", "server", server},
		{"PAYMENTSD_LISTEN", "server", []string{"--http-listen", ""}},
		{"PAYMENTSD_DB", "server", server},
		{"PAYMENTSD_TLS_CERT", "server", server},
		{"PAYMENTSD_DB", "check", []string{"check"}},
		{"PAYMENTSD_API_KEYS", "record", []string{"record", "--token-stdin", "--key", "order-1"}},
	} {
		t.Run(c.env+" "+c.cmd, func(t *testing.T) {
			dir := t.TempDir()
			r := runBounded(t, 30*time.Second, dir, cleanEnv(c.env+"="), c.args...)
			want := c.env + " is set but empty: unset it"
			if r.code != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("exit %d, want 2 saying %q\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
			}
			emptyDir(t, dir)
		})
	}
}
