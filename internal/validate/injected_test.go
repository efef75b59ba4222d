package validate

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
)

// injectedPod is pod shop/name with the agent as injection makes it, its env given as "NAME=value", and
// the status annotation status.
func injectedPod(name, uid, status string, env ...string) *corev1.Pod {
	agent := corev1.Container{Name: inject.AgentContainer, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	for _, kv := range env {
		n, v, _ := strings.Cut(kv, "=")
		agent.Env = append(agent.Env, corev1.EnvVar{Name: n, Value: v})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: name, UID: types.UID(uid),
			Labels:      map[string]string{contract.Injected: "true"},
			Annotations: map[string]string{contract.Status: status},
		},
		Spec: corev1.PodSpec{ServiceAccountName: "orders", InitContainers: []corev1.Container{agent}, Containers: []corev1.Container{{Name: "orders"}}},
	}
}

// earlierPod is a pod as an earlier leasegate injected it, before its status annotation recorded lease
// durations: three elections, orders-reconciler's lease lasting 60 s (the configured default is 15 s).
func earlierPod(t *testing.T, name, uid string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile("../inject/testdata/before-lease-seconds/elections.yaml.injected")
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := yaml.Unmarshal(data, pod); err != nil {
		t.Fatal(err)
	}
	pod.Name, pod.UID = name, types.UID(uid)
	return pod
}

func rawObject(t *testing.T, obj runtime.Object) runtime.RawExtension {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

// The lease guard and the evictions webhook judge by what a pod's spec gives it, which nobody can change
// after creation, never by its leasegate.io/status annotation, which anyone who may update the pod can.
func TestLeaseWritesJudgeByWhatTheSpecGives(t *testing.T) {
	wall := time.Now() // the handler judges at the wall clock
	// Every take counts a term: the lease had one before it was released, the take makes it two.
	lock := func(holder string, seconds, transitions int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-reconciler", Labels: map[string]string{contract.Managed: "true"}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(seconds), RenewTime: &metav1.MicroTime{Time: wall},
				LeaseTransitions: ptr.To(transitions),
			},
		}
	}
	// As the agent leaves a lease on a graceful shutdown: released, for one second.
	released := lock("", 1, 1)
	rewritten := earlierPod(t, "orders-r", "uid-r")
	rewritten.Annotations[contract.Status] = `{"leases":["orders-reconciler"],"leaseSeconds":{"orders-reconciler":86400}}`
	// A pod whose agent elects on another lease, annotated as though it had been given this one.
	claimed := injectedPod("orders-x", "uid-x", `{"lease":"orders-reconciler","leaseSeconds":{"orders-reconciler":86400}}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s")
	fence := &Webhooks{
		Leases:   leases,
		Cluster:  fake.NewClientBuilder().WithObjects(earlierPod(t, "orders-e", "uid-e"), rewritten, claimed).Build(),
		Recorder: &events.FakeRecorder{}, Events: NewEventBudget(clock.RealClock{}), OwnNamespace: "leasegate-system",
	}
	fence.policy.Store(testPolicy(t, ""))
	tests := []struct {
		name, pod, uid string
		seconds        int32
		wantAllowed    bool
	}{
		{"a pod injected before durations were recorded takes its 60 s lease after a graceful release", "orders-e", "uid-e", 60, true},
		{"that pod claims more than its spec gives", "orders-e", "uid-e", 61, false},
		{"that pod claims the configured default instead", "orders-e", "uid-e", 15, false},
		{"a pod whose annotation was rewritten to 24 h claims 24 h", "orders-r", "uid-r", 86400, false},
		{"a pod whose annotation was rewritten still takes the lease for what its spec gives", "orders-r", "uid-r", 60, true},
		{"a pod not injected for the lease, annotated as if it were, claims 24 h", "orders-x", "uid-x", 86400, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := fence.LeaseWrites().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "1", Operation: admissionv1.Update, Namespace: "shop", Name: "orders-reconciler",
				Resource: metav1.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
				UserInfo: podUser(tt.pod, tt.uid), OldObject: rawObject(t, released), Object: rawObject(t, lock(tt.pod+"_"+tt.uid, tt.seconds, 2)),
			}})
			if resp.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v (%q), want %v", resp.Allowed, resp.Result.Message, tt.wantAllowed)
			}
			if !tt.wantAllowed && !strings.Contains(resp.Result.Message, DurationNotGiven.String()) {
				t.Errorf("message %q does not say %q", resp.Result.Message, DurationNotGiven)
			}
		})
	}
}

// A follower that rewrites its leader's annotation to say it does not restart on loss still may not evict
// it.
func TestEvictionsJudgeByWhatTheSpecGives(t *testing.T) {
	leader := injectedPod("orders-a", "uid-a", `{"lease":"orders"}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=restart")
	fence := &Webhooks{
		Leases:   leases,
		Cluster:  fake.NewClientBuilder().WithObjects(leader).Build(),
		Recorder: &events.FakeRecorder{}, Events: NewEventBudget(clock.RealClock{}), OwnNamespace: "leasegate-system",
	}
	fence.policy.Store(testPolicy(t, ""))
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-a"}}
	resp := fence.Evictions().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a", SubResource: "eviction",
		UserInfo: podUser("orders-b", "uid-b"), Object: rawObject(t, eviction),
	}})
	if resp.Allowed || !strings.Contains(resp.Result.Message, EvictsOther.String()) {
		t.Errorf("a follower's eviction of the leader: allowed %v, %q; want denied: %s", resp.Allowed, resp.Result.Message, EvictsOther)
	}
}

// A drain tool's eviction passes; a replica's is refused, and when its body asks for a dry run it gets the
// same answer but leaves no Event behind (the API server does not mark an eviction's dry run in the
// request).
func TestEvictionsOfDrainToolsPassAndDryRunsLeaveNoEvent(t *testing.T) {
	leader := injectedPod("orders-a", "uid-a", `{"lease":"orders"}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=restart")
	replica := injectedPod("orders-b", "uid-b", `{"lease":"orders"}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=restart")
	canary := injectedPod("orders-c", "uid-c", `{"lease":"orders"}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=restart")
	canary.Spec.ServiceAccountName = "orders-canary"
	canaryUser := podUser("orders-c", "uid-c")
	canaryUser.Username = "system:serviceaccount:shop:orders-canary"
	drainer := podUser("cluster-autoscaler-7d9f", "uid-ca")
	drainer.Username = "system:serviceaccount:kube-system:cluster-autoscaler"
	tests := []struct {
		name        string
		user        authenticationv1.UserInfo
		dryRun      []string
		wantAllowed bool
		wantEvents  int
	}{
		{"cluster-autoscaler's eviction of the leader passes", drainer, nil, true, 0},
		{"a replica's eviction of the leader is refused and recorded", podUser("orders-b", "uid-b"), nil, false, 1},
		{"a replica running as another service account is refused too", canaryUser, nil, false, 1},
		{"a replica's dry-run eviction is refused and leaves no Event", podUser("orders-b", "uid-b"), []string{metav1.DryRunAll}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(4)
			fence := &Webhooks{
				Leases: leases,
				Cluster: fake.NewClientBuilder().WithObjects(leader.DeepCopy(), replica.DeepCopy(), canary.DeepCopy(),
					&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}).Build(),
				Recorder: recorder, Events: NewEventBudget(clock.RealClock{}), OwnNamespace: "leasegate-system",
			}
			fence.policy.Store(testPolicy(t, ""))
			eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-a"}, DeleteOptions: &metav1.DeleteOptions{DryRun: tt.dryRun}}
			resp := fence.Evictions().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "1", Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a", SubResource: "eviction",
				Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
				UserInfo: tt.user, Object: rawObject(t, eviction),
			}})
			if resp.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v (%q), want %v", resp.Allowed, resp.Result.Message, tt.wantAllowed)
			}
			if got := len(recorder.Events); got != tt.wantEvents {
				t.Errorf("%d Events recorded, want %d", got, tt.wantEvents)
			}
		})
	}
}
