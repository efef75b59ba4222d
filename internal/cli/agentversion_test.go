package cli

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
)

// injectedPod is an injected pod whose status records version ("" for none), owned by kind/owner ("" for
// a bare pod); a ReplicaSet's pods carry the pod-template-hash its name ends with.
func injectedPod(name, version, kind, owner string) corev1.Pod {
	status := `{"lease":"orders","sidecar":"native","port":9440,"image":"registry.example/leasegate-agent:test"}`
	if version != "" {
		status = `{"lease":"orders","sidecar":"native","port":9440,"image":"registry.example/leasegate-agent:test","version":"` + version + `"}`
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "shop",
		Annotations: map[string]string{contract.Status: status},
		Labels:      map[string]string{contract.Injected: "true"},
	}}
	if kind != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: owner, Controller: ptr.To(true)}}
	}
	if kind == "ReplicaSet" {
		pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "5d8f7c9b4"
	}
	return pod
}

func TestOlderAgents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		webhook string
		want    []Finding
	}{
		{
			name:    "agents of the webhook's release: nothing to report",
			pods:    []corev1.Pod{injectedPod("orders-5d8f7c9b4-a", "v0.2.0", "ReplicaSet", "orders-5d8f7c9b4")},
			webhook: "v0.2.0",
		},
		{
			name:    "agents newer than the webhook (a rollback): not older, nothing to report",
			pods:    []corev1.Pod{injectedPod("orders-0", "v0.3.0", "StatefulSet", "orders")},
			webhook: "v0.2.0",
		},
		{
			name: "a Deployment's older pods: one finding for the Deployment, naming its oldest pod",
			pods: []corev1.Pod{
				injectedPod("orders-5d8f7c9b4-a", "v0.1.1", "ReplicaSet", "orders-5d8f7c9b4"),
				injectedPod("orders-5d8f7c9b4-b", "v0.1.0", "ReplicaSet", "orders-5d8f7c9b4"),
				injectedPod("orders-5d8f7c9b4-c", "v0.2.0", "ReplicaSet", "orders-5d8f7c9b4"),
			},
			webhook: "v0.2.0",
			want: []Finding{{
				Code: CodeAgentOlderThanWebhook, Severity: SeverityWarning, Object: "Deployment/shop/orders",
				Message: "2 pod(s) run an agent injected by leasegate v0.1.0 (oldest: orders-5d8f7c9b4-b), older than the webhook's v0.2.0: they keep that release's agent until they are created again",
				Fix:     "roll the workload so its pods are injected anew: kubectl rollout restart -n shop deployment/orders",
			}},
		},
		{
			name:    "a pod injected before releases recorded their version is older than any webhook that records it",
			pods:    []corev1.Pod{injectedPod("orders-0", "v0.1.0", "StatefulSet", "orders"), injectedPod("orders-1", "", "StatefulSet", "orders")},
			webhook: "v0.2.0",
			want: []Finding{{
				Code: CodeAgentOlderThanWebhook, Severity: SeverityWarning, Object: "StatefulSet/shop/orders",
				Message: "2 pod(s) run an agent injected by a leasegate release that did not record its version (oldest: orders-1), older than the webhook's v0.2.0: they keep that release's agent until they are created again",
				Fix:     "roll the workload so its pods are injected anew: kubectl rollout restart -n shop statefulset/orders",
			}},
		},
		{
			name:    "a bare pod and a Job's pod: each its own finding, sorted, with a fix that fits",
			pods:    []corev1.Pod{injectedPod("report", "v0.1.0", "", ""), injectedPod("backup-x7", "v0.1.0", "Job", "backup")},
			webhook: "v0.2.0",
			want: []Finding{
				{
					Code: CodeAgentOlderThanWebhook, Severity: SeverityWarning, Object: "Job/shop/backup",
					Message: "1 pod(s) run an agent injected by leasegate v0.1.0 (oldest: backup-x7), older than the webhook's v0.2.0: they keep that release's agent until they are created again",
					Fix:     "delete the pods so that Job backup creates them again, injected anew (a Job's next pods get the current agent by themselves)",
				},
				{
					Code: CodeAgentOlderThanWebhook, Severity: SeverityWarning, Object: "Pod/shop/report",
					Message: "1 pod(s) run an agent injected by leasegate v0.1.0 (oldest: report), older than the webhook's v0.2.0: they keep that release's agent until they are created again",
					Fix:     "create the pod again so it is injected anew (kubectl delete pod -n shop report, then create it as you did)",
				},
			},
		},
		{
			name:    "a webhook that records no version (older than this check): nothing can be compared",
			pods:    []corev1.Pod{injectedPod("orders-0", "v0.1.0", "StatefulSet", "orders")},
			webhook: "",
		},
		{
			name:    "a development build's version cannot be ordered: left alone",
			pods:    []corev1.Pod{injectedPod("orders-0", "v0.1.0", "StatefulSet", "orders"), injectedPod("orders-1", "devel", "StatefulSet", "orders")},
			webhook: "devel",
		},
		{
			name: "a pod whose status is not JSON (edited by hand) is not judged",
			pods: []corev1.Pod{func() corev1.Pod {
				p := injectedPod("orders-0", "v0.1.0", "StatefulSet", "orders")
				p.Annotations[contract.Status] = "{"
				return p
			}()},
			webhook: "v0.2.0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := olderAgents(tc.pods, tc.webhook)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d finding(s), want %d: %+v", len(got), len(tc.want), got)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("finding %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
