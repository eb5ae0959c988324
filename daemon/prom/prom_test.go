package prom_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/internal/devcerts"
	"github.com/paymentsd/paymentsd/daemon/prom"
	"github.com/paymentsd/paymentsd/daemon/tlsreload"
)

// scrape returns the lines of p's exposition that start with prefix.
func scrape(t *testing.T, p *prom.Prom, prefix string) []string {
	t.Helper()
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

func TestProm_RecordsAndReloads(t *testing.T) {
	p, err := prom.New(func() (float64, error) { return 3, nil })
	if err != nil {
		t.Fatal(err)
	}
	p.Reloaded("api_keys", errors.New("no such file"))
	p.Reloaded("tls", nil)
	(*prom.Prom)(nil).Reloaded("tls", nil) // metrics off: nothing, no panic
	if got := scrape(t, p, "idempotency_records "); len(got) != 1 || got[0] != "idempotency_records 3" {
		t.Errorf("records: %q", got)
	}
	want := []string{
		`paymentsd_credential_reloads_total{file="admin_keys",result="error"} 0`,
		`paymentsd_credential_reloads_total{file="admin_keys",result="ok"} 0`,
		`paymentsd_credential_reloads_total{file="api_keys",result="error"} 1`,
		`paymentsd_credential_reloads_total{file="api_keys",result="ok"} 0`,
		`paymentsd_credential_reloads_total{file="metrics_token",result="error"} 0`,
		`paymentsd_credential_reloads_total{file="metrics_token",result="ok"} 0`,
		`paymentsd_credential_reloads_total{file="tls",result="error"} 0`,
		`paymentsd_credential_reloads_total{file="tls",result="ok"} 1`,
	}
	if got := scrape(t, p, "paymentsd_credential_reloads_total{"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reloads:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := scrape(t, p, "go_goroutines "); len(got) != 1 {
		t.Errorf("Go's metrics: %q", got)
	}
}

func TestProm_WatchCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := devcerts.Dev(dir); err != nil {
		t.Fatal(err)
	}
	s, err := tlsreload.Load(tlsreload.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := prom.New(func() (float64, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	p.WatchCertificate(s)
	got := scrape(t, p, "paymentsd_tls_certificate_not_after_seconds ")
	if want := fmt.Sprintf("paymentsd_tls_certificate_not_after_seconds %g", float64(s.Leaf().NotAfter.Unix())); len(got) != 1 || got[0] != want {
		t.Errorf("got %q, want %s", got, want)
	}
}
