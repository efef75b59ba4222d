package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
)

// namespaceCache stands in for the informer cache of namespace metadata.
type namespaceCache map[string]map[string]string

func (c namespaceCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	l, ok := c[key.Name]
	if !ok {
		return fmt.Errorf("namespace %s not cached", key.Name)
	}
	obj.SetLabels(l)
	return nil
}

func (c namespaceCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("not implemented")
}

func newTestHandler(t testing.TB) *Handler {
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	return &Handler{
		Config:       config.NewStore(cfg),
		Namespaces:   namespaceCache{"shop": {contract.Inject: contract.InjectEnabled}, "plain": nil},
		Caps:         Capabilities{MultiClusterLeases: true},
		OwnNamespace: "leasegate-system",
		Locks:        locks,
	}
}

func admissionRequest(t testing.TB, pod *corev1.Pod) admission.Request {
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "req-1", Operation: admissionv1.Create, Namespace: pod.Namespace,
		Object: runtime.RawExtension{Raw: raw},
	}}
}

// TestHandlerPatchReproducesInject applies the handler's JSON patch to the pod as the API server would,
// and checks the result is exactly what the pure Inject produced for the golden files.
// TestHandlerPatchReproducesInject applies the handler's patch to every golden input that is injected
// with the test configuration, and checks it gives exactly Inject's pod: a change of Inject that the
// patch misses (a field replaced rather than added, say) fails here, not in a cluster.
func TestHandlerPatchReproducesInject(t *testing.T) {
	for _, tc := range goldenCases {
		if tc.config != "" || strings.HasSuffix(tc.input, ".injected") {
			continue // another configuration, or a pod already injected: nothing to patch
		}
		h := newTestHandler(t)
		h.Caps.MultiClusterLeases = !tc.noMultiClusterCRD
		pod := readPod(t, "testdata/"+tc.input)
		if result, err := Inject(pod, Namespace{Name: pod.Namespace, Labels: namespaceCache{"shop": {contract.Inject: contract.InjectEnabled}}[pod.Namespace]},
			Options{Config: h.Config.Current(), Caps: h.Caps, OwnNamespace: h.OwnNamespace}); err != nil || result.Pod == nil {
			continue // denied or skipped: no patch
		}
		t.Run(tc.input, func(t *testing.T) { checkPatchReproducesInject(t, h, tc.input) })
	}
}

func checkPatchReproducesInject(t *testing.T, h *Handler, input string) {
	pod := readPod(t, "testdata/"+input)
	req := admissionRequest(t, pod)
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("Handle() = allowed %t with %d patches, want an allowed patch", resp.Allowed, len(resp.Patches))
	}
	patch, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := decoded.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("the patch does not apply: %v", err)
	}
	want, err := Inject(pod, Namespace{Name: pod.Namespace, Labels: namespaceCache{"shop": {contract.Inject: contract.InjectEnabled}}[pod.Namespace]},
		Options{Config: h.Config.Current(), Caps: h.Caps, OwnNamespace: h.OwnNamespace})
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want.Pod)
	var got, expected any
	_ = json.Unmarshal(patched, &got)
	_ = json.Unmarshal(wantJSON, &expected)
	gotJSON, _ := json.Marshal(got)
	expectedJSON, _ := json.Marshal(expected)
	if string(gotJSON) != string(expectedJSON) {
		t.Errorf("patched pod differs from Inject's:\ngot  %s\nwant %s", gotJSON, expectedJSON)
	}
}

func TestHandlerAnswers(t *testing.T) {
	h := newTestHandler(t)
	tests := []struct {
		name        string
		input       string
		namespace   string
		wantAllowed bool
		wantPatch   bool
		wantCode    int32
		wantMessage string
	}{
		{"an opted-in pod is patched", "deployment-pod.yaml", "", true, true, 200, ""},
		{"a pod of an unlabelled namespace passes unchanged", "not-opted-in.yaml", "plain", true, false, 200, "neither the pod nor its namespace opted in"},
		{"a bad annotation is denied with 403", "invalid-timing.yaml", "", false, false, 403, "leasegate.io/renew-deadline"},
		{"a namespace not yet cached counts as opted in by the webhook configuration", "deployment-pod.yaml", "brand-new", true, true, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := readPod(t, "testdata/"+tt.input)
			if tt.namespace != "" {
				pod.Namespace = tt.namespace
			}
			resp := h.Handle(context.Background(), admissionRequest(t, pod))
			// Complete fills in what the webhook server sends: the status code of allowed patches too.
			if err := resp.Complete(admissionRequest(t, pod)); err != nil {
				t.Fatal(err)
			}
			if resp.Allowed != tt.wantAllowed || (len(resp.Patches) > 0) != tt.wantPatch || resp.Result.Code != tt.wantCode {
				t.Errorf("Handle() = allowed %t, %d patches, code %d; want allowed %t, patch %t, code %d",
					resp.Allowed, len(resp.Patches), resp.Result.Code, tt.wantAllowed, tt.wantPatch, tt.wantCode)
			}
			if !strings.Contains(resp.Result.Message, tt.wantMessage) {
				t.Errorf("message %q lacks %q", resp.Result.Message, tt.wantMessage)
			}
		})
	}
}

func benchmarkHandler(b *testing.B, pod *corev1.Pod) {
	h := newTestHandler(b)
	req := admissionRequest(b, pod)
	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Handle(context.Background(), req); len(resp.Patches) == 0 {
			b.Fatal("not injected")
		}
	}
}

func BenchmarkHandlerTypicalPod(b *testing.B) {
	benchmarkHandler(b, readPod(b, "testdata/deployment-pod.yaml"))
}

func BenchmarkHandlerPodWith2000EnvVars(b *testing.B) {
	pod := readPod(b, "testdata/deployment-pod.yaml")
	for i := range 2000 {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: "value"})
	}
	benchmarkHandler(b, pod)
}

// A pod that arrives with an agent container (the webhook's own output when a later webhook has the API
// server call it again, or one written by hand to skip injection) is held to what injection checks:
// provisioning and the lease guard read what it elects on from that container.
func TestHandlerChecksAnAgentThatArrivesWithThePod(t *testing.T) {
	h := newTestHandler(t)
	handWritten := func(env ...string) *corev1.Pod {
		pod := agentPod(env...)
		pod.Labels = map[string]string{contract.Inject: contract.InjectEnabled}
		return pod
	}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		wantAllowed bool
		wantMessage string
	}{
		{"the webhook's own output, called again", readPod(t, "testdata/deployment-pod.yaml.injected"), true, "already injected"},
		{"a hand-written agent on a lease of its own", handWritten("LEASEGATE_LEASE=orders-new", "LEASEGATE_LEASE_DURATION=15s"), true, "already injected"},
		{"a hand-written agent on another controller's lease", handWritten("LEASEGATE_LEASE=cert-manager-controller", "LEASEGATE_LEASE_DURATION=15s"), false,
			"Lease shop/cert-manager-controller is not leasegate's (held by cm-0_8f1e2c)"},
		{"a hand-written agent whose settings the agent refuses", handWritten("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=forever"), false,
			"its container leasegate-agent is not one leasegate injects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.Handle(context.Background(), admissionRequest(t, tt.pod))
			if resp.Allowed != tt.wantAllowed || len(resp.Patches) > 0 || !strings.Contains(resp.Result.Message, tt.wantMessage) {
				t.Errorf("Handle() = allowed %t, %d patches, %q; want allowed %t, no patch, a message containing %q",
					resp.Allowed, len(resp.Patches), resp.Result.Message, tt.wantAllowed, tt.wantMessage)
			}
		})
	}
}

// handlerAllocsTypicalPod bounds what the handler allocates for a typical pod (decode, decide, patch):
// 159 before the handler was trimmed, 106 since (109 with -race, whose sync.Pools drop some of what
// they are given). Times are BenchmarkHandlerTypicalPod's; allocations are deterministic, so they are
// held here.
const handlerAllocsTypicalPod = 120

func TestHandlerAllocations(t *testing.T) {
	h := newTestHandler(t)
	req := admissionRequest(t, readPod(t, "testdata/deployment-pod.yaml"))
	n := testing.AllocsPerRun(50, func() {
		if resp := h.Handle(context.Background(), req); len(resp.Patches) == 0 {
			t.Fatal("not injected")
		}
	})
	if n > handlerAllocsTypicalPod {
		t.Errorf("the handler allocates %v times for a typical pod, want at most %d", n, handlerAllocsTypicalPod)
	}
	t.Logf("%v allocations", n)
}

// The patch's JSON pointers escape map keys as RFC 6901 says.
func TestEntryPath(t *testing.T) {
	for key, want := range map[string]string{
		"app":                   "/metadata/labels/app",
		"leasegate.io/injected": "/metadata/labels/leasegate.io~1injected",
		"a~b/c~/":               "/metadata/labels/a~0b~1c~0~1",
		"":                      "/metadata/labels/",
	} {
		if got := entryPath("/metadata/labels", key); got != want {
			t.Errorf("entryPath(%q) = %q, want %q", key, got, want)
		}
	}
}
