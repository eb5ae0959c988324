package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// families maps each metric family of a scrape to the label names of its
// series.
type families map[string]map[string]bool

// buildPaymentsd builds the binary once for the backends' scrapes.
func buildPaymentsd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "paymentsd")
	if out, err := exec.Command("go", "build", "-C", "../daemon", "-o", bin, "./cmd/paymentsd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// server is a running paymentsd serving TLS, in dev mode.
type server struct {
	httpAddr, metricsAddr string
	pid                   int
	client                *http.Client

	mu  sync.Mutex
	log bytes.Buffer
}

// startPaymentsd runs bin on db with TLS on every listener. The
// certificate's gauge is then exported. It returns once it listens.
func startPaymentsd(t *testing.T, bin, db string) *server {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(bin, "dev-certs", certs).CombinedOutput(); err != nil {
		t.Fatalf("paymentsd dev-certs: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--db", db, "--tls-cert", filepath.Join(certs, "server.pem"), "--tls-key", filepath.Join(certs, "server-key.pem"))
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYMENTSD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{pid: cmd.Process.Pid}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("paymentsd's log:\n%s", s.logText())
		}
	})
	addrs := map[string]string{}
	sc := bufio.NewScanner(stderr)
	for len(addrs) < 2 && sc.Scan() {
		s.log.WriteString(sc.Text() + "\n")
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && (line.Msg == "http listening" || line.Msg == "metrics listening") {
			addrs[line.Msg] = line.Addr
		}
	}
	if len(addrs) < 2 {
		t.Fatalf("paymentsd did not say where it listens:\n%s", s.log.String())
	}
	go func() {
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
		}
	}()
	s.httpAddr, s.metricsAddr = addrs["http listening"], addrs["metrics listening"]

	ca, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	s.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return s
}

func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// scrapeToken is the bearer token of every create. Dev mode makes its
// principal, the scope of its keys, "dev:" and its SHA-256.
const scrapeToken = "rules-test"

// create posts a create of amount under key and returns its status and
// whether it was a replay.
func (s *server) create(t *testing.T, key, amount string) (status int, replayed bool) {
	t.Helper()
	body := `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3",
		"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		"merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"` + amount + `","expires_in_seconds":900}`
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+s.httpAddr+"/v1/payment_intents", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+scrapeToken)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true"
}

// provokeOutcomes makes a fresh create, its replay and a mismatch, each
// answered as the HTTP API promises.
func (s *server) provokeOutcomes(t *testing.T) {
	t.Helper()
	for _, c := range []struct {
		what, amount string
		status       int
		replayed     bool
	}{
		{"a fresh create", "100000000", http.StatusCreated, false},
		{"its retry", "100000000", http.StatusCreated, true},
		{"the key reused for another amount", "999000000", http.StatusUnprocessableEntity, false},
	} {
		if status, replayed := s.create(t, "rules-outcomes", c.amount); status != c.status || replayed != c.replayed {
			t.Fatalf("%s: %d (replayed %t), want %d (replayed %t)", c.what, status, replayed, c.status, c.replayed)
		}
	}
}

// waitHealthz waits until /healthz answers status. The store's probe runs
// every second; it fails t after 300 tries, 100 ms apart.
func (s *server) waitHealthz(t *testing.T, status int) {
	t.Helper()
	for tries := 0; ; tries++ {
		resp, err := s.client.Get("https://" + s.metricsAddr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == status {
			return
		}
		if tries == 300 {
			t.Fatalf("/healthz still answers %d, want %d", resp.StatusCode, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrapeBolt runs bin on a bbolt file, provokes the outcomes, then makes
// creates until the file cannot grow. The store then fails and counts
// the error. It returns the families of the scrape.
func scrapeBolt(t *testing.T, bin string) families {
	s := startPaymentsd(t, bin, filepath.Join(t.TempDir(), "paymentsd.db"))
	s.provokeOutcomes(t)

	// Files may grow to 64 KiB from now on: the data file, 32 KiB when
	// new, fills with a few creates, and its next growth fails. The store
	// then answers 503 and counts the error. Its health probe writes
	// 64 KiB, which still fits.
	limit := unix.Rlimit{Cur: 64 << 10, Max: 64 << 10}
	if err := unix.Prlimit(s.pid, unix.RLIMIT_FSIZE, &limit, nil); err != nil {
		t.Fatal(err)
	}
	codes := map[int]int{}
	for i := 0; i < 200 && codes[http.StatusServiceUnavailable] == 0; i++ {
		status, _ := s.create(t, fmt.Sprintf("rules-%d", i), "100000000")
		codes[status]++
	}
	if codes[http.StatusCreated] == 0 || codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("creates answered %v, want some 201 and then a 503 once the file could not grow", codes)
	}
	return s.scrape(t, "fresh", "replay", "mismatch")
}

// scrapePostgres runs bin on a database of a throwaway PostgreSQL of its
// own. It provokes the outcomes and a duplicate refused as in flight,
// while another session holds the key's lock. Then it stops the database,
// so that a create fails in the store, and starts it again. It returns
// the families of the scrape, taken once the store serves again. Without
// PostgreSQL it skips, but under CI=true it fails.
func scrapePostgres(t *testing.T, bin string) families {
	c, stop, err := pgtest.Start()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL did not start and CI=true, so not skipped: %v", err)
		}
		t.Skipf("PostgreSQL did not start (apt-get install postgresql): %v", err)
	}
	t.Cleanup(stop)
	url := c.NewDatabase(t, "rules")
	s := startPaymentsd(t, bin, url)
	s.provokeOutcomes(t)

	// Another replica's create of the key, in flight: a duplicate waits
	// for the key's lock, then is refused.
	holder := pgtest.Connect(t, url)
	sum := sha256.Sum256([]byte(scrapeToken))
	held := storage.RecordKey{Scope: "dev:" + hex.EncodeToString(sum[:]), Key: "rules-held"}
	if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, pgstore.KeyLock(held)); err != nil {
		t.Fatal(err)
	}
	if status, _ := s.create(t, held.Key, "100000000"); status != http.StatusConflict {
		t.Fatalf("a create of a key another session holds: %d, want 409 (in flight)", status)
	}
	if _, err := holder.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}

	c.Stop(t)
	status, _ := s.create(t, "rules-down", "100000000")
	if status != http.StatusServiceUnavailable {
		t.Fatalf("a create with the database stopped: %d, want 503", status)
	}
	// Health sees the database down before it comes back. The pool's
	// connections have then been idle over a second, so the pool pings
	// each before it lends it, and drops the dead. Without the wait, the
	// scrape's count of records may get a dead one, and lack its gauge.
	s.waitHealthz(t, http.StatusServiceUnavailable)
	c.StartAgain(t)
	s.waitHealthz(t, http.StatusOK)
	f := s.scrape(t, "fresh", "replay", "mismatch", "in_flight")
	if log := s.logText(); strings.Contains(log, pgtest.Password) {
		t.Errorf("the database password is in paymentsd's log")
	}
	return f
}

// scrape returns the families of the server's /metrics, each with the
// label names of its series. It fails t if a family the test provoked is
// missing, or a series of idempotency_requests_total with one of outcomes.
func (s *server) scrape(t *testing.T, outcomes ...string) families {
	t.Helper()
	resp, err := s.client.Get("https://" + s.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	// "# TYPE name kind" names each family; a histogram's series carry
	// _bucket, _sum and _count, which rules may select too.
	fams := families{}
	kinds := map[string]string{}
	series := regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? `)
	label := regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"`)
	outcome := regexp.MustCompile(`^idempotency_requests_total\{.*\boutcome="(\w+)"`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := outcome.FindStringSubmatch(line); m != nil {
			seen[m[1]] = true
		}
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			kinds[f[2]] = f[3]
			fams[f[2]] = map[string]bool{}
			if f[3] == "histogram" || f[3] == "summary" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					fams[f[2]+suffix] = map[string]bool{}
				}
			}
			continue
		}
		m := series.FindStringSubmatch(line)
		if m == nil || fams[m[1]] == nil {
			continue
		}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			fams[m[1]][l[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name, ls := range fams {
		if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count"); base != name && kinds[base] != "" {
			for l := range ls {
				fams[base][l] = true
			}
		}
	}
	// The test provoked the first and serves TLS; the store serves.
	for _, name := range []string{"idempotency_store_errors_total", "paymentsd_tls_certificate_not_after_seconds", "idempotency_records"} {
		if fams[name] == nil {
			t.Errorf("the scrape lacks %s", name)
		}
	}
	for _, o := range outcomes {
		if !seen[o] {
			t.Errorf("the scrape has no idempotency_requests_total{outcome=%q}, which this test provoked", o)
		}
	}
	return fams
}
