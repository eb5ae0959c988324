package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

// The Prometheus rules of deploy/prometheus, their promtool tests and the
// runbook their alerts point at.
const (
	rulesFile     = "paymentsd.rules.yml"
	ruleTestsFile = "paymentsd.rules_test.yml"
	runbookPage   = "../docs/alerts.md"
	runbookURL    = "https://github.com/paymentsd/paymentsd/blob/main/docs/alerts.md#"
)

type promRule struct {
	Record      string            `json:"record"`
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// promRules decodes the rule file strictly: a misspelled key fails t, where
// Prometheus would refuse the file.
func promRules(t *testing.T) []promRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string     `json:"name"`
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []promRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s holds no rules", rulesFile)
	}
	return rules
}

// promtool is Debian's promtool. Without it the test is skipped, but under
// CI=true, where .ci/run installs it, it fails.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is missing (apt-get install prometheus); CI=true, so not skipped")
		}
		t.Skip("promtool is missing (apt-get install prometheus)")
	}
	return path
}

// TestRules_PromtoolChecksAndTests runs promtool check rules on the rules
// and promtool test rules on their unit tests, input series and all.
func TestRules_PromtoolChecksAndTests(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", ruleTestsFile},
	} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestRules_EveryAlertHasItsRunbookAndBothCases: each alert has a severity,
// a summary, a description and a runbook_url that names a ## section of
// docs/alerts.md; each section is an alert's. And the promtool tests have,
// for each alert, a case where it fires and one where it stays silent.
func TestRules_EveryAlertHasItsRunbookAndBothCases(t *testing.T) {
	page, err := os.ReadFile(runbookPage)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (Paymentsd\w+)$`).FindAllStringSubmatch(string(page), -1) {
		sections[m[1]] = true
	}
	b, err := os.ReadFile(filepath.Join("prometheus", ruleTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatalf("%s: %v", ruleTestsFile, err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}

	alerts := map[string]bool{}
	for _, r := range promRules(t) {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		if want := runbookURL + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !sections[r.Alert] {
			t.Errorf("%s: %s has no section \"## %s\" for its runbook", r.Alert, runbookPage, r.Alert)
		}
		if !fires[r.Alert] || !silent[r.Alert] {
			t.Errorf("%s: %s has a case where it fires: %t, one where it stays silent: %t; want both", r.Alert, ruleTestsFile, fires[r.Alert], silent[r.Alert])
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("%s has a section for %s, which is no alert of %s", runbookPage, s, rulesFile)
		}
	}
}

// metricSelectors returns the metric names an expression selects, each
// with the label names its matchers use. It reads PromQL as far as these
// rules need: string literals, ranges and grouping clauses are dropped, and
// a name followed by "(" is a function or an aggregation.
func metricSelectors(expr string) map[string][]string {
	s := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(expr, `""`)
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(s, " ")
	keywords := []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "inf", "nan"}
	got := map[string][]string{}
	for _, m := range regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*(\(|\{[^}]*\})?`).FindAllStringSubmatch(s, -1) {
		name, next := m[1], m[2]
		if next == "(" || slices.Contains(keywords, strings.ToLower(name)) {
			continue
		}
		labels := got[name]
		for _, l := range regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`).FindAllStringSubmatch(next, -1) {
			labels = append(labels, l[1])
		}
		got[name] = labels
	}
	return got
}

func TestRules_MetricSelectorsReadsPromQL(t *testing.T) {
	for expr, want := range map[string]map[string][]string{
		`sum by (job, grpc_code) (rate(grpc_server_handled_total{job="paymentsd",grpc_service="x"}[5m]))`: {"grpc_server_handled_total": {"job", "grpc_service"}},
		`a:b:rate5m / ignoring (code) group_left a:rate5m`:                                                {"a:b:rate5m": nil, "a:rate5m": nil},
		`up{job="paymentsd"} == 1 unless on (job, instance) idempotency_records{job="paymentsd"}`:         {"up": {"job"}, "idempotency_records": {"job"}},
		`paymentsd_tls_certificate_not_after_seconds{job="p"} - time() < 14 * 86400`:                      {"paymentsd_tls_certificate_not_after_seconds": {"job"}},
		`increase(x_total{reason=~"a|b(c)",file!="by (x) sum(y)"}[15m]) > 0 and bool z`:                   {"x_total": {"reason", "file"}, "z": nil},
	} {
		if got := metricSelectors(expr); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("metricSelectors(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestRules_UseOnlyWhatTheBinaryExports scrapes the real binary and wants
// every metric the rules and the Grafana dashboard's queries select to be a
// family it exports, with the labels they match on. The binary serves TLS,
// so that the certificate's gauge is there. It makes creates until the
// store fails, under a file size limit, so that the store's error counter
// is there too. A name with a colon must be a recording rule of the file;
// up is Prometheus's own. The dashboard's queries also group and name
// their legends only by labels of the families they select.
func TestRules_UseOnlyWhatTheBinaryExports(t *testing.T) {
	rules := promRules(t)
	queries := dashboardQueries(t)
	families := scrapeFamilies(t)

	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	// selected checks what expr selects, and returns the labels its
	// families carry, job and instance among them.
	selected := func(name, expr string) map[string]bool {
		labels := map[string]bool{"job": true, "instance": true}
		for metric, matched := range metricSelectors(expr) {
			switch {
			case metric == "up":
			case strings.Contains(metric, ":"):
				if !recorded[metric] {
					t.Errorf("%s: %s is no recording rule of %s", name, metric, rulesFile)
				}
			case families[metric] == nil:
				t.Errorf("%s: the binary exports no %s", name, metric)
			default:
				for _, l := range matched {
					if !labels[l] && !families[metric][l] {
						t.Errorf("%s: %s has no label %s in the binary's /metrics", name, metric, l)
					}
				}
				for l := range families[metric] {
					labels[l] = true
				}
			}
		}
		return labels
	}
	for _, r := range rules {
		selected(r.Alert+r.Record, r.Expr)
	}
	for _, q := range queries {
		labels := selected(q.where, q.Expr)
		for _, l := range groupingLabels(q.Expr) {
			if !labels[l] {
				t.Errorf("%s: groups by %s, which no family it selects has", q.where, l)
			}
		}
		// A legend names labels the query keeps: those it groups by,
		// or, when it groups by none, those of its families.
		kept := labels
		if g := groupingLabels(q.Expr); len(g) > 0 {
			kept = map[string]bool{}
			for _, l := range g {
				kept[l] = true
			}
		}
		for _, m := range regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`).FindAllStringSubmatch(q.LegendFormat, -1) {
			if !kept[m[1]] {
				t.Errorf("%s: its legend names %s, which the query does not keep", q.where, m[1])
			}
		}
	}
}

// scrapeFamilies starts the real binary on bbolt with TLS, makes creates
// over HTTP until the store fails, and returns the families of its
// /metrics, each with the label names of its series.
func scrapeFamilies(t *testing.T) map[string]map[string]bool {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "paymentsd")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/paymentsd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(bin, "dev-certs", certs).CombinedOutput(); err != nil {
		t.Fatalf("paymentsd dev-certs: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--db", filepath.Join(dir, "paymentsd.db"),
		"--tls-cert", filepath.Join(certs, "server.pem"), "--tls-key", filepath.Join(certs, "server-key.pem"))
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
	var (
		mu  sync.Mutex
		log bytes.Buffer
	)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("paymentsd's log:\n%s", log.String())
			mu.Unlock()
		}
	})
	addrs := map[string]string{}
	sc := bufio.NewScanner(stderr)
	for len(addrs) < 2 && sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		var line struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && (line.Msg == "http listening" || line.Msg == "metrics listening") {
			addrs[line.Msg] = line.Addr
		}
	}
	if len(addrs) < 2 {
		t.Fatalf("paymentsd did not say where it listens:\n%s", log.String())
	}
	go func() {
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()

	ca, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	// Files may grow to 64 KiB from now on: the data file, 32 KiB when
	// new, fills with a few creates, and its next growth fails. The store
	// then answers 503 and counts the error. Its health probe writes
	// 64 KiB, which still fits.
	limit := unix.Rlimit{Cur: 64 << 10, Max: 64 << 10}
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_FSIZE, &limit, nil); err != nil {
		t.Fatal(err)
	}
	const body = `{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3",
		"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		"merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}`
	codes := map[int]int{}
	for i := 0; i < 200 && codes[http.StatusServiceUnavailable] == 0; i++ {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+addrs["http listening"]+"/v1/payment_intents", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer rules-test")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("rules-%d", i))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[http.StatusCreated] == 0 || codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("creates answered %v, want some 201 and then a 503 once the file could not grow", codes)
	}

	resp, err := client.Get("https://" + addrs["metrics listening"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	// "# TYPE name kind" names each family; a histogram's series carry
	// _bucket, _sum and _count, which rules may select too.
	families := map[string]map[string]bool{}
	kinds := map[string]string{}
	series := regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? `)
	label := regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"`)
	msc := bufio.NewScanner(resp.Body)
	msc.Buffer(nil, 1<<20)
	for msc.Scan() {
		line := msc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			kinds[f[2]] = f[3]
			families[f[2]] = map[string]bool{}
			if f[3] == "histogram" || f[3] == "summary" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					families[f[2]+suffix] = map[string]bool{}
				}
			}
			continue
		}
		m := series.FindStringSubmatch(line)
		if m == nil || families[m[1]] == nil {
			continue
		}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			families[m[1]][l[1]] = true
		}
	}
	if err := msc.Err(); err != nil {
		t.Fatal(err)
	}
	for name, ls := range families {
		if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count"); base != name && kinds[base] != "" {
			for l := range ls {
				families[base][l] = true
			}
		}
	}
	for _, name := range []string{"idempotency_store_errors_total", "paymentsd_tls_certificate_not_after_seconds"} {
		if families[name] == nil {
			t.Errorf("the scrape lacks %s, which this test provokes", name)
		}
	}
	return families
}
