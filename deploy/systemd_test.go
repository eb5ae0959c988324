package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemd_UnitVerifiesWithoutAWord runs systemd-analyze verify on the
// unit, its ExecStart pointed at a paymentsd built here (verify checks the
// command exists), and wants it silent: verify exits 0 on an unknown or
// misspelled key, saying so only in its output. Skipped where
// systemd-analyze is missing, except under CI=true.
func TestSystemd_UnitVerifiesWithoutAWord(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing (apt-get install systemd); CI=true, so not skipped")
		}
		t.Skip("systemd-analyze is missing (apt-get install systemd)")
	}
	unit, err := os.ReadFile(filepath.Join("systemd", "paymentsd.service"))
	if err != nil {
		t.Fatal(err)
	}
	const shipped = "ExecStart=/usr/local/bin/paymentsd\n"
	if !strings.Contains(string(unit), shipped) {
		t.Fatalf("the unit has no %q", shipped)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "paymentsd")
	if out, err := exec.Command("go", "build", "-C", "../daemon", "-o", bin, "./cmd/paymentsd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	copied := filepath.Join(dir, "paymentsd.service")
	if err := os.WriteFile(copied, []byte(strings.Replace(string(unit), shipped, "ExecStart="+bin+"\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", copied).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// And it refuses what it should: a misspelled key is a warning only.
	misspelled := filepath.Join(dir, "misspelled.service")
	if err := os.WriteFile(misspelled, []byte(strings.Replace(string(unit), "ProtectHome=", "ProtectHomes=", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(analyze, "verify", misspelled).CombinedOutput(); !strings.Contains(string(out), "ProtectHomes") {
		t.Errorf("systemd-analyze verify said nothing of a misspelled key: %q", out)
	}
}

// TestSystemd_UnitHardening: the settings the unit promises, each as
// written, so that a change that drops one is seen.
func TestSystemd_UnitHardening(t *testing.T) {
	f, err := os.Open(filepath.Join("systemd", "paymentsd.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			got[k] = append(got[k], v)
		}
	}
	for k, want := range map[string]string{
		"ExecStart": "/usr/local/bin/paymentsd", "ExecReload": "/bin/kill -HUP $MAINPID",
		"StateDirectory": "paymentsd", "User": "paymentsd",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
		"ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "RestrictNamespaces": "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "LockPersonality": "yes",
		"MemoryDenyWriteExecute": "yes", "SystemCallFilter": "@system-service", "CapabilityBoundingSet": "",
	} {
		if v := got[k]; len(v) != 1 || v[0] != want {
			t.Errorf("%s=%q, want %s=%s once", k, v, k, want)
		}
	}
}
