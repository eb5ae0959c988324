package healthcmd_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paymentsd/paymentsd/daemon/healthcmd"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/daemon/testkit/grpctest"
)

// run runs paymentsd health with args, and returns its exit code and
// what it printed.
func run(t *testing.T, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = healthcmd.Run(context.Background(), &cli.Stdio{In: strings.NewReader(""), Out: &o, Err: &e}, args)
	return code, o.String(), e.String()
}

func TestRun_AnswersTheServersStatus(t *testing.T) {
	srv := grpc.NewServer()
	h := health.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	addr := grpctest.Serve(t, srv).Target()

	if code, out, errOut := run(t, "--addr", addr); code != cli.ExitOK || out != "SERVING\n" {
		t.Errorf("serving: exit %d, %q %q; want 0, SERVING", code, out, errOut)
	}
	h.Shutdown()
	if code, out, _ := run(t, "--addr", addr); code != cli.ExitNo || out != "NOT_SERVING\n" {
		t.Errorf("not serving: exit %d, %q; want 1, NOT_SERVING", code, out)
	}
	if code, _, errOut := run(t, "--addr", addr, "--service", "no.Such"); code != cli.ExitNo || !strings.Contains(errOut, "NotFound") {
		t.Errorf("unknown service: exit %d, %q; want 1 and NotFound", code, errOut)
	}
}

func TestRun_BadCommandLine_Exits2(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "0"}, "--timeout must be positive"},
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--addr", ""}, "--addr must name an address"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if code, _, errOut := run(t, c.args...); code != cli.ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// Asked over TLS, a plaintext server's refusal says so, and how to ask.
func TestRun_TLSAgainstPlaintext_SaysSo(t *testing.T) {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	addr := grpctest.Serve(t, srv).Target()
	dir := t.TempDir()
	if _, err := devcerts.Dev(dir); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "--addr", addr, "--tls-ca", filepath.Join(dir, "ca.pem"))
	if code != cli.ExitNo || !strings.Contains(errOut, "the server speaks plaintext, not TLS: leave out --tls-ca") {
		t.Errorf("TLS to a plaintext server: exit %d, %q; want 1 and the hint", code, errOut)
	}
}
