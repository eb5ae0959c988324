package main

// TestMain, and what the package's tests share of their environment: the
// binary, the PostgreSQL cluster, the PAYMENTSD_ variables.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

// paymentsdBinary is the binary TestMain built for this run.
var paymentsdBinary string

// TestMain builds paymentsd once for every test of the package, and
// starts the PostgreSQL of the tests that need one (pgCluster).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "paymentsd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	paymentsdBinary = filepath.Join(dir, "paymentsd")
	if bin := os.Getenv("PAYMENTSD_TEST_BINARY"); bin != "" {
		// Another build, such as an earlier commit's: do its tests fail?
		paymentsdBinary = bin
	} else if out, err := exec.Command("go", "build", "-o", paymentsdBinary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build paymentsd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Run(m, &pgCluster)
	if missing := undeclared(); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: answers the OpenAPI document does not declare for their operation: %v\n", missing)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is this process's environment without any PAYMENTSD_ variable,
// and with env added.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYMENTSD_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// envInt is the integer in the environment variable name, or def when it
// is unset or not a number.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// pgCluster is a PostgreSQL for the tests of paymentsd on PostgreSQL.
var pgCluster *pgtest.Cluster

// postgresURL is a new database of the package's cluster for this test.
func postgresURL(t *testing.T) string {
	t.Helper()
	return pgtest.Require(t, pgCluster).NewDatabase(t, pgtest.DatabaseName(t.Name()))
}
