package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/test/framework/checkout"
)

// rendering is the chart rendered with some values, by object.
type rendering struct {
	objects    []*unstructured.Unstructured
	deployment appsv1.Deployment
	testPod    *corev1.Pod
	config     *config.Config
}

func render(t *testing.T, values string) rendering {
	t.Helper()
	var files []string
	if values != "" {
		// Not t.TempDir(): helm splits --values at commas, which subtests' names have.
		dir, err := os.MkdirTemp("", "values")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "values.yaml")
		if err := os.WriteFile(path, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	out, err := tools(t).RenderChart(namespace, files...)
	if err != nil {
		t.Fatalf("helm template with\n%s: %v", values, err)
	}
	var r rendering
	for _, doc := range strings.Split(string(out), "\n---\n") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil || obj.Object == nil || obj.GetKind() == "" {
			continue
		}
		r.objects = append(r.objects, obj)
		switch {
		case obj.GetKind() == "Deployment":
			if err := yaml.Unmarshal([]byte(doc), &r.deployment); err != nil {
				t.Fatal(err)
			}
		case obj.GetKind() == "Pod":
			r.testPod = &corev1.Pod{}
			if err := yaml.Unmarshal([]byte(doc), r.testPod); err != nil {
				t.Fatal(err)
			}
		case obj.GetKind() == "ConfigMap" && obj.GetName() == "leasegate-config":
			data, _, _ := unstructured.NestedString(obj.Object, "data", config.Key)
			if r.config, err = config.Load([]byte(data)); err != nil {
				t.Fatalf("leasegate-config does not load: %v\n%s", err, data)
			}
		}
	}
	if len(r.deployment.Spec.Template.Spec.Containers) != 1 || r.config == nil {
		t.Fatalf("the chart rendered no webhook Deployment or no leasegate-config:\n%s", out)
	}
	return r
}

func (r rendering) webhook() corev1.Container { return r.deployment.Spec.Template.Spec.Containers[0] }

func (r rendering) object(kind, name string) *unstructured.Unstructured {
	for _, obj := range r.objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	return nil
}

// restrictedWithoutUser is the restricted security context with the user left to the platform.
var restrictedWithoutUser = &corev1.SecurityContext{
	RunAsNonRoot:             ptr.To(true),
	ReadOnlyRootFilesystem:   ptr.To(true),
	AllowPrivilegeEscalation: ptr.To(false),
	Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestPlatformValues renders each value platforms set (cert-manager's and ingress-nginx's charts offer the
// same) and checks the objects it changes.
func TestPlatformValues(t *testing.T) {
	version := appVersion(t)
	for _, tc := range []struct {
		name   string
		values string
		check  func(t *testing.T, r rendering)
	}{{
		name: "defaults: by tag, the image's user, the pod network, curl from docker.io",
		check: func(t *testing.T, r rendering) {
			if got, want := r.webhook().Image, "ghcr.io/leasegate/leasegate-webhook:"+version; got != want {
				t.Errorf("webhook image %s, want %s", got, want)
			}
			if got := ptr.Deref(r.deployment.Spec.RevisionHistoryLimit, -1); got != 10 {
				t.Errorf("revisionHistoryLimit %d, want 10", got)
			}
			spec := r.deployment.Spec.Template.Spec
			if spec.HostNetwork || spec.DNSPolicy != "" {
				t.Errorf("hostNetwork %v, dnsPolicy %q by default", spec.HostNetwork, spec.DNSPolicy)
			}
			if !equality.Semantic.DeepEqual(r.webhook().SecurityContext, config.AgentSecurityContext()) {
				t.Errorf("the webhook's security context %+v, want the agent's default %+v", r.webhook().SecurityContext, config.AgentSecurityContext())
			}
			if r.testPod == nil || r.testPod.Spec.Containers[0].Image != "docker.io/curlimages/curl:8.11.1" {
				t.Errorf("helm test pod %+v, want one running docker.io/curlimages/curl:8.11.1", r.testPod)
			}
		},
	}, {
		name: "platform defaults: system-cluster-critical with the quota that lets the namespace run it, Linux nodes, only the webhook's own requests in flow control",
		check: func(t *testing.T, r rendering) {
			spec := r.deployment.Spec.Template.Spec
			if spec.PriorityClassName != "system-cluster-critical" {
				t.Errorf("priorityClassName %q, want system-cluster-critical", spec.PriorityClassName)
			}
			if spec.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("nodeSelector %v, want kubernetes.io/os: linux", spec.NodeSelector)
			}
			quota := r.object("ResourceQuota", "leasegate-webhook-critical-pods")
			if quota == nil {
				t.Fatal("no ResourceQuota for the system-cluster-critical pods")
			}
			scope, _, _ := unstructured.NestedSlice(quota.Object, "spec", "scopeSelector", "matchExpressions")
			if len(scope) != 1 || fmt.Sprint(scope[0].(map[string]any)["values"]) != "[system-cluster-critical]" {
				t.Errorf("the quota's scope %v, want the priority class system-cluster-critical", scope)
			}
			for _, name := range []string{"leasegate-lease-writes"} {
				if r.object("FlowSchema", name) != nil || r.object("PriorityLevelConfiguration", name) != nil {
					t.Errorf("%s rendered by default: it matches every service account's lease writes, so it is opt-in", name)
				}
			}
			if r.object("FlowSchema", "leasegate-webhook") == nil {
				t.Error("no FlowSchema for leasegate-webhook's own requests")
			}
		},
	}, {
		name:   "a priority class of the cluster's default: no quota",
		values: "priorityClassName: \"\"\n",
		check: func(t *testing.T, r rendering) {
			if r.object("ResourceQuota", "leasegate-webhook-critical-pods") != nil || r.deployment.Spec.Template.Spec.PriorityClassName != "" {
				t.Error("a ResourceQuota or a priority class rendered without priorityClassName")
			}
		},
	}, {
		name:   "the quota off, for a cluster that admits system-* classes anywhere",
		values: "resourceQuota: {enabled: false}\n",
		check: func(t *testing.T, r rendering) {
			if r.object("ResourceQuota", "leasegate-webhook-critical-pods") != nil {
				t.Error("a ResourceQuota rendered with resourceQuota.enabled=false")
			}
		},
	}, {
		name:   "the config webhook's timeout",
		values: "webhook: {timeoutSeconds: {config: 5}}\n",
		check: func(t *testing.T, r rendering) {
			vwc := r.object("ValidatingWebhookConfiguration", "leasegate")
			webhooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
			for _, w := range webhooks {
				if entry := w.(map[string]any); entry["name"] == "config.leasegate.io" && fmt.Sprint(entry["timeoutSeconds"]) != "5" {
					t.Errorf("config.leasegate.io timeoutSeconds %v, want 5", entry["timeoutSeconds"])
				}
			}
		},
	}, {
		name:   "image digests: pulled by digest, the agent's through leasegate-config",
		values: "image:\n  webhook: {digest: " + digest + "}\n  agent: {digest: " + digest + "}\ntests:\n  image: {digest: " + digest + "}\n",
		check: func(t *testing.T, r rendering) {
			for what, got := range map[string]string{"webhook": r.webhook().Image, "agent": r.config.Agent.Image} {
				if want := "ghcr.io/leasegate/leasegate-" + what + ":" + version + "@" + digest; got != want {
					t.Errorf("%s image %s, want %s", what, got, want)
				}
			}
			if got, want := r.testPod.Spec.Containers[0].Image, "docker.io/curlimages/curl:8.11.1@"+digest; got != want {
				t.Errorf("helm test image %s, want %s", got, want)
			}
		},
	}, {
		name: "OpenShift restricted-v2: no fixed user for the webhook, the helm test pod and the injected agent",
		values: "securityContext: {runAsUser: null, runAsGroup: null}\n" +
			"config:\n  agent:\n    securityContext: {runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, " +
			"capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}\n",
		check: func(t *testing.T, r rendering) {
			for what, got := range map[string]*corev1.SecurityContext{
				"webhook container": r.webhook().SecurityContext, "helm test container": r.testPod.Spec.Containers[0].SecurityContext,
				"agent (leasegate-config)": r.config.Agent.SecurityContext,
			} {
				if !equality.Semantic.DeepEqual(got, restrictedWithoutUser) {
					t.Errorf("%s: security context %+v, want %+v", what, got, restrictedWithoutUser)
				}
			}
			for what, got := range map[string]*corev1.PodSecurityContext{"webhook": r.deployment.Spec.Template.Spec.SecurityContext, "helm test": r.testPod.Spec.SecurityContext} {
				if got == nil || got.RunAsUser != nil || !ptr.Deref(got.RunAsNonRoot, false) {
					t.Errorf("%s pod security context %+v, want runAsNonRoot without a user", what, got)
				}
			}
		},
	}, {
		name:   "EKS with an overlay CNI: the node's network, ports free on the node",
		values: "hostNetwork: true\nwebhook: {port: 10260}\nmetrics: {port: 10261}\nprobes: {port: 10262}\n",
		check: func(t *testing.T, r rendering) {
			spec := r.deployment.Spec.Template.Spec
			if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("hostNetwork %v, dnsPolicy %q; want true and ClusterFirstWithHostNet (the cluster's DNS)", spec.HostNetwork, spec.DNSPolicy)
			}
			ports := map[string]int32{}
			for _, p := range r.webhook().Ports {
				ports[p.Name] = p.ContainerPort
			}
			if want := map[string]int32{"webhook": 10260, "metrics": 10261, "health": 10262}; !equality.Semantic.DeepEqual(ports, want) {
				t.Errorf("container ports %v, want %v", ports, want)
			}
			for _, flag := range []string{"--webhook-port=10260", "--metrics-bind-address=:10261", "--health-probe-bind-address=:10262"} {
				if !slices.Contains(r.webhook().Args, flag) {
					t.Errorf("args %q lack %s", r.webhook().Args, flag)
				}
			}
			if r.webhook().ReadinessProbe.HTTPGet.Port.StrVal != "health" {
				t.Errorf("the readiness probe checks port %v, want the health port", r.webhook().ReadinessProbe.HTTPGet.Port)
			}
			policy := r.object("NetworkPolicy", "leasegate-webhook")
			ingress, _, _ := unstructured.NestedSlice(policy.Object, "spec", "ingress")
			data, _ := json.Marshal(ingress)
			if !strings.Contains(string(data), `"port":10260`) || !strings.Contains(string(data), `"port":10261`) {
				t.Errorf("the NetworkPolicy does not follow the ports: %s", data)
			}
		},
	}, {
		name: "extra flags last, environment, volumes and mounts",
		values: "extraArgs: [--zap-log-level=debug, --kube-api-qps=50]\nextraEnv: [{name: HTTPS_PROXY, value: \"http://proxy:3128\"}]\n" +
			"extraVolumes: [{name: proxy-ca, configMap: {name: proxy-ca}}]\nextraVolumeMounts: [{name: proxy-ca, mountPath: /etc/ssl/proxy, readOnly: true}]\n",
		check: func(t *testing.T, r rendering) {
			args := r.webhook().Args
			if !slices.Equal(args[len(args)-2:], []string{"--zap-log-level=debug", "--kube-api-qps=50"}) {
				t.Errorf("args %q: want the extra flags last, so they override the chart's", args)
			}
			env := r.webhook().Env
			if env[len(env)-1].Name != "HTTPS_PROXY" || env[len(env)-1].Value != "http://proxy:3128" || env[0].Name != "POD_NAMESPACE" {
				t.Errorf("env %+v, want POD_NAMESPACE and HTTPS_PROXY", env)
			}
			volumes := r.deployment.Spec.Template.Spec.Volumes
			if v := volumes[len(volumes)-1]; v.Name != "proxy-ca" || v.ConfigMap == nil || v.ConfigMap.Name != "proxy-ca" {
				t.Errorf("volumes %+v lack proxy-ca", volumes)
			}
			mounts := r.webhook().VolumeMounts
			if m := mounts[len(mounts)-1]; m.Name != "proxy-ca" || m.MountPath != "/etc/ssl/proxy" || !m.ReadOnly || mounts[0].Name != "certs" {
				t.Errorf("mounts %+v, want certs and proxy-ca", mounts)
			}
		},
	}, {
		name:   "common labels on every object and pod, never in a selector nor over the chart's",
		values: "commonLabels: {team: platform, app.kubernetes.io/name: other}\nmetrics: {serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}}\nnetworkPolicy: {metricsFrom: [{podSelector: {}}]}\ngrafanaDashboard: {enabled: true}\n",
		check: func(t *testing.T, r rendering) {
			for _, obj := range r.objects {
				if obj.GetLabels()["team"] != "platform" || obj.GetLabels()["app.kubernetes.io/name"] == "other" {
					t.Errorf("%s %s: labels %v", obj.GetKind(), obj.GetName(), obj.GetLabels())
				}
			}
			if got := r.deployment.Spec.Template.Labels; got["team"] != "platform" || got["app.kubernetes.io/name"] != "leasegate-webhook" {
				t.Errorf("pod template labels %v", got)
			}
			if _, ok := r.deployment.Spec.Selector.MatchLabels["team"]; ok {
				t.Errorf("the selector %v has a common label: changing one would need the Deployment recreated", r.deployment.Spec.Selector.MatchLabels)
			}
		},
	}, {
		name:   "service account annotations, revision history, probe timing",
		values: "serviceAccount: {annotations: {eks.amazonaws.com/role-arn: \"arn:aws:iam::1:role/lg\"}}\nrevisionHistoryLimit: 2\nprobes: {readiness: {periodSeconds: 2, failureThreshold: 5}, liveness: {initialDelaySeconds: 30, timeoutSeconds: 3}}\n",
		check: func(t *testing.T, r rendering) {
			if got := r.object("ServiceAccount", "leasegate-webhook").GetAnnotations(); got["eks.amazonaws.com/role-arn"] != "arn:aws:iam::1:role/lg" {
				t.Errorf("ServiceAccount annotations %v", got)
			}
			if got := ptr.Deref(r.deployment.Spec.RevisionHistoryLimit, -1); got != 2 {
				t.Errorf("revisionHistoryLimit %d, want 2", got)
			}
			ready, live := r.webhook().ReadinessProbe, r.webhook().LivenessProbe
			if ready.PeriodSeconds != 2 || ready.FailureThreshold != 5 || ready.TimeoutSeconds != 1 || ready.HTTPGet.Path != "/readyz" {
				t.Errorf("readiness probe %+v: want period 2, 5 failures, the default timeout, /readyz", ready)
			}
			if live.InitialDelaySeconds != 30 || live.TimeoutSeconds != 3 || live.PeriodSeconds != 10 || live.HTTPGet.Path != "/healthz" {
				t.Errorf("liveness probe %+v: want delay 30, timeout 3, the default period, /healthz", live)
			}
		},
	}, {
		name:   "a mirror: the helm test image moves with image.registry",
		values: "image: {registry: registry.internal/mirror}\nimagePullSecrets: [{name: mirror}]\n",
		check: func(t *testing.T, r rendering) {
			if got, want := r.testPod.Spec.Containers[0].Image, "registry.internal/mirror/curlimages/curl:8.11.1"; got != want {
				t.Errorf("helm test image %s, want %s", got, want)
			}
			if len(r.testPod.Spec.ImagePullSecrets) != 1 || r.testPod.Spec.ImagePullSecrets[0].Name != "mirror" {
				t.Errorf("helm test pull secrets %v, want mirror's", r.testPod.Spec.ImagePullSecrets)
			}
		},
	}, {
		name:   "the helm test image's own registry wins",
		values: "image: {registry: registry.internal/mirror}\ntests: {image: {registry: quay.io, repository: curl/curl, tag: \"8.12.0\"}}\n",
		check: func(t *testing.T, r rendering) {
			if got, want := r.testPod.Spec.Containers[0].Image, "quay.io/curl/curl:8.12.0"; got != want {
				t.Errorf("helm test image %s, want %s", got, want)
			}
		},
	}, {
		name:   "tests disabled: no test pod",
		values: "tests: {enabled: false}\n",
		check: func(t *testing.T, r rendering) {
			if r.testPod != nil {
				t.Error("a helm test pod rendered with tests.enabled=false")
			}
		},
	}, {
		name: "the ServiceMonitor in Prometheus's namespace, with relabelings on both scrapes",
		values: "metrics:\n  serviceMonitor:\n    enabled: true\n    namespace: monitoring\n    caSecretName: leasegate-metrics-ca\n" +
			"    relabelings: [{targetLabel: cluster, replacement: eu-west}]\n    metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_.*}]\n" +
			"networkPolicy: {metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}\n",
		check: func(t *testing.T, r rendering) {
			sm, pm := r.object("ServiceMonitor", "leasegate-webhook"), r.object("PodMonitor", "leasegate-agents")
			if sm.GetNamespace() != "monitoring" || pm.GetNamespace() != "monitoring" {
				t.Errorf("ServiceMonitor in %q, PodMonitor in %q; want monitoring", sm.GetNamespace(), pm.GetNamespace())
			}
			names, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
			if !slices.Equal(names, []string{namespace}) {
				t.Errorf("the ServiceMonitor selects Services in %v, want %s", names, namespace)
			}
			endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			podEndpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
			for what, endpoint := range map[string]any{"ServiceMonitor": endpoints[0], "PodMonitor": podEndpoints[0]} {
				e := endpoint.(map[string]any)
				relabel, _, _ := unstructured.NestedSlice(e, "relabelings")
				metricRelabel, _, _ := unstructured.NestedSlice(e, "metricRelabelings")
				if len(relabel) != 1 || len(metricRelabel) != 1 {
					t.Errorf("%s endpoint %v lacks the relabelings", what, e)
				}
			}
			ca, _, _ := unstructured.NestedString(endpoints[0].(map[string]any), "tlsConfig", "ca", "secret", "name")
			if ca != "leasegate-metrics-ca" {
				t.Errorf("the ServiceMonitor verifies with Secret %q, want leasegate-metrics-ca (in its own namespace)", ca)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, render(t, tc.values)) })
	}
}

// TestSchemaDescribesEveryValue: docs/reference.md's values table is generated from the schema's
// descriptions, so every property (shared definitions' included) has one.
func TestSchemaDescribesEveryValue(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(checkout.ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, node map[string]any)
	walk = func(path string, node map[string]any) {
		props, _ := node["properties"].(map[string]any)
		for name, child := range props {
			child := child.(map[string]any)
			if d, _ := child["description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("%s.%s has no description", path, name)
			}
			walk(path+"."+name, child)
		}
		if items, ok := node["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	walk("", schema)
	defs, _ := schema["$defs"].(map[string]any)
	for name, def := range defs {
		if d, _ := def.(map[string]any)["description"].(string); d == "" {
			t.Errorf("$defs.%s has no description", name)
		}
		walk("$defs."+name, def.(map[string]any))
	}
}

// TestNotes renders NOTES.txt (helm template leaves it out: a copy of the chart turns it into an object)
// and checks what it tells: where the images come from, and to change leasegate-config through values.
func TestNotes(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "leasegate")
	if err := os.CopyFS(chart, os.DirFS(checkout.ChartDir())); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(chart, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(chart, "templates", "NOTES.txt")); err != nil {
		t.Fatal(err)
	}
	for file, content := range map[string]string{
		"_notes.tpl": `{{- define "notes" -}}` + string(notes) + `{{- end -}}`,
		"notes.yaml": `notes: {{ include "notes" . | toJson }}`,
	} {
		if err := os.WriteFile(filepath.Join(chart, "templates", file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version := appVersion(t)
	for _, tc := range []struct {
		name        string
		set         []string
		want, avoid []string
	}{{
		name: "defaults: the published images, or the archive make images writes for kind",
		want: []string{"ghcr.io/leasegate/leasegate-webhook:" + version, "ghcr.io/leasegate/leasegate-agent:" + version,
			"kind load image-archive bin/release/" + version + "/leasegate-images-" + version + "-linux-amd64.tar",
			"helm upgrade leasegate -n " + namespace, "helm test leasegate"},
		avoid: []string{"not published", "kubectl -n " + namespace + " edit"},
	}, {
		name:  "a mirror: push the images there",
		set:   []string{"image.registry=registry.internal/mirror", "tests.enabled=false", "hostNetwork=true"},
		want:  []string{"registry.internal/mirror/leasegate-agent:" + version, "make push\nIMAGE_REGISTRY=registry.internal/mirror", "NetworkPolicy may not apply"},
		avoid: []string{"kind load", "helm test", "curl"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "leasegate", chart, "--namespace", namespace, "--kube-version", tools(t).KubeVersion, "--show-only", "templates/notes.yaml"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := tools(t).RunHelm(args...)
			if err != nil {
				t.Fatal(err)
			}
			var rendered struct{ Notes string }
			if err := yaml.Unmarshal(out, &rendered); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(rendered.Notes, want) {
					t.Errorf("NOTES lack %q:\n%s", want, rendered.Notes)
				}
			}
			for _, avoid := range tc.avoid {
				if strings.Contains(rendered.Notes, avoid) {
					t.Errorf("NOTES have %q:\n%s", avoid, rendered.Notes)
				}
			}
		})
	}
}
