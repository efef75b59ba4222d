package chart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// alertTests are promtool's unit tests of the chart's alerts.
const alertTests = "testdata/alerts.test.yaml"

// TestAlertRules runs `promtool test rules` on the PrometheusRule the chart renders: what ships, not a
// copy. Every alert must be tested both firing and not firing.
func TestAlertRules(t *testing.T) {
	promtool, err := checkout.Promtool()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules, err := tools(t).AlertRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}

	var ruleFile struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &ruleFile); err != nil {
		t.Fatal(err)
	}
	var testFile struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &testFile); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	checks := 0
	for _, tt := range testFile.Tests {
		for _, check := range tt.AlertRuleTest {
			checks++
			if len(check.ExpAlerts) > 0 {
				firing[check.Alertname] = true
			} else {
				quiet[check.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range ruleFile.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if !firing[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: alert %s is not tested both firing and not firing", alertTests, r.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("the chart's PrometheusRule has no alert")
	}

	out, err := exec.Command(promtool, "test", "rules", filepath.Join(dir, "alerts.test.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s (against the chart's rendered PrometheusRule): %v\n%s", alertTests, err, out)
	}
	t.Logf("promtool: %d test groups, %d alert checks of %d alerts passed", len(testFile.Tests), checks, len(alerts))
}

// dashboardVars stand for the dashboard's variables where its queries are checked.
var dashboardVars = map[string]string{"namespace": ".*", "lease": ".*", "job": "leasegate-webhook"}

// metricName finds the series names a query reads: leasegate's own and controller-runtime's.
var metricName = regexp.MustCompile(`\b(leasegate_[a-z_]+|controller_runtime_[a-z_]+)\b`)

// TestDashboardQueries parses every panel query of the Grafana dashboard (promtool, as recording rules)
// and checks each series it reads is one leasegate or controller-runtime exports. That they return data
// is the real-cluster suite's test, against a Prometheus scraping the real thing.
func TestDashboardQueries(t *testing.T) {
	promtool, err := checkout.Promtool()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := checkout.DashboardQueries(checkout.DashboardPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	exported := exportedMetrics(t)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var records []rule
	for i, q := range queries {
		expr, err := checkout.Substitute(q.Expr, dashboardVars, "5m")
		if err != nil {
			t.Errorf("panel %q query %s: %v", q.Panel, q.RefID, err)
			continue
		}
		records = append(records, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: expr})
		for _, name := range metricName.FindAllString(expr, -1) {
			if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum"); !exported[name] && !exported[base] {
				t.Errorf("panel %q query %s reads %s, which nothing exports", q.Panel, q.RefID, name)
			}
		}
	}
	file, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": records}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query does not parse: %v\n%s", err, out)
	}
}

// exportedMetrics are the metric names leasegate's code registers (its Name: "..." literals) and those of
// controller-runtime's webhook server that the dashboard reads.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{
		"controller_runtime_webhook_requests_total":     true,
		"controller_runtime_webhook_latency_seconds":    true,
		"controller_runtime_webhook_requests_in_flight": true,
	}
	declared := regexp.MustCompile(`Name:\s+"(leasegate_[a-z_]+)"`)
	files, err := filepath.Glob(filepath.Join(checkout.RepoRoot(), "internal", "*", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range declared.FindAllSubmatch(data, -1) {
			names[string(m[1])] = true
		}
	}
	if !names["leasegate_fence_decisions_total"] {
		t.Fatal("found no leasegate metric declared under internal/: the pattern is stale")
	}
	return names
}
