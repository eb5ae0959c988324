package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// Each listener on a network address, without a credential required and
// without --dev, is refused at start with exit 2, naming the fixes.
func TestExposure_NetworkWithoutCredentials_RefusedNamingTheFix(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--http-listen", "[::]:0"},
		{"--metrics-listen", ":0"},
		{"--listen", "0.0.0.0:0", "--principal-from", "either"}, // bearer tokens still dev mode's
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if args[len(args)-1] == "either" {
				certs := devCertSet(t)
				args = append(args, "--tls-cert", certs.serverCert, "--tls-key", certs.serverKey, "--tls-client-ca", certs.caFile)
			}
			began := time.Now()
			code, stderr, dataDir := runToExit(t, args...)
			took := time.Since(began)
			if code != 2 {
				t.Fatalf("exit %d, want 2:\n%s", code, stderr)
			}
			for _, fix := range []string{"--api-keys", "--tls-client-ca", "--dev", "not a loopback address"} {
				if !strings.Contains(stderr, fix) {
					t.Errorf("the refusal does not name %s:\n%s", fix, stderr)
				}
			}
			if _, err := os.Stat(dataDir); err == nil {
				t.Error("the data directory was made before the refusal")
			}
			t.Logf("exit 2 after %v", took.Round(time.Millisecond))
		})
	}
}

// With --dev, the same address serves dev mode, and says so.
func TestExposure_DevServesANetworkAndSaysSo(t *testing.T) {
	d := start(t, spec{args: []string{"--listen", "0.0.0.0:0", "--dev"}})
	_, port, _ := strings.Cut(d.addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(d.addr, ":")
	}
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(withCreds("anything-at-all", "dev-1"), 10*time.Second)
	defer cancel()
	if _, err := paymentsv1.NewPaymentIntentServiceClient(conn).CreatePaymentIntent(ctx, seedRequest("100")); err != nil {
		t.Fatalf("a create in --dev: %v", err)
	}
	log := d.stderr()
	if !strings.Contains(log, `"level":"WARN","msg":"--dev:`) || !strings.Contains(log, `"exposed":["--listen 0.0.0.0:0"]`) {
		t.Errorf("no WARN line for --dev naming what is exposed:\n%s", log)
	}
}

// The console off loopback needs TLS, whatever else is set.
func TestExposure_ConsoleInPlaintextOnANetwork_Refused(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(keys, []byte(auth.KeyLine("merchant-a", "token-a")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stderr, _ := runToExit(t, "--api-keys", keys, "--admin-keys", adminKeysFile(t), "--admin-listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "--admin-listen 0.0.0.0:0 is not a loopback address: the console needs --tls-cert") {
		t.Fatalf("exit %d, want 2 naming --tls-cert:\n%s", code, stderr)
	}
}

func TestExposure_ReflectionOff(t *testing.T) {
	d := start(t, spec{args: []string{"--reflection=false"}})
	conn := d.dial(t, nil)
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err == nil {
		err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	}
	// Send returns io.EOF when the server has already ended the stream;
	// the status is Recv's to return.
	if err == nil || errors.Is(err, io.EOF) {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection with --reflection=false: %v, want UNIMPLEMENTED", err)
	}
}

// /metrics wants --metrics-token-file's token, read again when the file
// changes; /healthz stays open to probes.
func TestExposure_MetricsToken_RequiredAndRotated(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "metrics-token")
	writeToken := func(s string) {
		t.Helper()
		tmp := token + ".new"
		if err := os.WriteFile(tmp, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, token); err != nil {
			t.Fatal(err)
		}
	}
	writeToken("scrape-1")
	d := start(t, spec{db: filepath.Join(dir, "paymentsd.db"), metrics: true, args: []string{"--metrics-token-file", token}})
	addr := d.metricsAddr(t)
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != `Bearer realm="metrics"` {
			t.Errorf("401 without WWW-Authenticate: %v", resp.Header)
		}
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{{"/metrics", "", 401}, {"/metrics", "wrong", 401}, {"/metrics", "scrape-1", 200}, {"/healthz", "", 200}} {
		if got := get(c.path, c.token); got != c.want {
			t.Errorf("GET %s with token %q: %d, want %d", c.path, c.token, got, c.want)
		}
	}

	writeToken("scrape-2")
	waitFor(t, 10*time.Second, "the new token in use", func() bool { return get("/metrics", "scrape-2") == 200 })
	if got := get("/metrics", "scrape-1"); got != 401 {
		t.Errorf("the old token after the rotation: %d, want 401", got)
	}

	// A file that does not hold one token is refused; the last stays.
	writeToken("two\nlines")
	waitFor(t, 10*time.Second, "the refused reload logged", func() bool {
		return strings.Contains(d.stderr(), "metrics token not reloaded: the previous token stays in use")
	})
	if got := get("/metrics", "scrape-2"); got != 200 {
		t.Errorf("the last good token after a refused reload: %d, want 200", got)
	}
	if strings.Contains(d.stderr(), "scrape-") {
		t.Error("a metrics token reached the log")
	}
}
