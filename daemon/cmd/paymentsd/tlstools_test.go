package main

// The TLS server driven with the tools an operator would use, grpcurl and
// curl, from the certificates paymentsd dev-certs writes.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const curlPath = "/usr/bin/curl"

var grpcurl struct {
	once sync.Once
	path string
	err  error
}

// grpcurlBinary builds grpcurl from tools/go.mod, once per run.
func grpcurlBinary(t *testing.T) string {
	t.Helper()
	grpcurl.once.Do(func() {
		path := filepath.Join(filepath.Dir(paymentsdBinary), "grpcurl") // removed with the binary by TestMain
		cmd := exec.Command("go", "build", "-modfile=../../../tools/go.mod", "-o", path, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
		if out, err := cmd.CombinedOutput(); err != nil {
			grpcurl.err = fmt.Errorf("build grpcurl: %v\n%s", err, out)
			return
		}
		grpcurl.path = path
	})
	if grpcurl.err != nil {
		needTool(t, "%v", grpcurl.err)
	}
	return grpcurl.path
}

func curlBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath(curlPath); err != nil {
		needTool(t, "curl: %v", err)
	}
	return curlPath
}

// runGRPCurl runs grpcurl with args and returns its decoded JSON answer.
func runGRPCurl(t *testing.T, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, grpcurlBinary(t), append([]string{"-max-time", "10"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpcurl %q: %v\n%s%s", args, err, out, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("grpcurl %q printed %s: %v", args, out, err)
	}
	return m
}

// curlAnswer is what curl saw of one exchange.
type curlAnswer struct {
	httpAnswer
	version string // curl's %{http_version}: "2" for HTTP/2
}

// runCurl runs curl with args (a URL among them) and returns the answer.
func runCurl(t *testing.T, args ...string) curlAnswer {
	t.Helper()
	dir := t.TempDir()
	headers, body := filepath.Join(dir, "headers"), filepath.Join(dir, "body")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, curlBinary(t), append([]string{
		"-sS", "--max-time", "10", "-D", headers, "-o", body, "-w", "%{http_code} %{http_version}",
	}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl %q: %v\n%s", args, err, stderr.String())
	}
	var a curlAnswer
	if _, err := fmt.Sscanf(string(out), "%d %s", &a.status, &a.version); err != nil {
		t.Fatalf("curl -w printed %q: %v", out, err)
	}
	a.header = http.Header{}
	raw, _ := os.ReadFile(headers)
	for _, line := range strings.Split(string(raw), "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(name, "HTTP/") {
			a.header.Add(name, strings.TrimSpace(value))
		}
	}
	a.body, _ = os.ReadFile(body)
	return a
}

// grpcurlIntentID is the id of the intent in a grpcurl answer (grpcurl
// prints lowerCamelCase JSON names).
func grpcurlIntentID(t *testing.T, m map[string]any) string {
	t.Helper()
	pi, _ := m["paymentIntent"].(map[string]any)
	id, _ := pi["id"].(string)
	if id == "" {
		t.Fatalf("grpcurl answer %v holds no paymentIntent.id", m)
	}
	return id
}

// TestTLS_GRPCurlAndCurl_SameIntent drives the TLS server with the tools an
// operator would use, from the certificates `paymentsd dev-certs` writes:
// grpcurl -cacert and curl --cacert, and with --tls-client-ca, -cert/-key
// and --cert/--key. A key and body sent by one tool is the same request
// when the other sends it.
func TestTLS_GRPCurlAndCurl_SameIntent(t *testing.T) {
	for _, mtls := range []bool{false, true} {
		name := "TLS"
		if mtls {
			name = "mTLS"
		}
		t.Run(name, func(t *testing.T) {
			grpcurlBinary(t)
			curlBinary(t)
			certs := devCertSet(t)
			var args, grpcurlTLS, curlTLS []string
			grpcurlTLS = []string{"-cacert", certs.caFile}
			curlTLS = []string{"--cacert", certs.caFile}
			if mtls {
				args = []string{"--tls-client-ca", certs.caFile}
				a := certs.clients["client-a"]
				grpcurlTLS = append(grpcurlTLS, "-cert", a.cert, "-key", a.key)
				curlTLS = append(curlTLS, "--cert", a.cert, "--key", a.key)
			}
			client := ""
			if mtls {
				client = "client-a"
			}
			d := startTLS(t, certs, client, args...)
			d.waitLine(t, "paymentsd listening", map[string]any{"tls": true}, logWait)
			d.waitLine(t, "http listening", map[string]any{"tls": true}, logWait)

			grpcCreate := func(key string) map[string]any {
				return runGRPCurl(t, append(slices.Clone(grpcurlTLS),
					"-H", "authorization: Bearer t1", "-H", "idempotency-key: "+key, "-d", seedBody,
					d.addr, "payments.v1.PaymentIntentService/CreatePaymentIntent")...)
			}
			curlCreate := func(key string) curlAnswer {
				return runCurl(t, append(slices.Clone(curlTLS),
					"-H", "Authorization: Bearer t1", "-H", "Idempotency-Key: "+key,
					"-H", "Content-Type: application/json", "--data-raw", seedBody, d.intentsURL())...)
			}

			// grpcurl first, then curl.
			g := grpcurlIntentID(t, grpcCreate("tools-1"))
			c := curlCreate("tools-1")
			if c.status != http.StatusCreated || c.header.Get("Idempotent-Replayed") != "true" || c.intent(t)["id"] != g {
				t.Errorf("curl after grpcurl: %d, Idempotent-Replayed %q, body %s; want 201, true, intent %s",
					c.status, c.header.Get("Idempotent-Replayed"), c.body, g)
			}
			if c.version != "2" {
				t.Errorf("curl spoke HTTP/%s, want HTTP/2 (h2 by ALPN)", c.version)
			}
			// curl first, then grpcurl.
			c = curlCreate("tools-2")
			if c.status != http.StatusCreated || c.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("curl create: %d, Idempotent-Replayed %q, body %s; want 201, fresh", c.status, c.header.Get("Idempotent-Replayed"), c.body)
			}
			second, _ := c.intent(t)["id"].(string)
			if g2 := grpcurlIntentID(t, grpcCreate("tools-2")); g2 != second {
				t.Errorf("grpcurl after curl: intent %s, want curl's %s", g2, second)
			}

			want := []string{g, second}
			slices.Sort(want)
			list := runCurl(t, append(slices.Clone(curlTLS), "-H", "Authorization: Bearer t1", d.intentsURL())...)
			if got := listedIDs(t, list.httpAnswer); !slices.Equal(sorted(got), want) {
				t.Errorf("curl lists %v, want %v", got, want)
			}
			m := runGRPCurl(t, append(slices.Clone(grpcurlTLS), "-H", "authorization: Bearer t1", "-d", `{"page_size":100}`,
				d.addr, "payments.v1.PaymentIntentService/ListPaymentIntents")...)
			var got []string
			pis, _ := m["paymentIntents"].([]any)
			for _, pi := range pis {
				id, _ := pi.(map[string]any)["id"].(string)
				got = append(got, id)
			}
			if !slices.Equal(sorted(got), want) {
				t.Errorf("grpcurl lists %v, want %v", got, want)
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
