package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
)

var cluster *pgtest.Cluster

// raceBuild is true when the tests run with -race (race_test.go). The
// example binary is then built with -race too.
var raceBuild = false

// binDir holds the example's binary, built once for all tests.
var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "jetstream-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := pgtest.Run(m, &cluster)
	os.RemoveAll(binDir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the example with go build, with -race under a race test.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "jetstream")
		args := []string{"build", "-o", binPath}
		if raceBuild {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}
