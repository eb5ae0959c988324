package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The Grafana dashboard, written by make generate (deploy/grafana/gen).
const dashboardFile = "grafana/paymentsd.json"

// dashboardQuery is one target of a panel of the dashboard.
type dashboardQuery struct {
	where        string // the panel's title and the target's refId
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	RefID        string `json:"refId"`
}

// dashboardQueries returns every targets[].expr of the dashboard's panels,
// those inside rows included. A panel without a query fails t.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string           `json:"type"`
		Title   string           `json:"title"`
		Targets []dashboardQuery `json:"targets"`
		Panels  []panel          `json:"panels"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var queries []dashboardQuery
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
			}
			for _, q := range p.Targets {
				q.where = fmt.Sprintf("%s: panel %q, query %s", dashboardFile, p.Title, q.RefID)
				if strings.TrimSpace(q.Expr) == "" {
					t.Errorf("%s has no expr", q.where)
				}
				queries = append(queries, q)
			}
		}
	}
	walk(d.Panels)
	if len(queries) == 0 {
		t.Fatalf("%s holds no queries", dashboardFile)
	}
	return queries
}

// groupingLabels returns the labels of an expression's by and without
// clauses, in order.
func groupingLabels(expr string) []string {
	s := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(expr, `""`)
	var labels []string
	for _, m := range regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`).FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	return labels
}

func TestDashboard_GroupingLabelsReadsPromQL(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.5, sum by (grpc_method, le) (rate(x_bucket{a="by (z)"}[5m])))`: {"grpc_method", "le"},
		`sum by(code)(rate(x[5m])) / ignoring (code) group_left sum without (a,b) (y)`:       {"code", "a", "b"},
		`min(up)`: nil,
	} {
		if got := groupingLabels(expr); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("groupingLabels(%q) = %v, want %v", expr, got, want)
		}
	}
}

// dashboardVariables are the values the dashboard's variables stand for
// when its queries are parsed: Grafana replaces them before Prometheus
// sees a query.
var dashboardVariables = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$job", "paymentsd",
	"$instance", ".*",
)

// TestDashboard_QueriesParse has promtool check rules parse each query of
// the dashboard, its variables replaced, as the expression of a recording
// rule in a file of its own making. A variable it does not know fails.
func TestDashboard_QueriesParse(t *testing.T) {
	queries := dashboardQueries(t)
	pt := promtool(t)

	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, q := range queries {
		expr := dashboardVariables.Replace(q.Expr)
		if v := regexp.MustCompile(`\$\{?\w+`).FindString(expr); v != "" {
			t.Errorf("%s: unknown variable %s", q.where, v)
		}
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i+1), Expr: expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "check", "rules", file).CombinedOutput(); err != nil {
		// promtool names a rule by its place in the file; dashboard:query_N
		// is the Nth query below.
		var list strings.Builder
		for i, q := range queries {
			fmt.Fprintf(&list, "%d. %s: %s\n", i+1, q.where, q.Expr)
		}
		t.Errorf("promtool check rules: %v\n%s\nqueries:\n%s", err, out, list.String())
	}
}
