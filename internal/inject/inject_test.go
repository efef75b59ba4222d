package inject

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/golden"
)

// update rewrites the golden files from the current code: go test ./internal/inject -update
var update = flag.Bool("update", false, "rewrite testdata/*.injected from the current output")

// goldenCases pairs each input in testdata with the circumstances of its admission. Every input file has
// exactly one case, and every case an input and a golden file (TestGoldenFilesHaveCases).
type goldenCase struct {
	input string
	// noMultiClusterCRD: the API server does not serve MultiClusterLeases.
	noMultiClusterCRD bool
	// config is leasegate-config's config.yaml for this case; testConfig when empty.
	config string
}

var goldenCases = []goldenCase{
	{input: "deployment-pod.yaml"},
	{input: "statefulset-pod.yaml"},
	{input: "daemonset-pod.yaml"},
	{input: "job-pod.yaml"},
	{input: "cronjob-pod.yaml"},
	{input: "bare-pod.yaml"},
	{input: "bare-pod-generate-name.yaml"},
	{input: "pod-opt-in-namespace-not.yaml"},
	{input: "not-opted-in.yaml"},
	{input: "pod-opt-out.yaml"},
	{input: "kube-system-pod.yaml"},
	{input: "deployment-pod.yaml.injected"},
	{input: "user-env.yaml"},
	{input: "init-containers.yaml"},
	{input: "readiness-leader.yaml"},
	{input: "start-leader.yaml"},
	{input: "classic-sidecar.yaml", config: testConfig + "  nativeSidecar: never\n"},
	{input: "start-leader-classic-sidecar.yaml", config: testConfig + "  nativeSidecar: never\n"},
	{input: "platform-assigned-uid.yaml", config: testConfig +
		"  securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}\n"},
	{input: "invalid-timing.yaml"},
	{input: "invalid-annotations.yaml"},
	{input: "host-network.yaml"},
	{input: "port-collision.yaml"},
	{input: "elections.yaml"},
	{input: "takeover.yaml"},
	{input: "invalid-elections.yaml"},
	{input: "elections-not-yaml.yaml"},
	{input: "elections-duplicate.yaml"},
	{input: "gate.yaml"},
	{input: "gate-elections.yaml"},
	{input: "gate-invalid.yaml"},
	{input: "on-loss-restart.yaml"},
	{input: "on-loss-invalid.yaml"},
	{input: "multicluster-lease.yaml"},
	{input: "multicluster-lease-invalid.yaml"},
	{input: "multicluster-lease-misspelled.yaml"},
	{input: "multicluster-lease-no-crd.yaml", noMultiClusterCRD: true},
}

const testConfig = "agent:\n  image: registry.example/leasegate-agent:test\n"

// namespaces of the inputs: "shop" opted in, the others not.
var namespaces = map[string]map[string]string{
	"shop":        {contract.Inject: contract.InjectEnabled},
	"plain":       nil,
	"kube-system": {contract.Inject: contract.InjectEnabled},
}

func TestInjectGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.input, func(t *testing.T) {
			pod := readPod(t, filepath.Join("testdata", tc.input))
			cfgYAML := tc.config
			if cfgYAML == "" {
				cfgYAML = testConfig
			}
			cfg, err := config.Load([]byte(cfgYAML))
			if err != nil {
				t.Fatal(err)
			}
			result, err := Inject(pod, Namespace{Name: pod.Namespace, Labels: namespaces[pod.Namespace]},
				Options{Config: cfg, Caps: Capabilities{MultiClusterLeases: !tc.noMultiClusterCRD}, OwnNamespace: "leasegate-system"})
			compareGolden(t, filepath.Join("testdata", tc.input+".injected"), render(t, result, err))
		})
	}
}

// render is the golden form of a decision: the injected pod, or why it was skipped or denied.
func render(t *testing.T, result Result, err error) []byte {
	t.Helper()
	var out strings.Builder
	for _, w := range result.Warnings {
		out.WriteString("# warning: " + w + "\n")
	}
	switch {
	case err != nil:
		out.WriteString("# denied:\n# " + strings.ReplaceAll(err.Error(), "\n", "\n# ") + "\n")
	case result.Pod == nil:
		out.WriteString("# skipped: " + result.Skipped + "\n")
	default:
		data, err := yaml.Marshal(result.Pod)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(data)
	}
	return []byte(out.String())
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	golden.Compare(t, path, got, *update, "go test ./internal/inject -update")
}

func readPod(t testing.TB, path string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(data, pod); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pod
}

// TestGoldenFilesHaveCases fails on an input nobody tests and on a golden file whose input is gone.
func TestGoldenFilesHaveCases(t *testing.T) {
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]bool{}
	for _, tc := range goldenCases {
		inputs[tc.input] = true
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir(): // fixtures of other tests (pods injected by earlier versions)
		case strings.HasSuffix(name, ".injected"):
			if !inputs[strings.TrimSuffix(name, ".injected")] {
				t.Errorf("testdata/%s has no case in goldenCases: delete it or add its input", name)
			}
		case !inputs[name]:
			t.Errorf("testdata/%s is not used by any case in goldenCases", name)
		}
	}
	if !slices.ContainsFunc(goldenCases, func(tc goldenCase) bool { return strings.HasSuffix(tc.input, ".injected") }) {
		t.Error("re-injecting an injected pod must be covered")
	}
}

// TestInjectRecordsItsRelease: the status names the release that injected the pod, which kubectl
// leasegate check compares with the webhook's to find agents older than it.
func TestInjectRecordsItsRelease(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	pod := readPod(t, "testdata/deployment-pod.yaml")
	result, err := Inject(pod, Namespace{Name: pod.Namespace, Labels: namespaces[pod.Namespace]},
		Options{Config: cfg, OwnNamespace: "leasegate-system", Version: "v0.2.0"})
	if err != nil || result.Pod == nil {
		t.Fatalf("not injected: %v %+v", err, result)
	}
	var status Status
	if err := json.Unmarshal([]byte(result.Pod.Annotations[contract.Status]), &status); err != nil {
		t.Fatal(err)
	}
	if status.Version != "v0.2.0" {
		t.Errorf("status records version %q, want the injecting release v0.2.0", status.Version)
	}
}
