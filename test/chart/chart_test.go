// Package chart tests charts/leasegate with the pinned helm: lint and render for a matrix of values, the
// schema's refusals, and the kustomize bases under config/ (which are the chart rendered with its
// defaults). The chart against a real API server and the real cert-manager is in the e2e suite; the
// values table of docs/reference.md, generated from the schema, is test/docs'.
package chart

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/test/framework/checkout"
)

var update = flag.Bool("update", false, "rewrite config/ from the chart rendered with its default values")

// namespace is where config/ installs leasegate.
const namespace = "leasegate-system"

func tools(t *testing.T) *checkout.Tools {
	t.Helper()
	tl, err := checkout.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// valuesFiles are the matrix every test renders: the defaults ("") and each file in testdata/values.
func valuesFiles(t *testing.T) []string {
	files, err := filepath.Glob("testdata/values/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in testdata/values: %v", err)
	}
	return append([]string{""}, files...)
}

func TestChartLintsAndRenders(t *testing.T) {
	tl := tools(t)
	for _, values := range valuesFiles(t) {
		t.Run("values="+filepath.Base(values), func(t *testing.T) {
			var files []string
			if values != "" {
				files = []string{values}
			}
			if out, err := tl.LintChart(files...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			if _, err := tl.RenderChart(namespace, files...); err != nil {
				t.Fatalf("helm template: %v", err)
			}
		})
	}
}

func TestChartRejectsBadValues(t *testing.T) {
	tl := tools(t)
	tests := []struct {
		name   string
		values string
		want   []string
	}{
		{"a misspelt top-level key", "replicas: 3\n", []string{`additional properties 'replicas' not allowed`}},
		{"a misspelt nested key", "webhook:\n  failurPolicy: {guarded: Fail}\n", []string{`at '/webhook': additional properties 'failurPolicy' not allowed`}},
		{"an unknown failure policy", "webhook:\n  failurePolicy: {guarded: Sometimes}\n", []string{`at '/webhook/failurePolicy/guarded': value must be one of 'Fail', 'Ignore'`}},
		{"no replicas", "replicaCount: 0\n", []string{`at '/replicaCount': minimum: got 0, want 1`}},
		{"a duration that is not one", "config:\n  election: {leaseDuration: fifteen}\n", []string{`at '/config/election/leaseDuration'`}},
		{"a webhook election timing that is not a duration", "leaderElection: {renewDeadline: ten}\n", []string{`at '/leaderElection/renewDeadline'`}},
		{"a flow control precedence past the built-in catch-all", "flowControl: {matchingPrecedence: 10000}\n", []string{`at '/flowControl/matchingPrecedence': maximum: got 10,000, want 9,999`}},
		{"agents' lease writes matched after the built-in catch-all", "flowControl: {agentLeaseWrites: {matchingPrecedence: 10000}}\n", []string{`at '/flowControl/agentLeaseWrites/matchingPrecedence': maximum: got 10,000, want 9,999`}},
		{"agents' lease writes without a share of the API server", "flowControl: {agentLeaseWrites: {nominalConcurrencyShares: 0}}\n", []string{`at '/flowControl/agentLeaseWrites/nominalConcurrencyShares': minimum: got 0, want 1`}},
		{"agents' lease writes matched before leasegate-webhook's own requests", "flowControl: {matchingPrecedence: 1000, agentLeaseWrites: {enabled: true, matchingPrecedence: 500}}\n",
			[]string{"flowControl.agentLeaseWrites.matchingPrecedence (500) is not above flowControl.matchingPrecedence (1000)", "raise flowControl.agentLeaseWrites.matchingPrecedence"}},
		{"a guard without resources", "config:\n  guards: [{name: g, lease: l}]\n", []string{`at '/config/guards/0': missing property 'resources'`}},
		{"an unknown enforcement", "config:\n  guards: [{name: g, lease: l, resources: [{group: apps, resources: [deployments]}], enforcement: block}]\n",
			[]string{`at '/config/guards/0/enforcement': value must be one of 'deny', 'warn', 'dryrun'`}},
		{"no certificate at all", "certificates:\n  certManager: {enabled: false}\n", []string{"certificates.existingSecret is required when certificates.certManager.enabled is false"}},
		{"a certificate of one's own without its CA (the API server would trust no answer)", "certificates:\n  certManager: {enabled: false}\n  existingSecret: my-tls\n",
			[]string{"certificates.caBundle is empty: with certificates.existingSecret", "set certificates.caBundle"}},
		{"a webhook that may escalate privileges", "securityContext: {allowPrivilegeEscalation: true}\n", []string{`at '/securityContext/allowPrivilegeEscalation': value must be false`}},
		{"a webhook without runAsNonRoot", "securityContext: {runAsNonRoot: null}\n", []string{`at '/securityContext': missing property 'runAsNonRoot'`}},
		{"a webhook keeping capabilities", "securityContext: {capabilities: {drop: [NET_RAW]}}\n", []string{`at '/securityContext/capabilities/drop'`}},
		{"a webhook pod as root", "podSecurityContext: {runAsUser: 0}\n", []string{`at '/podSecurityContext/runAsUser': minimum: got 0, want 1`}},
		{"a privileged agent", "config:\n  agent:\n    securityContext: {privileged: true}\n", []string{`at '/config/agent/securityContext/privileged': value must be false`}},
		{"an agent with a capability added", "config:\n  agent:\n    securityContext: {capabilities: {add: [NET_ADMIN]}}\n", []string{`at '/config/agent/securityContext/capabilities/add'`}},
		{"an agent as root", "config:\n  agent:\n    securityContext: {runAsUser: 0}\n", []string{`at '/config/agent/securityContext/runAsUser': minimum: got 0, want 1`}},
		{"an agent context that only unsets the user (it has no default in values.yaml to keep the rest of)", "config:\n  agent:\n    securityContext: {runAsUser: null, runAsGroup: null}\n",
			[]string{`at '/config/agent/securityContext': missing properties 'runAsNonRoot', 'allowPrivilegeEscalation', 'capabilities', 'seccompProfile'`}},
		{"an unconfined agent", "config:\n  agent:\n    securityContext: {seccompProfile: {type: Unconfined}}\n", []string{`at '/config/agent/securityContext/seccompProfile/type'`}},
		{"a digest that is not one", "image:\n  agent: {digest: \"sha256:abc\"}\n", []string{`at '/image/agent/digest'`}},
		{"an extra argument that is not a flag", "extraArgs: [zap-log-level=debug]\n", []string{`at '/extraArgs/0'`}},
		{"an extra variable without a name", "extraEnv: [{value: x}]\n", []string{`at '/extraEnv/0': missing property 'name'`}},
		{"an extra mount without a path", "extraVolumeMounts: [{name: x}]\n", []string{`at '/extraVolumeMounts/0': missing property 'mountPath'`}},
		{"a probe that never fails", "probes: {liveness: {failureThreshold: 0}}\n", []string{`at '/probes/liveness/failureThreshold': minimum: got 0, want 1`}},
		{"a webhook port that is none", "webhook: {port: 0}\n", []string{`at '/webhook/port': minimum: got 0, want 1`}},
		{"a ServiceMonitor elsewhere without a CA it can read there", "metrics:\n  serviceMonitor: {enabled: true, namespace: monitoring}\nnetworkPolicy: {metricsFrom: [{podSelector: {}}]}\n",
			[]string{"metrics.serviceMonitor.caSecretName: the ServiceMonitor goes to namespace monitoring", "or set metrics.secure=false"}},
		{"the old helm test image string", "tests: {image: \"curlimages/curl:8.11.1\"}\n", []string{`at '/tests/image': got string, want object`}},
		{"a multi-cluster controller without the etcd Secret", "multicluster:\n  clusterName: eu-west\n  etcd: {endpoints: [\"https://etcd.example:2379\"]}\n",
			[]string{"multicluster.etcd.secretName: the Secret with the global etcd's ca.crt and this cluster's tls.crt and tls.key"}},
		{"a plain-text etcd endpoint", "multicluster:\n  etcd: {endpoints: [\"http://etcd.example:2379\"]}\n", []string{`at '/multicluster/etcd/endpoints/0'`}},
		{"client verification without the CA's Secret", "webhook:\n  clientVerification: {enabled: true}\n",
			[]string{"webhook.clientVerification.caSecretName: the Secret whose ca.crt signs the API server's client certificate"}},
		{"an empty client subject name", "webhook:\n  clientVerification: {enabled: true, caSecretName: ca, subjectNames: [\"\"]}\n",
			[]string{`at '/webhook/clientVerification/subjectNames/0'`}},
		{"a ServiceMonitor the NetworkPolicy would refuse", "metrics:\n  serviceMonitor: {enabled: true}\n",
			[]string{"networkPolicy.metricsFrom is empty, so the NetworkPolicy would refuse the ServiceMonitor's scrapes"}},
		{"a network peer that is not one", "networkPolicy:\n  webhookFrom: [{cidr: 10.0.0.0/8}]\n", []string{`at '/networkPolicy/webhookFrom/0'`}},
		{"an address block without its prefix length", "networkPolicy:\n  webhookFrom: [{ipBlock: {cidr: 10.0.0.1}}]\n", []string{`at '/networkPolicy/webhookFrom/0/ipBlock/cidr'`}},
		{"an unknown lease kind", "config:\n  guards: [{name: g, lease: l, leaseKind: Mcl, resources: [{group: apps, resources: [deployments]}]}]\n",
			[]string{`at '/config/guards/0/leaseKind': value must be one of 'Lease', 'MultiClusterLease'`}},
		{"a wildcard group (it would fence nothing)", "config:\n  guards: [{name: g, lease: l, resources: [{group: \"*\", resources: [deployments]}]}]\n",
			[]string{`at '/config/guards/0/resources/0/group'`}},
		{"a capitalised resource", "config:\n  guards: [{name: g, lease: l, resources: [{group: apps, resources: [Deployments]}]}]\n",
			[]string{`at '/config/guards/0/resources/0/resources/0'`}},
		{"a wildcard excluded subresource", "config:\n  guards: [{name: g, lease: l, resources: [{group: apps, resources: [deployments], excludeSubresources: [\"*\"]}]}]\n",
			[]string{`at '/config/guards/0/resources/0/excludeSubresources/0'`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(path, []byte(tt.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := tl.RenderChart(namespace, path)
			if err == nil {
				t.Fatalf("helm template accepted:\n%s", tt.values)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			}
		})
	}
}

// configFiles maps each chart template to the kustomize base that carries its default rendering.
var configFiles = map[string]string{
	"serviceaccount.yaml": "rbac/serviceaccount.yaml",
	"rbac.yaml":           "rbac/rbac.yaml",
	"certificates.yaml":   "certmanager/certificates.yaml",
	"configmap.yaml":      "webhook/configmap.yaml",
	"deployment.yaml":     "webhook/deployment.yaml",
	"flowschema.yaml":     "webhook/flowschema.yaml",
	"networkpolicy.yaml":  "webhook/networkpolicy.yaml",
	"pdb.yaml":            "webhook/pdb.yaml",
	"resourcequota.yaml":  "webhook/resourcequota.yaml",
	"service.yaml":        "webhook/service.yaml",
	"webhooks.yaml":       "webhook/webhooks.yaml",
}

// monitoringFiles maps the templates checkout.MonitoringValues switch on to config/monitoring: the
// alerts and the Grafana dashboard, which the chart renders only when asked (they need the Prometheus
// Operator and Grafana's sidecar).
var monitoringFiles = map[string]string{
	"monitoring.yaml": "monitoring/prometheusrule.yaml",
	"dashboard.yaml":  "monitoring/dashboard.yaml",
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: leasegate/templates/(\S+)\n`)

// TestConfigIsTheRenderedChart keeps config/ (kustomize) and the chart one install: config/ is the chart
// rendered with its defaults, minus Helm's own labels, and config/monitoring the alerts and dashboard
// rendered with them on. A stale file fails; -update rewrites them.
func TestConfigIsTheRenderedChart(t *testing.T) {
	monitoring := filepath.Join(t.TempDir(), "monitoring.yaml")
	if err := os.WriteFile(monitoring, []byte(checkout.MonitoringValues), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, render := range []struct {
		name, values string
		files        map[string]string
		valuesNote   string
	}{
		{name: "defaults", files: configFiles, valuesNote: "its default values"},
		{name: "monitoring", values: monitoring, files: monitoringFiles, valuesNote: "prometheusRule and grafanaDashboard enabled"},
	} {
		t.Run(render.name, func(t *testing.T) {
			var values []string
			if render.values != "" {
				values = []string{render.values}
			}
			rendered, err := tools(t).RenderChart(namespace, values...)
			if err != nil {
				t.Fatal(err)
			}
			docs := map[string][]string{}
			for _, doc := range strings.Split(string(rendered), "\n---\n") {
				m := sourceLine.FindStringSubmatch(doc)
				if m == nil {
					continue
				}
				template := m[1]
				if strings.HasPrefix(template, "tests/") {
					continue // helm test hooks have no place in a kustomize install
				}
				if _, ok := render.files[template]; !ok {
					if render.values == "" {
						t.Fatalf("template %s renders by default but has no place in config/: add it to configFiles", template)
					}
					continue // the defaults' share, checked above
				}
				doc = sourceLine.ReplaceAllString(doc, "")
				doc = regexp.MustCompile(`(?m)^\s*(app.kubernetes.io/managed-by|helm.sh/chart): .*\n`).ReplaceAllString(doc, "")
				docs[template] = append(docs[template], strings.TrimSpace(doc))
			}
			for template, file := range render.files {
				want := []byte("# Rendered from charts/leasegate (templates/" + template + ") with " + render.valuesNote + " by\n" +
					"# `go test ./test/chart -update`; edit the chart, not this file.\n" + strings.Join(docs[template], "\n---\n") + "\n")
				path := filepath.Join(checkout.RepoRoot(), "config", file)
				if *update {
					if err := os.WriteFile(path, want, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != string(want) {
					t.Errorf("config/%s is stale: run go test ./test/chart -update and review the diff", file)
				}
			}
		})
	}
}

// TestCRDsAreOneFile keeps the chart's CRDs (installed by Helm before the templates) the same files as
// config/crd (kubectl apply -k users and the e2e suite install those).
func TestCRDsAreOneFile(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(checkout.RepoRoot(), "config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd: %v", err)
	}
	for _, file := range files {
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(checkout.ChartDir(), "crds", filepath.Base(file)))
		if err != nil || string(got) != string(want) {
			t.Errorf("charts/leasegate/crds/%s differs from config/crd: copy it over", filepath.Base(file))
		}
	}
}

// TestKustomizeBuildsTheSameInstall builds config/default as `kubectl apply -k` would and checks it holds
// exactly the objects the chart renders by default (plus the namespace), all in leasegate-system.
func TestKustomizeBuildsTheSameInstall(t *testing.T) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).
		Run(filesys.MakeFsOnDisk(), filepath.Join(checkout.RepoRoot(), "config", "default"))
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	var built []string
	for _, r := range resources.Resources() {
		built = append(built, r.GetKind()+" "+r.GetNamespace()+"/"+r.GetName())
	}
	rendered, err := tools(t).RenderChart(namespace)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Namespace /" + namespace}
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		if strings.Contains(doc, "# Source: leasegate/templates/tests/") {
			continue
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "" {
			want = append(want, meta.Kind+" "+meta.Metadata.Namespace+"/"+meta.Metadata.Name)
		}
	}
	slices.Sort(built)
	slices.Sort(want)
	if !slices.Equal(built, want) {
		t.Errorf("kustomize build config/default =\n%s\nthe chart renders\n%s", strings.Join(built, "\n"), strings.Join(want, "\n"))
	}
}

// TestMetricsSecurity checks what metrics.secure switches: the webhook's flag, the review rights it needs,
// the reader role for scrapers, how the ServiceMonitor scrapes, and what `helm test` expects.
func TestMetricsSecurity(t *testing.T) {
	tl := tools(t)
	// The NetworkPolicy lets Prometheus in.
	const scrapers = "networkPolicy: {metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}\n"
	for _, tc := range []struct {
		name   string
		values string
		want   []string
		absent []string
	}{
		{
			name:   "secure by default",
			values: "metrics: {serviceMonitor: {enabled: true}}\n" + scrapers,
			want: []string{"--metrics-secure=true", "resources: [tokenreviews]", "resources: [subjectaccessreviews]",
				"name: leasegate-metrics-reader", "- nonResourceURLs: [/metrics]", "scheme: https",
				"serverName: leasegate-webhook.leasegate-system.svc", "secret: {name: leasegate-webhook-tls, key: ca.crt}",
				"svc:8080/metrics | grep -q '^401$'"},
		},
		{
			name:   "a certificate of the user's own: the ServiceMonitor trusts its Secret's ca.crt",
			values: "metrics: {serviceMonitor: {enabled: true}}\ncertificates: {certManager: {enabled: false}, existingSecret: my-tls, caBundle: x}\n" + scrapers,
			want:   []string{"secret: {name: my-tls, key: ca.crt}"},
		},
		{
			name:   "plain metrics",
			values: "metrics: {secure: false, serviceMonitor: {enabled: true}}\n" + scrapers,
			want:   []string{"--metrics-secure=false", "curl -sf http://leasegate-webhook.leasegate-system.svc:8080/metrics"},
			absent: []string{"tokenreviews", "subjectaccessreviews", "leasegate-metrics-reader", "scheme: https", "bearerTokenFile"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(path, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			rendered, err := tl.RenderChart(namespace, path)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(rendered), want) {
					t.Errorf("rendered chart lacks %q", want)
				}
			}
			for _, absent := range tc.absent {
				if strings.Contains(string(rendered), absent) {
					t.Errorf("rendered chart has %q", absent)
				}
			}
		})
	}
}

// TestCARenewalKeepsItsKey pins what keeps admission up through a CA renewal: the CA is reissued with
// the key it had, so serving certificates it signed before stay trusted by the new CA certificate while
// the webhook pods still serve them (kubelet refreshes a Secret volume up to a minute later). cert-manager
// 1.18 and later rotate keys by default; the serving certificate's key is rotated on every renewal.
func TestCARenewalKeepsItsKey(t *testing.T) {
	rendered, err := tools(t).RenderChart(namespace)
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{}
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				PrivateKey struct {
					RotationPolicy string `json:"rotationPolicy"`
				} `json:"privateKey"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err == nil && obj.Kind == "Certificate" {
			policies[obj.Metadata.Name] = obj.Spec.PrivateKey.RotationPolicy
		}
	}
	want := map[string]string{"leasegate-ca": "Never", "leasegate-webhook": "Always"}
	for name, policy := range want {
		if policies[name] != policy {
			t.Errorf("Certificate %s: privateKey.rotationPolicy %q, want %q (all: %v)", name, policies[name], policy, policies)
		}
	}
}

// TestChartDefaultConfigIsConfigDefault ties values.yaml's config to the Go defaults: the chart's
// rendered leasegate-config loads, without a warning, to exactly what an empty one loads to, but for the
// agent image, which the chart pins to its appVersion.
func TestChartDefaultConfigIsConfigDefault(t *testing.T) {
	rendered, err := tools(t).RenderChart(namespace)
	if err != nil {
		t.Fatal(err)
	}
	data := renderedConfig(t, rendered)
	got, err := config.Load([]byte(data))
	if err != nil {
		t.Fatalf("the chart's default config does not load: %v\n%s", err, data)
	}
	if len(got.Warnings) > 0 {
		t.Errorf("the chart's default config loads with warnings: %q", got.Warnings)
	}
	want, err := config.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	want.Warnings = nil
	chartImage := "ghcr.io/leasegate/leasegate-agent:" + appVersion(t)
	if got.Agent.Image != chartImage {
		t.Errorf("the chart's agent image is %q, want %q", got.Agent.Image, chartImage)
	}
	got.Agent.Image = want.Agent.Image
	if !equality.Semantic.DeepEqual(got, want) {
		gotYAML, _ := yaml.Marshal(got)
		wantYAML, _ := yaml.Marshal(want)
		t.Errorf("values.yaml's config differs from config.Default; chart:\n%s\nGo:\n%s", gotYAML, wantYAML)
	}
}

// appVersion is the chart's appVersion, the tag of the images it installs.
func appVersion(t *testing.T) string {
	data, err := os.ReadFile(filepath.Join(checkout.ChartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	return chart.AppVersion
}

// TestConfigChangeKeepsTheWebhookRunning: leasegate-config is reloaded live by every replica, so an
// upgrade that changes only config: must not roll the webhook Deployment (a restart of the admission path
// for nothing).
func TestConfigChangeKeepsTheWebhookRunning(t *testing.T) {
	tl := tools(t)
	deployment := func(values string) string {
		t.Helper()
		var files []string
		if values != "" {
			path := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(path, []byte(values), 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, path)
		}
		rendered, err := tl.RenderChart(namespace, files...)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(rendered), "\n---\n") {
			if strings.Contains(doc, "\nkind: Deployment\n") {
				return doc
			}
		}
		t.Fatal("no Deployment rendered")
		return ""
	}
	before := deployment("")
	after := deployment("config:\n  missingPodIdentity: warn\n  guards: [{name: orders, lease: orders, resources: [{group: apps, resources: [deployments]}]}]\n")
	if before != after {
		t.Errorf("changing config: changes the webhook Deployment, so helm upgrade would roll it:\n%s\n---\n%s", before, after)
	}
}

// TestNetworkPolicy checks what the chart's NetworkPolicy lets in: by default the webhook port from
// everywhere (the API server's address is not known to the chart), the metrics port only from `helm
// test`, the health port from nobody; the peers networkPolicy names when set.
func TestNetworkPolicy(t *testing.T) {
	tl := tools(t)
	type rule struct {
		Ports []struct {
			Port int `json:"port"`
		} `json:"ports"`
		From []map[string]any `json:"from"`
	}
	for _, tc := range []struct {
		name string
		// values is empty for the defaults.
		values string
		// want is, by port, the peers of its rule as JSON; "" is a rule without from: every source.
		// A port not listed has no rule: closed.
		want map[int]string
	}{{
		name: "by default: the webhook port open, metrics only to helm test, health closed",
		want: map[int]string{
			9443: "",
			8080: `[{"podSelector":{"matchLabels":{"leasegate.io/helm-test":"leasegate-webhook"}}}]`,
		},
	}, {
		name:   "the API server's addresses and a Prometheus named",
		values: "webhook: {port: 10250}\nnetworkPolicy:\n  webhookFrom: [{ipBlock: {cidr: 10.0.0.0/24}}]\n  metricsFrom: [{namespaceSelector: {matchLabels: {team: monitoring}}}]\n",
		want: map[int]string{
			10250: `[{"ipBlock":{"cidr":"10.0.0.0/24"}}]`,
			8080:  `[{"podSelector":{"matchLabels":{"leasegate.io/helm-test":"leasegate-webhook"}}},{"namespaceSelector":{"matchLabels":{"team":"monitoring"}}}]`,
		},
	}, {
		name:   "disabled",
		values: "networkPolicy: {enabled: false}\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var files []string
			if tc.values != "" {
				path := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(path, []byte(tc.values), 0o644); err != nil {
					t.Fatal(err)
				}
				files = append(files, path)
			}
			rendered, err := tl.RenderChart(namespace, files...)
			if err != nil {
				t.Fatal(err)
			}
			var policy *struct {
				Spec struct {
					PodSelector struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"podSelector"`
					PolicyTypes []string `json:"policyTypes"`
					Ingress     []rule   `json:"ingress"`
				} `json:"spec"`
			}
			for _, doc := range strings.Split(string(rendered), "\n---\n") {
				var obj struct {
					Kind string `json:"kind"`
				}
				if err := yaml.Unmarshal([]byte(doc), &obj); err == nil && obj.Kind == "NetworkPolicy" {
					if err := yaml.Unmarshal([]byte(doc), &policy); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.want == nil {
				if policy != nil {
					t.Fatal("a NetworkPolicy rendered with networkPolicy.enabled=false")
				}
				return
			}
			if policy == nil {
				t.Fatal("no NetworkPolicy rendered")
			}
			if got := policy.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"]; got != "leasegate-webhook" || !slices.Equal(policy.Spec.PolicyTypes, []string{"Ingress"}) {
				t.Errorf("the policy selects %v for %v, want the webhook's pods for Ingress only", policy.Spec.PodSelector.MatchLabels, policy.Spec.PolicyTypes)
			}
			got := map[int]string{}
			for _, r := range policy.Spec.Ingress {
				from := ""
				if len(r.From) > 0 {
					data, _ := json.Marshal(r.From)
					from = string(data)
				}
				for _, p := range r.Ports {
					if _, dup := got[p.Port]; dup {
						t.Errorf("port %d is in two rules", p.Port)
					}
					got[p.Port] = from
				}
			}
			for port, from := range tc.want {
				if g, ok := got[port]; !ok || g != from {
					t.Errorf("port %d: from %q (ruled: %v), want %q", port, g, ok, from)
				}
			}
			for port := range got {
				if _, ok := tc.want[port]; !ok {
					t.Errorf("port %d is let in, want closed", port)
				}
			}
		})
	}
}

// TestClientVerification checks what webhook.clientVerification switches: the flags, the CA's Secret
// mounted where the flag reads it, and `helm test` expecting its own call refused.
func TestClientVerification(t *testing.T) {
	tl := tools(t)
	path := filepath.Join("testdata", "values", "client-verification.yaml")
	rendered, err := tl.RenderChart(namespace, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- --enable-client-verification", "- --client-ca-path=/etc/leasegate/client-ca/ca.crt",
		"- --client-subject-names=kube-apiserver-webhook-client",
		"- {name: client-ca, mountPath: /etc/leasegate/client-ca, readOnly: true}",
		"secretName: apiserver-webhook-client-ca", "items: [{key: ca.crt, path: ca.crt}]",
		"leasegate-webhook answered a caller without the API server's client certificate",
	} {
		if !strings.Contains(string(rendered), want) {
			t.Errorf("rendered chart lacks %q", want)
		}
	}
	defaults, err := tl.RenderChart(namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"client-verification", "client-ca"} {
		if strings.Contains(string(defaults), absent) {
			t.Errorf("the default rendering has %q", absent)
		}
	}
}

// TestHelmTestPodIsNoWebhookEndpoint keeps the `helm test` pod out of the webhook Service's endpoints and
// the PodDisruptionBudget: it serves no webhook, so the API server's calls routed to it would fail, and
// with failurePolicy Fail every opted-in pod's creation with them.
func TestHelmTestPodIsNoWebhookEndpoint(t *testing.T) {
	rendered, err := tools(t).RenderChart(namespace)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			// Selector is a Service's; a PodDisruptionBudget's is under matchLabels.
			Selector map[string]any `json:"selector"`
		} `json:"spec"`
	}
	var pods []object
	selectors := map[string]map[string]string{}
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var obj object
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			continue
		}
		switch obj.Kind {
		case "Pod":
			pods = append(pods, obj)
		case "Service", "PodDisruptionBudget":
			selector := map[string]string{}
			labels := obj.Spec.Selector
			if matchLabels, ok := labels["matchLabels"].(map[string]any); ok {
				labels = matchLabels
			}
			for k, v := range labels {
				if s, ok := v.(string); ok {
					selector[k] = s
				}
			}
			selectors[obj.Kind+" "+obj.Metadata.Name] = selector
		}
	}
	if len(pods) == 0 || len(selectors) < 2 {
		t.Fatalf("rendered %d pods and selectors %v: want the helm test pod, the Service and the PodDisruptionBudget", len(pods), selectors)
	}
	for _, pod := range pods {
		for owner, selector := range selectors {
			matches := len(selector) > 0
			for k, v := range selector {
				if pod.Metadata.Labels[k] != v {
					matches = false
				}
			}
			if matches {
				t.Errorf("pod %s (labels %v) is selected by %s (%v)", pod.Metadata.Name, pod.Metadata.Labels, owner, selector)
			}
		}
	}
}
