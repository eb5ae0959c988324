package main

// paymentsd dev-certs, in process (the subcommand's function with a stdio
// of buffers), and once through the binary to see it registered.

import (
	"bytes"
	"context"
	"crypto/tls"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/credcmd"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
)

// devCerts runs paymentsd dev-certs args in process.
func devCerts(t *testing.T, args ...string) run {
	t.Helper()
	var out, errOut bytes.Buffer
	code := credcmd.DevCerts(context.Background(), &cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errOut}, args)
	return run{stdout: out.String(), stderr: errOut.String(), code: code}
}

func TestDevCerts_WritesTheSet_SecondRunExits3(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	p := func(name string) string { return filepath.Join(dir, name) }
	r := devCerts(t, dir)
	r.want(t, 0, "development only",
		"paymentsd --tls-cert "+p("server.pem")+" --tls-key "+p("server-key.pem")+" --tls-client-ca "+p("ca.pem"),
		"grpcurl -cacert "+p("ca.pem")+" -cert "+p("client-a.pem")+" -key "+p("client-a-key.pem"),
		"curl --cacert "+p("ca.pem")+" --cert "+p("client-a.pem")+" --key "+p("client-a-key.pem"),
		"https://localhost:8080/v1/payment_intents")

	files := map[string]fs.FileMode{
		"ca.pem": 0o644, "server.pem": 0o644, "server-key.pem": 0o600,
		"client-a.pem": 0o644, "client-a-key.pem": 0o600, "client-b.pem": 0o644, "client-b-key.pem": 0o600,
	}
	if info, err := os.Stat(dir); err != nil || info.Mode() != fs.ModeDir|0o700 {
		t.Errorf("directory: %v (%v), want mode 0700", info, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(files) {
		t.Errorf("%d files in DIR, want %d", len(entries), len(files))
	}
	before := map[string][]byte{}
	for name, mode := range files {
		info, err := os.Stat(p(name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", name, info.Mode(), mode)
		}
		if !strings.Contains(r.stdout, p(name)+"\n") {
			t.Errorf("stdout does not list %s:\n%s", name, r.stdout)
		}
		before[name], _ = os.ReadFile(p(name))
	}
	for _, name := range []string{"server", "client-a", "client-b"} {
		if _, err := tls.LoadX509KeyPair(p(name+".pem"), p(name+"-key.pem")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Again: exit 3 saying which file exists, the files as they were.
	r = devCerts(t, dir)
	r.want(t, 3)
	if !strings.Contains(r.stderr, p("ca.pem")) || !strings.Contains(r.stderr, "exists") {
		t.Errorf("second run's stderr does not name the existing ca.pem:\n%s", r.stderr)
	}
	for name, b := range before {
		if got, _ := os.ReadFile(p(name)); !bytes.Equal(got, b) {
			t.Errorf("%s changed on the second run", name)
		}
	}
}

func TestDevCerts_Usage(t *testing.T) {
	for _, args := range [][]string{{}, {"a", "b"}, {""}} {
		r := devCerts(t, args...)
		r.want(t, 2)
		if !strings.Contains(r.stderr, "give one DIR") || !strings.Contains(r.stderr, "usage: paymentsd dev-certs DIR") {
			t.Errorf("dev-certs %q: stderr:\n%s", args, r.stderr)
		}
	}
	devCerts(t, "-h").want(t, 0)

	// Registered in the binary, and listed by help.
	paymentsd(t, "", "dev-certs").want(t, 2)
	paymentsd(t, "", "help").want(t, 0, "paymentsd dev-certs DIR")
	dir := filepath.Join(t.TempDir(), "with space")
	paymentsd(t, "", "dev-certs", dir).want(t, 0, "--tls-cert '"+filepath.Join(dir, "server.pem")+"'")
}
