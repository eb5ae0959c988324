package main

// Startup failures of the real binary: whatever is refused must be refused
// before the data file, or its directory, is created.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runToExit runs paymentsd with a --db in a directory that does not exist
// yet and waits for it to exit. It returns the exit status, stderr and the
// data directory.
func runToExit(t *testing.T, args ...string) (code int, stderr, dataDir string) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), "data")
	d := launch(t, filepath.Join(dataDir, "paymentsd.db"), args...)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("paymentsd %q did not exit:\n%s", args, d.stderr())
	}
	var exit *exec.ExitError
	switch {
	case d.err == nil:
		code = 0
	case errors.As(d.err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("paymentsd %q: %v", args, d.err)
	}
	return code, d.stderr(), dataDir
}

// noDataDir fails t if dir, the --db's directory, exists.
func noDataDir(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("data directory %s: stat %v, entries %v; want it never created", dir, err, entries)
	}
}

func TestE2E_BadListenAddress_ExitsLeavingNoDataFile(t *testing.T) {
	code, stderr, dir := runToExit(t, "--listen", "127.0.0.1:99999")
	if code == 0 || !strings.Contains(stderr, "99999") {
		t.Errorf("bad --listen: exit status %d, stderr:\n%s\nwant a non-zero status and an error naming the address", code, stderr)
	}
	noDataDir(t, dir)
}

func TestE2E_BadMetricsAddress_ExitsLeavingNoDataFile(t *testing.T) {
	code, stderr, dir := runToExit(t, "--metrics-listen", "127.0.0.1:99999")
	if code == 0 || !strings.Contains(stderr, "metrics") || !strings.Contains(stderr, "99999") {
		t.Errorf("bad --metrics-listen: exit status %d, stderr:\n%s\nwant a non-zero status and an error naming metrics and the address", code, stderr)
	}
	noDataDir(t, dir)
}

func TestE2E_NegativeShutdownGrace_RefusedAtFlagParsing(t *testing.T) {
	code, stderr, dir := runToExit(t, "--shutdown-grace=-1s")
	if code != 2 || !strings.Contains(stderr, "--shutdown-grace") {
		t.Errorf("--shutdown-grace=-1s: exit status %d, stderr:\n%s\nwant status 2 (a usage error) and a message naming --shutdown-grace", code, stderr)
	}
	noDataDir(t, dir)
}

func TestE2E_EmptyDB_RefusedAtFlagParsing(t *testing.T) {
	code, stderr, _ := runToExit(t, "--db=")
	if code != 2 || !strings.Contains(stderr, "--db must name") {
		t.Errorf("--db '': exit status %d, stderr:\n%s\nwant status 2 (a usage error) and a message naming --db", code, stderr)
	}
}
