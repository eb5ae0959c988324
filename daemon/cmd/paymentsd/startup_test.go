package main

// Startup failures of the real binary: whatever is refused must be refused
// before the data file, or its directory, is created.

import (
	"strings"
	"testing"
)

// anyFailure, as a refusal's wanted exit code, is any but 0.
const anyFailure = -1

// A server flag that cannot be served stops paymentsd with an error that
// names it, before the --db's directory is made: a listen address that
// does not parse or is empty, a negative grace, an empty --db.
func TestE2E_BadServerFlags_RefusedLeavingNoDataFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int      // the exit status, or anyFailure
		says []string // on stderr
		// dirKept: the data directory need not be missing (an empty --db
		// names none).
		dirKept bool
	}{
		{"BadListenAddress", []string{"--listen", "127.0.0.1:99999"}, anyFailure, []string{"99999"}, false},
		{"BadMetricsAddress", []string{"--metrics-listen", "127.0.0.1:99999"}, anyFailure, []string{"metrics", "99999"}, false},
		{"BadHTTPListenAddress", []string{"--http-listen", "127.0.0.1:99999"}, 1, []string{"http:"}, false},
		{"EmptyListen", []string{"--listen", ""}, 2, []string{"--listen must name an address (host:port)"}, false},
		{"NegativeShutdownGrace", []string{"--shutdown-grace=-1s"}, 2, []string{"--shutdown-grace"}, false},
		{"EmptyDB", []string{"--db="}, 2, []string{"--db must name"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr, dir := runToExit(t, tc.args...)
			if code == 0 || (tc.code != anyFailure && code != tc.code) {
				t.Errorf("%q: exit status %d, want %d (%d: any failure)\nstderr:\n%s", tc.args, code, tc.code, anyFailure, stderr)
			}
			for _, s := range tc.says {
				if !strings.Contains(stderr, s) {
					t.Errorf("%q: stderr does not say %q:\n%s", tc.args, s, stderr)
				}
			}
			if !tc.dirKept {
				noDataDir(t, dir)
			}
		})
	}
}
