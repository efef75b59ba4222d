package inject

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasegate/leasegate/internal/admissionfuzz"
	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// goldenPods are the golden inputs, the seeds of the injector's fuzz targets.
func goldenPods(f *testing.F) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, tc := range goldenCases {
		pods = append(pods, readPod(f, filepath.Join("testdata", tc.input)))
	}
	return pods
}

// FuzzMutatePods posts arbitrary bodies to /mutate-pods: every answer is an AdmissionReview that injects,
// skips or denies with a reason.
func FuzzMutatePods(f *testing.F) {
	for _, pod := range goldenPods(f) {
		f.Add(admissionfuzz.Body(f, admissionRequest(f, pod).AdmissionRequest))
	}
	f.Add([]byte(`{"request":{"uid":"1","operation":"CREATE","object":{"kind":"Pod","metadata":{"namespace":"shop"}}}}`))
	f.Add([]byte(`{"request":{"uid":"1","operation":"CREATE","namespace":"shop","object":null}}`))
	f.Add([]byte(`{"request":{"uid":"1","operation":"DELETE","namespace":"shop","oldObject":{}}}`))
	h := newTestHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		admissionfuzz.Check(t, h, body)
	})
}

// FuzzInjectAnnotations sets every annotation a user may write to arbitrary values on a Deployment's pod
// in an opted-in namespace. Inject never panics; a denial names an annotation of leasegate's; an injected
// pod has one agent whose timing keeps retry < renew deadline < lease duration, and injecting it again
// changes nothing.
func FuzzInjectAnnotations(f *testing.F) {
	keys := []string{
		contract.Lease, contract.LeaseDuration, contract.RenewDeadline, contract.RetryPeriod, contract.Readiness, contract.Start,
		contract.Takeover, contract.Elections, contract.Gate, contract.GateMethods, contract.GateGRPCMethods, contract.GateElection, contract.GateBodyTimeout,
		contract.OnLoss, contract.LeaseKind,
	}
	// Values are given as one string, "key=value" lines, so that the seeds are the golden inputs' own
	// annotations and the fuzzer may drop, repeat or invent keys.
	for _, pod := range goldenPods(f) {
		var lines []string
		for _, key := range keys {
			if v, ok := pod.Annotations[key]; ok {
				lines = append(lines, strings.TrimPrefix(key, "leasegate.io/")+"="+strings.ReplaceAll(v, "\n", `\n`))
			}
		}
		f.Add(strings.Join(lines, "\n"))
	}
	base := readPod(f, filepath.Join("testdata", "deployment-pod.yaml"))
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		f.Fatal(err)
	}
	opts := Options{Config: cfg, Caps: Capabilities{MultiClusterLeases: true}, OwnNamespace: "leasegate-system"}
	ns := Namespace{Name: base.Namespace, Labels: map[string]string{contract.Inject: contract.InjectEnabled}}
	f.Fuzz(func(t *testing.T, annotations string) {
		pod := base.DeepCopy()
		pod.Annotations = map[string]string{}
		for _, line := range strings.Split(annotations, "\n") {
			if key, value, ok := strings.Cut(line, "="); ok {
				pod.Annotations["leasegate.io/"+key] = strings.ReplaceAll(value, `\n`, "\n")
			}
		}
		result, err := Inject(pod, ns, opts)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "leasegate cannot inject this pod: metadata.annotations[leasegate.io/") {
				t.Fatalf("a denial must name the annotation at fault: %v", err)
			}
			return
		}
		if result.Pod == nil {
			t.Fatalf("an opted-in Deployment pod was skipped: %s", result.Skipped)
		}
		if n := countAgents(result.Pod); n != 1 {
			t.Fatalf("%d agent containers, want 1", n)
		}
		checkInjectedTiming(t, result.Pod)
		again, err := Inject(result.Pod, ns, opts)
		if err != nil || again.Pod != nil {
			t.Fatalf("re-injecting must change nothing: %v, %+v", err, again)
		}
	})
}

func countAgents(pod *corev1.Pod) int {
	n := 0
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range containers {
			if c.Name == AgentContainer {
				n++
			}
		}
	}
	return n
}

// checkInjectedTiming reads the one-election timing the agent was given and checks the rule the agent
// would otherwise refuse to start on (several elections are checked by the agent's own fuzz target).
func checkInjectedTiming(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	env := map[string]string{}
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range containers {
			if c.Name == AgentContainer {
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
			}
		}
	}
	if _, several := env["LEASEGATE_ELECTIONS"]; several {
		return
	}
	var timing lease.Timing
	for name, d := range map[string]*time.Duration{
		"LEASEGATE_LEASE_DURATION": &timing.LeaseDuration, "LEASEGATE_RENEW_DEADLINE": &timing.RenewDeadline, "LEASEGATE_RETRY_PERIOD": &timing.RetryPeriod,
	} {
		var err error
		if *d, err = time.ParseDuration(env[name]); err != nil {
			t.Fatalf("%s=%q: %v", name, env[name], err)
		}
	}
	if err := timing.Validate(); err != nil {
		t.Fatalf("the agent would refuse the timing injected: %v", err)
	}
}
