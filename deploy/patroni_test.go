package deploy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// patroniFile is the example Patroni configuration of one member.
var patroniFile = filepath.Join("patroni", "patroni.yml")

// patroniConfig is every key patroni.yml sets. It is decoded strictly:
// Patroni ignores a key it does not know, so a misspelled
// synchronous_mode_strict would run the cluster without it, unseen.
type patroniConfig struct {
	Scope     string `json:"scope"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Restapi   struct {
		Listen         string `json:"listen"`
		ConnectAddress string `json:"connect_address"`
	} `json:"restapi"`
	Etcd3 struct {
		Hosts []string `json:"hosts"`
	} `json:"etcd3"`
	Bootstrap struct {
		DCS struct {
			TTL                   int  `json:"ttl"`
			LoopWait              int  `json:"loop_wait"`
			RetryTimeout          int  `json:"retry_timeout"`
			MaximumLagOnFailover  int  `json:"maximum_lag_on_failover"`
			SynchronousMode       bool `json:"synchronous_mode"`
			SynchronousModeStrict bool `json:"synchronous_mode_strict"`
			PostgreSQL            struct {
				UsePgRewind bool `json:"use_pg_rewind"`
				UseSlots    bool `json:"use_slots"`
				Parameters  struct {
					SynchronousCommit string `json:"synchronous_commit"`
					WalLogHints       string `json:"wal_log_hints"`
					MaxConnections    int    `json:"max_connections"`
				} `json:"parameters"`
			} `json:"postgresql"`
		} `json:"dcs"`
		Initdb []any    `json:"initdb"`
		PgHba  []string `json:"pg_hba"`
	} `json:"bootstrap"`
	PostgreSQL struct {
		Listen         string `json:"listen"`
		ConnectAddress string `json:"connect_address"`
		DataDir        string `json:"data_dir"`
		BinDir         string `json:"bin_dir"`
		Pgpass         string `json:"pgpass"`
		// No password field: a password in the file fails decoding.
		Authentication map[string]struct {
			Username string `json:"username"`
		} `json:"authentication"`
		PgHba []string `json:"pg_hba"`
	} `json:"postgresql"`
	Watchdog struct {
		Mode         string `json:"mode"`
		Device       string `json:"device"`
		SafetyMargin int    `json:"safety_margin"`
	} `json:"watchdog"`
	Tags map[string]bool `json:"tags"`
}

// TestPatroni_ConfigKeepsAcknowledgedCreates reads patroni.yml strictly and
// wants the settings paymentsd's promise rests on: synchronous and strict,
// commits that wait for the standby's disk, pg_rewind, a watchdog, timers
// Patroni accepts, and no password in the file.
func TestPatroni_ConfigKeepsAcknowledgedCreates(t *testing.T) {
	b, err := os.ReadFile(patroniFile)
	if err != nil {
		t.Fatal(err)
	}
	var c patroniConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("%s: %v", patroniFile, err)
	}
	dcs := c.Bootstrap.DCS
	if !dcs.SynchronousMode || !dcs.SynchronousModeStrict {
		t.Errorf("synchronous_mode %t, synchronous_mode_strict %t; want both true: without them a failover loses acknowledged creates",
			dcs.SynchronousMode, dcs.SynchronousModeStrict)
	}
	if got := dcs.PostgreSQL.Parameters.SynchronousCommit; got != "on" && got != "remote_apply" {
		t.Errorf("synchronous_commit %q, want \"on\" or \"remote_apply\": a commit must wait for the standby's disk", got)
	}
	if got := dcs.PostgreSQL.Parameters.WalLogHints; got != "on" {
		t.Errorf("wal_log_hints %q, want \"on\", which pg_rewind needs", got)
	}
	if !dcs.PostgreSQL.UsePgRewind {
		t.Error("use_pg_rewind is false: an old primary would not rejoin as a standby")
	}
	if dcs.TTL != 30 || dcs.LoopWait != 10 || dcs.RetryTimeout != 10 {
		t.Errorf("ttl %d, loop_wait %d, retry_timeout %d; want 30, 10 and 10, as docs/postgresql.md says", dcs.TTL, dcs.LoopWait, dcs.RetryTimeout)
	}
	if dcs.LoopWait+2*dcs.RetryTimeout > dcs.TTL {
		t.Errorf("loop_wait + 2 * retry_timeout = %d, over ttl %d: a leader could lose its key while it retries", dcs.LoopWait+2*dcs.RetryTimeout, dcs.TTL)
	}
	if lag := dcs.MaximumLagOnFailover; lag <= 0 || lag > 16<<20 {
		t.Errorf("maximum_lag_on_failover %d, want from 1 byte to 16 MiB", lag)
	}
	if n := len(c.Etcd3.Hosts); n != 3 {
		t.Errorf("%d etcd3 hosts, want 3", n)
	}
	if w := c.Watchdog; w.Mode != "automatic" && w.Mode != "required" || w.SafetyMargin <= 0 || w.SafetyMargin >= dcs.TTL-dcs.LoopWait {
		t.Errorf("watchdog mode %q, safety_margin %d; want automatic or required, and a margin that leaves the watchdog ttl - margin > loop_wait", w.Mode, w.SafetyMargin)
	}
	for _, user := range []string{"superuser", "replication", "rewind"} {
		if c.PostgreSQL.Authentication[user].Username == "" {
			t.Errorf("postgresql.authentication.%s has no username", user)
		}
	}
	repl := c.PostgreSQL.Authentication["replication"].Username
	if !slices.ContainsFunc(c.PostgreSQL.PgHba, func(l string) bool {
		f := strings.Fields(l)
		return len(f) >= 3 && f[0] == "host" && f[1] == "replication" && f[2] == repl
	}) {
		t.Errorf("postgresql.pg_hba has no host line for replication by %q", repl)
	}
	if !slices.Equal(c.PostgreSQL.PgHba, c.Bootstrap.PgHba) {
		t.Errorf("bootstrap.pg_hba and postgresql.pg_hba differ:\n%q\n%q", c.Bootstrap.PgHba, c.PostgreSQL.PgHba)
	}
	if c.Tags["nosync"] || c.Tags["nofailover"] {
		t.Errorf("tags %v: this member could never be the synchronous standby or the leader", c.Tags)
	}

	// And the strict decoding refuses what it should.
	for _, bad := range []struct{ old, new string }{
		{"synchronous_mode_strict: true", "synchronous_mode_stict: true"},
		{"username: replicator", "username: replicator\n      password: secret"},
	} {
		if !strings.Contains(string(b), bad.old) {
			t.Fatalf("%s has no %q", patroniFile, bad.old)
		}
		var c patroniConfig
		if err := yaml.UnmarshalStrict([]byte(strings.Replace(string(b), bad.old, bad.new, 1)), &c); err == nil {
			t.Errorf("%q decoded without an error", bad.new)
		}
	}
}

// TestPatroni_ConfigValidates runs patroni --validate-config on
// patroni.yml. The validator checks the machine too: each etcd host must
// accept a connection, the listen ports must be free, and bin_dir must hold
// PostgreSQL's programs. So the etcd hosts here are listeners of the
// test's, and the listen addresses free ports, given through Patroni's
// environment variables as on a member. A bad watchdog mode must fail it.
// Skipped where patroni is missing, except under CI=true.
func TestPatroni_ConfigValidates(t *testing.T) {
	patroni, err := exec.LookPath("patroni")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("patroni is missing (apt-get install patroni); CI=true, so not skipped")
		}
		t.Skip("patroni is missing (apt-get install patroni)")
	}
	b, err := os.ReadFile(patroniFile)
	if err != nil {
		t.Fatal(err)
	}
	var c patroniConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.PostgreSQL.BinDir, "pg_ctl")); err != nil {
		t.Fatalf("bin_dir %s: %v (apt-get install postgresql-15)", c.PostgreSQL.BinDir, err)
	}
	var etcd []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		etcd = append(etcd, l.Addr().String())
	}
	env := []string{
		"PATRONI_ETCD3_HOSTS=" + strings.Join(etcd, ","),
		"PATRONI_RESTAPI_LISTEN=127.0.0.1:" + freePort(t),
		"PATRONI_POSTGRESQL_LISTEN=127.0.0.1:" + freePort(t),
		"PATRONI_POSTGRESQL_DATA_DIR=" + filepath.Join(t.TempDir(), "data"),
		"PATRONI_SUPERUSER_PASSWORD=test-superuser",
		"PATRONI_REPLICATION_PASSWORD=test-replication",
		"PATRONI_REWIND_PASSWORD=test-rewind",
	}
	validate := func(file string) (string, error) {
		cmd := exec.Command(patroni, "--validate-config", file)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATRONI_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := validate(patroniFile); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("patroni --validate-config %s: %v\n%s", patroniFile, err, out)
	}

	bad := filepath.Join(t.TempDir(), "patroni.yml")
	if !strings.Contains(string(b), "mode: automatic") {
		t.Fatalf("%s has no watchdog mode: automatic", patroniFile)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(string(b), "mode: automatic", "mode: sometimes", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := validate(bad); err == nil || !strings.Contains(out, "watchdog.mode") {
		t.Errorf("patroni --validate-config accepted watchdog mode: sometimes (%v):\n%s", err, out)
	}
}

// freePort returns a port of 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}
