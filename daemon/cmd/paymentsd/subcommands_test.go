package main

// The operator subcommands, against the real binary: record, backup and
// check while the server runs (through its admin socket) and while it does
// not (the file itself), record on PostgreSQL, hash-token, version, and
// bad command lines.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/config"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// recordJSON is paymentsd record --json's output.
type recordJSON struct {
	Principal         string     `json:"principal"`
	Key               string     `json:"key"`
	State             string     `json:"state"`
	Attempt           uint64     `json:"attempt"`
	Fingerprint       string     `json:"fingerprint"`
	FingerprintScheme string     `json:"fingerprint_scheme"`
	Owner             string     `json:"owner"`
	LeaseExpiry       *time.Time `json:"lease_expiry"`
	ClaimTime         *time.Time `json:"claim_time"`
	Expiry            time.Time  `json:"expiry"`
	Completed         bool       `json:"completed"`
	Transactional     bool       `json:"transactional"`
	Code              *string    `json:"code"`
	Message           *string    `json:"message"`
	Details           []string   `json:"details"`
	ResponseType      *string    `json:"response_type"`
	IntentID          *string    `json:"intent_id"`
}

func parseRecord(t *testing.T, r run) recordJSON {
	t.Helper()
	r.want(t, 0)
	var rec recordJSON
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("record --json: %v\n%s", err, r.stdout)
	}
	return rec
}

func fingerprintHex(t *testing.T, req *paymentsv1.CreatePaymentIntentRequest) string {
	t.Helper()
	fp, err := once.NewFingerprint(paymentsv1.PaymentIntentService_CreatePaymentIntent_FullMethodName, req)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(fp[:])
}

func TestRecord_WhileRunning_ThenStopped(t *testing.T) {
	db := filepath.Join(t.TempDir(), "data", "paymentsd.db")
	d := start(t, spec{db: db})
	d.waitAdmin(t)
	const token = "merchant-demo"
	created := d.createSeed(token, "order-1", "100000000")
	if created.err != nil {
		t.Fatal(created.err)
	}
	id := intentID(created)
	if a := d.createSeed(token, "order-zero", "0"); status.Code(a.err) != codes.InvalidArgument {
		t.Fatalf("amount 0: %v", a.err)
	}

	info, err := os.Stat(db + ".admin.sock")
	if err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket %v (%v), want a socket of mode 0600", info, err)
	}

	// A completed create, by token: the intent it made.
	paymentsd(t, token+"\n", "record", "--db", db, "--token-stdin", "--key", "order-1").want(t, 0,
		"state:              completed", "intent:             "+id, "code:               OK",
		fingerprintHex(t, seedRequest("100000000")), storage.FingerprintScheme)

	// An error result, by principal, as JSON.
	rec := parseRecord(t, paymentsd(t, "", "record", "--db", db, "--principal", devPrincipal(token), "--key", "order-zero", "--json"))
	if rec.State != "completed" || !rec.Completed || rec.Attempt != 1 || rec.Code == nil || *rec.Code != "INVALID_ARGUMENT" ||
		rec.Message == nil || *rec.Message == "" || rec.IntentID != nil || rec.ResponseType != nil || rec.LeaseExpiry != nil {
		t.Errorf("record of the error = %+v", rec)
	}
	if rec.Fingerprint != fingerprintHex(t, seedRequest("0")) || rec.FingerprintScheme != storage.FingerprintScheme ||
		rec.Principal != devPrincipal(token) || rec.Key != "order-zero" || !strings.HasPrefix(rec.Owner, "pid ") {
		t.Errorf("record = %+v, want the key's fingerprint and names", rec)
	}
	if len(rec.Details) != 1 || rec.Details[0] != "google.rpc.BadRequest" {
		t.Errorf("details %q, want the BadRequest", rec.Details)
	}
	if d := time.Until(rec.Expiry); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("expiry %v, want in about --ttl (24h)", rec.Expiry)
	}

	// No record: exit 1, saying so, and how dev mode names principals.
	r := paymentsd(t, "", "record", "--db", db, "--principal", token, "--key", "order-1")
	r.want(t, 1)
	for _, s := range []string{"no record", `"order-1"`, "--token-stdin"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("no record: stderr does not say %q:\n%s", s, r.stderr)
		}
	}
	// With --json, the same answer as a JSON object, so that | jq works.
	r = paymentsd(t, "", "record", "--db", db, "--principal", token, "--key", "order-1", "--json")
	r.want(t, 1)
	var none struct {
		Principal, Key, Message string
		Found                   *bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &none); err != nil || none.Found == nil || *none.Found ||
		none.Principal != token || none.Key != "order-1" || !strings.Contains(none.Message, "no record") || r.stderr != "" {
		t.Errorf("no record, --json: %v; stdout:\n%s\nstderr:\n%s\nwant one object, found false, naming principal and key, and nothing on stderr", err, r.stdout, r.stderr)
	}
	// The admin socket's lines name neither (the create's rpc line names
	// its key: support finds a request by it).
	for _, line := range strings.Split(d.stderr(), "\n") {
		if strings.Contains(line, `"msg":"admin"`) && (strings.Contains(line, "order-1") || strings.Contains(line, devPrincipal(token))) {
			t.Errorf("the admin socket's log line names a key or principal asked about: %s", line)
		}
	}

	// Stopped: the socket is gone, and the file is read directly.
	if err := d.stop(t); err != nil {
		t.Fatalf("stop: %v\n%s", err, d.stderr())
	}
	if _, err := os.Stat(db + ".admin.sock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin socket after a clean shutdown: %v, want it removed", err)
	}
	paymentsd(t, token, "record", "--db", db, "--token-stdin", "--key", "order-1").want(t, 0, "intent:             "+id)
}

// A server killed with SIGKILL leaves its socket behind: the next start
// replaces it, and a lookup while no server runs reads the file.
func TestRecord_StaleSocket_NextStartServes(t *testing.T) {
	db := filepath.Join(t.TempDir(), "paymentsd.db")
	d := start(t, spec{db: db})
	d.waitAdmin(t)
	if a := d.createSeed("merchant-demo", "order-1", "5"); a.err != nil {
		t.Fatal(a.err)
	}
	d.kill()
	if _, err := os.Stat(db + ".admin.sock"); err != nil {
		t.Fatalf("no socket left by the killed server: %v", err)
	}
	paymentsd(t, "merchant-demo", "record", "--db", db, "--token-stdin", "--key", "order-1").want(t, 0, "completed")

	d = start(t, spec{db: db})
	d.waitAdmin(t)
	paymentsd(t, "merchant-demo", "record", "--db", db, "--token-stdin", "--key", "order-1").want(t, 0, "completed")
}

func TestRecord_Postgres(t *testing.T) {
	url := postgresURL(t)
	d := start(t, spec{db: url})
	created := d.createSeed("merchant-demo", "order-pg", "100000000")
	if created.err != nil {
		t.Fatal(created.err)
	}
	id := intentID(created)
	rec := parseRecord(t, paymentsd(t, "merchant-demo", "record", "--db", url, "--token-stdin", "--key", "order-pg", "--json"))
	if rec.State != "completed" || rec.IntentID == nil || *rec.IntentID != id || rec.Code == nil || *rec.Code != "OK" ||
		rec.ResponseType == nil || *rec.ResponseType != "payments.v1.CreatePaymentIntentResponse" ||
		rec.ClaimTime == nil || time.Since(*rec.ClaimTime) > time.Minute {
		t.Errorf("record on PostgreSQL = %+v, want the completed create of %s, begun just now", rec, id)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	// The server need not run.
	paymentsd(t, "", "record", "--db", url, "--principal", devPrincipal("merchant-demo"), "--key", "order-pg").want(t, 0, id)
	paymentsd(t, "", "record", "--db", url, "--principal", devPrincipal("merchant-demo"), "--key", "nope").want(t, 1)

	// A lookup never migrates: a database no server has migrated is
	// refused, and left as it was.
	empty := pgtest.Require(t, pgCluster).NewDatabase(t, pgtest.DatabaseName(t.Name()+"/empty"))
	r := paymentsd(t, "", "record", "--db", empty, "--principal", "p", "--key", "k")
	if r.code != 3 || !strings.Contains(r.stderr, "older than this binary") {
		t.Errorf("record on a database never migrated: exit %d, stderr %q; want 3, naming the old schema", r.code, r.stderr)
	}
	conn := pgtest.Connect(t, empty)
	var tables int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("tables after record = %d, %v; want none created", tables, err)
	}
}

func TestBackup_WhileRunning_CopyHoldsTheIntent(t *testing.T) {
	// A data file deep enough that its socket's path is longer than a Unix
	// socket's address can be.
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	db := filepath.Join(dir, "paymentsd.db")
	d := start(t, spec{db: db})
	d.waitAdmin(t)
	const token = "merchant-demo"
	created := d.createSeed(token, "order-b", "100000000")
	if created.err != nil {
		t.Fatal(created.err)
	}
	id := intentID(created)

	copyPath := filepath.Join(t.TempDir(), "backup.db")
	paymentsd(t, "", "backup", copyPath, "--db", db).want(t, 0, "through the running server", "checked sound")
	info, err := os.Stat(copyPath)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("backup %v (%v), want mode 0600", info, err)
	}
	// It refuses to overwrite, and leaves nothing behind.
	r := paymentsd(t, "", "backup", "--db", db, copyPath)
	r.want(t, 3)
	if !strings.Contains(r.stderr, "exists") {
		t.Errorf("second backup to one file: %s", r.stderr)
	}
	if entries, _ := os.ReadDir(filepath.Dir(copyPath)); len(entries) != 1 {
		t.Errorf("backup directory holds %v, want the backup alone", entries)
	}

	// The copy opens as a data file and holds the intent and its record.
	paymentsd(t, token, "record", "--db", copyPath, "--token-stdin", "--key", "order-b").want(t, 0, id)
	store, err := boltstore.Open(copyPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	intents, err := boltintents.New(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	if pi, err := intents.GetIntent(context.Background(), devPrincipal(token), id); err != nil || pi.Amount != "100000000" {
		t.Errorf("intent %s in the copy: %v, %v", id, pi, err)
	}

	// With the server stopped, from the file.
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	paymentsd(t, "", "backup", "--db", db, filepath.Join(t.TempDir(), "offline.db")).want(t, 0, "read directly")
}

func TestCheck_SoundWhileRunning_DamagedFound(t *testing.T) {
	db := filepath.Join(t.TempDir(), "paymentsd.db")
	d := start(t, spec{db: db})
	d.waitAdmin(t)
	paymentsd(t, "", "check", "--db", db).want(t, 0, "sound (through the running server)")
	d.stop(t)
	paymentsd(t, "", "check", "--db", db).want(t, 0, "sound (read directly")

	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"zeroed pages", func(t *testing.T, path string) { damageWithDD(t, path, filePages(t, path)/2, 32) }},
		{"truncated", func(t *testing.T, path string) { truncate(t, path, filePages(t, path)*4096/2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := bigDataFile(t)
			paymentsd(t, "", "check", "--db", path).want(t, 0, "sound")
			tc.damage(t, path)
			r := paymentsd(t, "", "check", "--db", path)
			r.want(t, 1, "damaged", "backup")
			if strings.Contains(r.stdout+r.stderr, "goroutine ") {
				t.Errorf("check crashed:\n%s%s", r.stdout, r.stderr)
			}
			// record answers a damaged file as check does.
			if r := paymentsd(t, "", "record", "--db", path, "--principal", "p", "--key", "k"); r.code != 1 || !strings.Contains(r.stderr, "damaged") {
				t.Errorf("record on a damaged file: exit %d, stderr:\n%s\nwant 1 saying it is damaged", r.code, r.stderr)
			}
		})
	}
	paymentsd(t, "", "check", "--db", filepath.Join(t.TempDir(), "missing.db")).want(t, 3)
}

func TestHashToken_LineAcceptedByAPIKeys(t *testing.T) {
	r := paymentsd(t, "alice-secret\n", "hash-token", "alice")
	r.want(t, 0, "alice sha256:"+sha256Hex("alice-secret")+"\n")
	if strings.Contains(r.stdout, "alice-secret") {
		t.Fatalf("hash-token printed the token: %s", r.stdout)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "api-keys")
	if err := os.WriteFile(keys, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "paymentsd.db")
	d := start(t, spec{db: db, args: []string{"--api-keys", keys}})
	if a := d.createSeed("alice-secret", "k", "1"); a.err != nil {
		t.Errorf("the hashed token: %v", a.err)
	}
	if a := d.createSeed("mallory-secret", "k", "1"); status.Code(a.err) != codes.Unauthenticated {
		t.Errorf("another token: %v, want UNAUTHENTICATED", a.err)
	}
	d.waitAdmin(t)
	// The token's principal, found through the same file, owns the key.
	paymentsd(t, "alice-secret", "record", "--db", db, "--token-stdin", "--api-keys", keys, "--key", "k").want(t, 0, "principal:          alice\n")
	paymentsd(t, "", "record", "--db", db, "--principal", "alice", "--key", "k").want(t, 0, "completed")
	paymentsd(t, "mallory-secret", "record", "--db", db, "--token-stdin", "--api-keys", keys, "--key", "k").want(t, 3)

	paymentsd(t, "tok", "hash-token", "--principal", "bob").want(t, 0, "bob sha256:"+sha256Hex("tok"))
	paymentsd(t, "tok", "hash-token", "not a principal").want(t, 2)
	paymentsd(t, "", "hash-token", "alice").want(t, 3)
	paymentsd(t, "tok", "hash-token").want(t, 2)
}

// versionLine is the first line of paymentsd version: the release, the
// revision (7 hex digits, +dirty for a tree with changes, or unknown) and
// the Go version.
var versionLine = regexp.MustCompile(`^paymentsd (v\d+\.\d+\.\d+\S*) \(rev (unknown|[0-9a-f]{7}(?:\+dirty)?), (go1\.\S+)\)$`)

// releaseVersion is the VERSION file's, which every build stamps.
func releaseVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version", "-version"} {
		r := paymentsd(t, "", arg)
		r.want(t, 0, "github.com/paymentsd/paymentsd", "revision:", "go1.")
		first, _, _ := strings.Cut(r.stdout, "\n")
		m := versionLine.FindStringSubmatch(first)
		if m == nil || m[1] != releaseVersion(t) || m[3] != runtime.Version() {
			t.Errorf("%s: first line %q, want it to match %s with VERSION's %s and %s", arg, first, versionLine, releaseVersion(t), runtime.Version())
		}
	}
}

// TestVersion_Revision builds paymentsd with the VCS stamp on (this
// machine's go env may turn it off) and finds the checkout's commit in
// its first line, +dirty when git sees changes, as go build judges them.
func TestVersion_Revision(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "--short=7", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "paymentsd")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(head))
	if len(status) > 0 {
		want += "+dirty"
	}
	if info, err := os.Stat(filepath.Join("..", "..", "..", ".git")); err != nil || !info.IsDir() {
		// The go command stamps a revision only where .git is a
		// directory: never in a git worktree, whose .git is a file.
		want = "unknown"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if m := versionLine.FindStringSubmatch(first); m == nil || m[2] != want {
		t.Errorf("first line %q, want rev %s", first, want)
	}
}

func TestSubcommand_BadInput_UsageAndExit2(t *testing.T) {
	db := filepath.Join(t.TempDir(), "paymentsd.db")
	for _, tc := range []struct {
		args []string
		want string // on stderr
	}{
		{[]string{"bogus"}, `unknown subcommand "bogus"`},
		{[]string{"record", "--db", db, "--principal", "p"}, "--key is required"},
		{[]string{"record", "--db", db, "--key", "k"}, "give one of --principal and --token-stdin"},
		{[]string{"record", "--db", db, "--key", "k", "--principal", "p", "--token-stdin"}, "give one of --principal and --token-stdin"},
		{[]string{"record", "--db", db, "--key", "k", "--principal", "p", "--api-keys", "f"}, "--api-keys goes with --token-stdin"},
		{[]string{"record", "--no-such-flag"}, "flag provided but not defined"},
		{[]string{"release", "--db", db, "--principal", "p"}, "--key is required"},
		{[]string{"release", "--db", db, "--key", "k"}, "give one of --principal and --token-stdin"},
		{[]string{"release", "--db", db, "--key", "k", "--principal", "a b"}, `--principal "a b" names no principal`},
		{[]string{"record", "--db", db, "--key", "k", "--principal", "a b"}, `--principal "a b" names no principal`},
		{[]string{"record", "--db", db, "--key", "k", "--principal", "dev:abc"}, `--principal "dev:abc" names no principal`},
		{[]string{"record", "--db", db, "--key", `"k1"`, "--principal", "p"}, "over HTTP delimits a key"},
		{[]string{"record", "--db", db, "--key", "k1 ", "--principal", "p"}, "starts or ends with a space"},
		{[]string{"backup", "--db", db}, "give one FILE"},
		{[]string{"backup", "a", "b"}, "give one FILE"},
		{[]string{"backup", "a", "--db", "postgres://x/y"}, "pg_dump"},
		{[]string{"check", "extra"}, "unexpected arguments"},
		{[]string{"check", "--db", ""}, "--db must name"},
		{[]string{"backup", "f", "--db", ""}, "--db must name"},
		{[]string{"record", "--db", "", "--key", "k", "--principal", "p"}, "--db must name"},
		{[]string{"version", "extra"}, "takes no arguments"},
	} {
		r := paymentsd(t, "", tc.args...)
		r.want(t, 2)
		if !strings.Contains(r.stderr, tc.want) || !strings.Contains(strings.ToLower(r.stderr), "usage") {
			t.Errorf("paymentsd %q: stderr does not say %q with the usage:\n%s", tc.args, tc.want, r.stderr)
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		paymentsd(t, "", args...).want(t, 0, "paymentsd record", "paymentsd backup", "paymentsd check",
			"paymentsd hash-token", "paymentsd health", "paymentsd version", "-api-keys", "Flags of paymentsd health:\n  -addr")
	}
	paymentsd(t, "", "record", "-h").want(t, 0)
	// No subcommand: the server's flags, as before.
	if r := paymentsd(t, "", "--listen"); r.code != 2 || !strings.Contains(r.stderr, "flag needs an argument") {
		t.Errorf("paymentsd --listen: exit %d\n%s", r.code, r.stderr)
	}
}

// hash-token refuses exactly the principals auth.LoadFile refuses.
func TestHashToken_PrincipalRuleIsLoadFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-keys")
	for _, p := range []string{"alice", "acme-shop.eu_1", strings.Repeat("a", 64), strings.Repeat("a", 65), "", "a b", "dev:x", "ünï", "a/b"} {
		os.WriteFile(path, []byte(p+" sha256:"+sha256Hex("t")+"\n"), 0o600)
		_, err := auth.LoadFile(path)
		if got := auth.ValidPrincipal(p); got != (err == nil) {
			t.Errorf("principal %q: hash-token accepts it %t, LoadFile says %v", p, got, err)
		}
	}
}

// TestHelp_ListsEveryFlagOfEverySubcommand: paymentsd help shows, under
// each subcommand's heading, every flag that its -h lists.
func TestHelp_ListsEveryFlagOfEverySubcommand(t *testing.T) {
	help := paymentsd(t, "", "help")
	help.want(t, 0)
	flagLine := regexp.MustCompile(`(?m)^  (-[a-z0-9-]+)`)
	for _, c := range program.Commands {
		usage := paymentsd(t, "", c.Name, "-h")
		want := flagLine.FindAllString(usage.stderr, -1)
		heading := "\nFlags of paymentsd " + c.Name + ":"
		_, section, found := strings.Cut(help.stdout, heading)
		if !found && len(want) > 0 {
			t.Errorf("help has no %q, for %v", heading, want)
			continue
		}
		section, _, _ = strings.Cut(section, "\nFlags of ")
		for _, f := range want {
			if !strings.Contains(section, "\n"+f+" ") && !strings.Contains(section, "\n"+f+"\n") {
				t.Errorf("help lists no %s under %q:\n%s", strings.TrimSpace(f), heading, section)
			}
		}
	}
	if !strings.Contains(help.stdout, "\nFlags of the server (paymentsd [flags]):\n  -admin-keys") || !strings.Contains(help.stdout, "-tls-client-ca") {
		t.Errorf("help lost the server's flags, or their heading:\n%s", help.stdout)
	}
	if strings.Contains(help.stdout, "Usage of") {
		t.Errorf("help prints Go's own usage heading among its own:\n%s", help.stdout)
	}
}

// TestHelp_EnvironmentOnce: help says once how the environment sets flags.
func TestHelp_EnvironmentOnce(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}} {
		r := paymentsd(t, "", args...)
		r.want(t, 0)
		if n := strings.Count(r.stdout, config.EnvHelp); n != 1 {
			t.Errorf("paymentsd %q prints the environment's paragraph %d times, want 1:\n%s", args, n, r.stdout)
		}
	}
}
