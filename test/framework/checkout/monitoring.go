package checkout

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Promtool is the path of the pinned promtool `make promtool` builds, or an error that says how to build it.
func Promtool() (string, error) {
	return prometheusBinary("promtool")
}

// PrometheusServer is the path of the pinned prometheus `make prometheus` builds, or an error that says
// how to build it.
func PrometheusServer() (string, error) {
	return prometheusBinary("prometheus")
}

// prometheusBinary is bin/tools/prometheus-<PROMETHEUS_VERSION>/<name>: the version hack/versions.env
// pins, never whatever is on PATH (Debian's is 2.42).
func prometheusBinary(name string) (string, error) {
	v, err := PinnedVersions()
	if err != nil {
		return "", err
	}
	path := filepath.Join(RepoRoot(), "bin", "tools", "prometheus-"+v["PROMETHEUS_VERSION"], name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing: run `make %s`, which builds it from the Go module proxy", path, name)
	}
	return path, nil
}

// MonitoringValues turn on the chart's alerts and Grafana dashboard.
const MonitoringValues = "metrics: {prometheusRule: {enabled: true}}\ngrafanaDashboard: {enabled: true}\n"

// AlertRules renders the chart with its alerts on and returns the PrometheusRule's spec: a Prometheus
// rule file of what the chart ships.
func (t *Tools) AlertRules(dir string) ([]byte, error) {
	values := filepath.Join(dir, "monitoring-values.yaml")
	if err := os.WriteFile(values, []byte(MonitoringValues), 0o644); err != nil {
		return nil, err
	}
	rendered, err := t.RenderChart("leasegate-system", values)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var rule struct {
			Kind string          `json:"kind"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &rule); err != nil {
			return nil, err
		}
		if rule.Kind == "PrometheusRule" {
			return yaml.JSONToYAML(rule.Spec)
		}
	}
	return nil, errors.New("the chart rendered no PrometheusRule with metrics.prometheusRule.enabled")
}

// DashboardPath is the Grafana dashboard the chart ships.
func DashboardPath() string { return filepath.Join(ChartDir(), "dashboards", "leasegate.json") }

// PanelQuery is one query of a dashboard panel.
type PanelQuery struct {
	Panel, RefID string
	// Expr is the query as the dashboard has it, with Grafana's variables.
	Expr string
}

// DashboardQueries lists every panel query of the dashboard at path, rows' nested panels included.
func DashboardQueries(path string) ([]PanelQuery, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dashboard struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var queries []PanelQuery
	var walk func([]json.RawMessage) error
	walk = func(raw []json.RawMessage) error {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for _, t := range p.Targets {
				queries = append(queries, PanelQuery{Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return queries, walk(dashboard.Panels)
}

// Substitute replaces Grafana's variables in a panel query: each of vars ("namespace" -> "shop") and
// $__rate_interval by rateInterval. A variable left over is an error naming it.
func Substitute(expr string, vars map[string]string, rateInterval string) (string, error) {
	expr = strings.ReplaceAll(expr, "$__rate_interval", rateInterval)
	for name, value := range vars {
		expr = strings.ReplaceAll(expr, "$"+name, value)
	}
	if i := strings.Index(expr, "$"); i >= 0 {
		return "", fmt.Errorf("query %q keeps a variable the test does not know at %q", expr, expr[i:])
	}
	return expr, nil
}

// ServiceMonitorEndpoint is how the chart's ServiceMonitor tells the Prometheus Operator to scrape the
// webhook, for a harness that configures a Prometheus the same way.
type ServiceMonitorEndpoint struct {
	Port        string `json:"port"`
	Scheme      string `json:"scheme"`
	HonorLabels bool   `json:"honorLabels"`
	TLSConfig   struct {
		ServerName string `json:"serverName"`
	} `json:"tlsConfig"`
}

// ServiceMonitor renders the chart with its ServiceMonitor on, in namespace, and returns its endpoint.
func (t *Tools) ServiceMonitor(dir, namespace string) (*ServiceMonitorEndpoint, error) {
	values := filepath.Join(dir, "servicemonitor-values.yaml")
	if err := os.WriteFile(values, []byte("metrics: {serviceMonitor: {enabled: true}}\nnetworkPolicy: {metricsFrom: [{podSelector: {}}]}\n"), 0o644); err != nil {
		return nil, err
	}
	rendered, err := t.RenderChart(namespace, values)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var monitor struct {
			Kind string `json:"kind"`
			Spec struct {
				Endpoints []ServiceMonitorEndpoint `json:"endpoints"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &monitor); err != nil {
			return nil, err
		}
		if monitor.Kind == "ServiceMonitor" && len(monitor.Spec.Endpoints) == 1 {
			return &monitor.Spec.Endpoints[0], nil
		}
	}
	return nil, errors.New("the chart rendered no ServiceMonitor with one endpoint with metrics.serviceMonitor.enabled")
}
