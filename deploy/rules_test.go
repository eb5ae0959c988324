package deploy

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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

// onlyOn names the families that one backend exports and the other
// cannot, with that backend. A rule or panel may select such a family; on
// the other backend its query is then empty. Each backend's scrape must
// have its own and lack the other's, so the list stays true.
var onlyOn = map[string]string{
	// The group commit's batch: PostgreSQL commits each write alone.
	"paymentsd_store_commits_total":          "bbolt",
	"paymentsd_store_committed_writes_total": "bbolt",
	// The connection pool: bbolt has none.
	"paymentsd_pg_pool_connections":                      "postgres",
	"paymentsd_pg_pool_max_connections":                  "postgres",
	"paymentsd_pg_pool_empty_acquire_wait_seconds_total": "postgres",
	"paymentsd_pg_pool_canceled_acquires_total":          "postgres",
	// Replication: bbolt has none.
	"paymentsd_pg_read_only_errors_total":    "postgres",
	"paymentsd_pg_standby_unconfirmed_total": "postgres",
	"paymentsd_pg_standby_wait_seconds":      "postgres",
}

// onlyWith names the families that paymentsd exports only when started
// with a flag these scrapes do not pass, with that flag. A rule or panel
// may select such a family. Each scrape must lack it, so the list stays
// true; a test of the flag scrapes it.
var onlyWith = map[string]string{
	// It needs client certificates on every call. cmd/paymentsd's
	// TestMTLS_CRLOutOfForceOrOlder_RevokedClientStaysRefused scrapes it.
	"paymentsd_tls_client_crl_next_update_seconds": "--tls-client-crl",
	// They need several pods and etcd. cmd/paymentsd's
	// TestPods_PodDown_HealthAndMetricsByPod scrapes them.
	"paymentsd_pod_up":                 "--pods",
	"paymentsd_placement_directory_up": "--pods",
}

// backends are the stores paymentsd runs on, each with how to scrape it.
var backends = map[string]func(t *testing.T, bin string) families{
	"bbolt":    scrapeBolt,
	"postgres": scrapePostgres,
}

// TestRules_UseOnlyWhatTheBinaryExports scrapes the real binary on each
// backend. It wants every metric the rules and the Grafana dashboard's
// queries select to be a family that backend exports, with the labels
// they match on, unless onlyOn gives the family to the other backend or
// onlyWith to a flag.
// Each backend's scrape follows a store failure, over TLS, so that the
// store's error counter and the certificate's gauge are there. A name with
// a colon must be a recording rule of the file; up is Prometheus's own.
// The dashboard's queries also group and name their legends only by
// labels of the families they select.
func TestRules_UseOnlyWhatTheBinaryExports(t *testing.T) {
	rules := promRules(t)
	queries := dashboardQueries(t)
	for f, b := range onlyOn {
		if backends[b] == nil {
			t.Errorf("onlyOn gives %s to %q, which is no backend", f, b)
		}
	}
	bin := buildPaymentsd(t)
	for _, name := range slices.Sorted(maps.Keys(backends)) {
		t.Run(name, func(t *testing.T) {
			checkExports(t, name, backends[name](t, bin), rules, queries)
		})
	}
}

// checkExports checks that what rules and queries select is in fams, the
// families of backend's scrape, as TestRules_UseOnlyWhatTheBinaryExports
// says.
func checkExports(t *testing.T, backend string, fams families, rules []promRule, queries []dashboardQuery) {
	for f, b := range onlyOn {
		if b == backend && fams[f] == nil {
			t.Errorf("onlyOn gives %s to %s, whose scrape lacks it", f, b)
		}
		if b != backend && fams[f] != nil {
			t.Errorf("onlyOn gives %s to %s, but %s exports it too", f, b, backend)
		}
	}
	for f, flag := range onlyWith {
		if fams[f] != nil {
			t.Errorf("onlyWith gives %s to %s, but the scrape on %s exports it without", f, flag, backend)
		}
	}
	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	// selected checks what expr selects, and returns the labels its
	// families carry, job and instance among them. They are all there
	// unless it selects a family of the other backend, which that
	// backend's check covers.
	selected := func(name, expr string) (labels map[string]bool, all bool) {
		labels, all = map[string]bool{"job": true, "instance": true}, true
		for metric, matched := range metricSelectors(expr) {
			switch {
			case metric == "up":
			case strings.Contains(metric, ":"):
				if !recorded[metric] {
					t.Errorf("%s: %s is no recording rule of %s", name, metric, rulesFile)
				}
			case fams[metric] == nil:
				if b := onlyOn[metric]; (b == "" || b == backend) && onlyWith[metric] == "" {
					t.Errorf("%s: the binary on %s exports no %s", name, backend, metric)
				}
				all = false
			default:
				for _, l := range matched {
					if !labels[l] && !fams[metric][l] {
						t.Errorf("%s: %s has no label %s in the binary's /metrics on %s", name, metric, l, backend)
					}
				}
				for l := range fams[metric] {
					labels[l] = true
				}
			}
		}
		return labels, all
	}
	for _, r := range rules {
		selected(r.Alert+r.Record, r.Expr)
	}
	for _, q := range queries {
		labels, all := selected(q.where, q.Expr)
		if !all {
			continue
		}
		for _, l := range groupingLabels(q.Expr) {
			if !labels[l] {
				t.Errorf("%s: groups by %s, which no family it selects has on %s", q.where, l, backend)
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
				t.Errorf("%s: its legend names %s, which the query does not keep on %s", q.where, m[1], backend)
			}
		}
	}
}
