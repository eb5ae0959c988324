package main

// One-shot runs of the binary, to their exit: the operator subcommands,
// and servers refused at start.

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run is one run of the binary to its exit.
type run struct {
	stdout, stderr string
	code           int
}

// want fails t unless r exited with code and its stdout holds each of
// stdout.
func (r run) want(t *testing.T, code int, stdout ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout does not say %q:\n%s\nstderr:\n%s", s, r.stdout, r.stderr)
		}
	}
}

// paymentsd runs the binary with args, stdin as its standard input.
func paymentsd(t *testing.T, stdin string, args ...string) run {
	t.Helper()
	cmd := exec.Command(paymentsdBinary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	return runCmd(t, cmd, args)
}

// runBounded runs paymentsd args in the working directory dir ("": this
// process's) and the environment env, and kills it after limit, which fails
// t: every refusal tested with it must come at once.
func runBounded(t *testing.T, limit time.Duration, dir string, env []string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, paymentsdBinary, args...)
	cmd.Dir, cmd.Env = dir, env
	began := time.Now()
	r := runCmd(t, cmd, args)
	if ctx.Err() != nil {
		t.Fatalf("paymentsd %q did not return within %v (killed):\nstdout:\n%s\nstderr:\n%s", args, limit, r.stdout, r.stderr)
	}
	t.Logf("paymentsd %q: exit %d after %v", args, r.code, time.Since(began).Round(time.Millisecond))
	return r
}

// runCmd runs cmd, a run of paymentsd args, to its exit.
func runCmd(t *testing.T, cmd *exec.Cmd, args []string) run {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errOut.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("paymentsd %q: %v", args, err)
	}
	return r
}

// runToExit runs paymentsd with a --db in a directory that does not exist
// yet and waits for it to exit. It returns the exit status, stderr and the
// data directory.
func runToExit(t *testing.T, args ...string) (code int, stderr, dataDir string) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), "data")
	d := start(t, spec{db: filepath.Join(dataDir, "paymentsd.db"), args: args, noWait: true})
	return d.exitCode(t, 30*time.Second), d.stderr(), dataDir
}
