package main

// Startup failures of the real binary: whatever is refused must be refused
// before the data file, or its directory, is created.

import (
	"strings"
	"testing"
)

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
