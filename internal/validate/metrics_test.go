package validate

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestEveryAnswerIsCounted drives each fence webhook down each path that answers, the allowances made
// before there is anything to judge and the errors as much as the verdicts, and checks that each answer
// was counted once under its labels and timed once.
func TestEveryAnswerIsCounted(t *testing.T) {
	keeps := injectedPod("orders-k", "uid-k", `{"lease":"orders"}`, "LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s")
	restarts := injectedPod("orders-a", "uid-a", `{"lease":"orders"}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=restart")
	webhooks := func(cluster client.Reader) *Webhooks {
		w := &Webhooks{
			Leases: leases, Cluster: cluster,
			Recorder: &events.FakeRecorder{}, Events: NewEventBudget(clock.RealClock{}), OwnNamespace: "leasegate-system",
		}
		w.policy.Store(testPolicy(t, ""))
		return w
	}
	fence := webhooks(fake.NewClientBuilder().WithObjects(keeps, restarts).Build())
	unreadable := webhooks(fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("the cache is not synced")
		},
	}).Build())

	notJSON := runtime.RawExtension{Raw: []byte("{not json")}
	eviction := func(t *testing.T, name string) runtime.RawExtension {
		return rawObject(t, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}})
	}
	person := authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
	tests := []struct {
		name    string
		handler func() admission.Handler
		request func(t *testing.T) admissionv1.AdmissionRequest
		// webhook, guard, outcome and reason: the labels the answer is counted under.
		labels      [4]string
		wantAllowed bool
	}{
		{"a write no guard covers", fence.Guarded, func(*testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Update, Namespace: "shop", Name: "web",
				Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, UserInfo: podUser("orders-b", "uid-b")}
		}, [4]string{"guarded", "", "allowed", "not_guarded"}, true},
		{"a guarded write denied", fence.Guarded, func(*testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Update, Namespace: "shop", Name: "web",
				Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, UserInfo: podUser("orders-b", "uid-b")}
		}, [4]string{"guarded", "orders", "denied", "lease_expired"}, false},
		{"a lease update whose old object does not decode", fence.LeaseWrites, func(*testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Update, Namespace: "shop", Name: "orders",
				Resource: metav1.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
				UserInfo: podUser("orders-b", "uid-b"), OldObject: notJSON, Object: notJSON}
		}, [4]string{"lease", "", "error", "bad_request"}, false},
		{"a lease create whose object does not decode", fence.LeaseWrites, func(*testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "orders",
				Resource: metav1.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
				UserInfo: podUser("orders-b", "uid-b"), Object: notJSON}
		}, [4]string{"lease", "", "error", "bad_request"}, false},
		{"a pod deletes a lease", fence.LeaseWrites, func(t *testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Delete, Namespace: "shop", Name: "orders",
				Resource: metav1.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
				UserInfo: podUser("orders-a", "uid-a"), OldObject: rawObject(t, leases[namespacedName{"shop", "orders"}].Lease)}
		}, [4]string{"lease", "", "denied", "delete_lease"}, false},
		{"an eviction by a person", fence.Evictions, func(t *testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a", SubResource: "eviction",
				UserInfo: person, Object: eviction(t, "orders-a")}
		}, [4]string{"eviction", "", "allowed", "not_gated"}, true},
		{"an eviction of a pod leasegate did not inject", fence.Evictions, func(t *testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "web", SubResource: "eviction",
				UserInfo: podUser("web", "uid-w"), Object: eviction(t, "web")}
		}, [4]string{"eviction", "", "allowed", "not_injected"}, true},
		{"an eviction of a pod that keeps on loss", fence.Evictions, func(t *testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "orders-k", SubResource: "eviction",
				UserInfo: podUser("orders-k", "uid-k"), Object: eviction(t, "orders-k")}
		}, [4]string{"eviction", "", "allowed", "keeps_on_loss"}, true},
		{"an eviction whose pod cannot be read", unreadable.Evictions, func(t *testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a", SubResource: "eviction",
				UserInfo: podUser("orders-a", "uid-a"), Object: eviction(t, "orders-a")}
		}, [4]string{"eviction", "", "error", "internal_error"}, false},
		{"a follower evicts the leader", fence.Evictions, func(t *testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a", SubResource: "eviction",
				UserInfo: podUser("orders-b", "uid-b"), Object: eviction(t, "orders-a")}
		}, [4]string{"eviction", "", "denied", "evicts_other"}, false},
		{"an EndpointSlice that does not decode", fence.LeaderEndpoints, func(*testing.T) admissionv1.AdmissionRequest {
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "web-abcde",
				Resource: metav1.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
				UserInfo: person, Object: notJSON}
		}, [4]string{"endpointslice", "", "error", "bad_request"}, false},
		{"an EndpointSlice of no leader Service", fence.LeaderEndpoints, func(t *testing.T) admissionv1.AdmissionRequest {
			slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abcde",
				Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}}
			return admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop", Name: "web-abcde",
				Resource: metav1.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
				UserInfo: person, Object: rawObject(t, slice)}
		}, [4]string{"endpointslice", "", "allowed", "not_guarded"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counted := decisions.WithLabelValues(tt.labels[:]...)
			before, timedBefore := testutil.ToFloat64(counted), timed(t, tt.labels[0])
			req := tt.request(t)
			req.UID = "1"
			resp := tt.handler().Handle(context.Background(), admission.Request{AdmissionRequest: req})
			if resp.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v (%v), want %v", resp.Allowed, resp.Result, tt.wantAllowed)
			}
			if got := testutil.ToFloat64(counted) - before; got != 1 {
				t.Errorf("leasegate_fence_decisions_total%v rose by %v, want 1", tt.labels, got)
			}
			if got := timed(t, tt.labels[0]) - timedBefore; got != 1 {
				t.Errorf("leasegate_fence_decision_duration_seconds{webhook=%q} observed %d answers, want 1", tt.labels[0], got)
			}
		})
	}
}

// timed is how many answers of webhook the duration histogram has observed.
func timed(t *testing.T, webhook string) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := decisionSeconds.WithLabelValues(webhook).(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
