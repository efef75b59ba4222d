package validate

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/admissionfuzz"
	"github.com/leasegate/leasegate/internal/contract"
)

// fuzzFence is a fence over the test policy and leases, with an injected pod that restarts on loss of
// lease shop/orders (for evictions) and the leader Service orders-leader following it, recording Events
// nowhere.
func fuzzFence(f *testing.F) *Webhooks {
	restarting := injectedPod("orders-a", "uid-a", `{"lease":"orders","restartOnLoss":"orders"}`,
		"LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=restart")
	companion := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "orders-leader", Labels: map[string]string{contract.LeaderLease: "orders", contract.LeaderOf: "orders"},
	}}
	fence := &Webhooks{
		Leases:       leases,
		Cluster:      fake.NewClientBuilder().WithObjects(restarting, companion, leases[namespacedName{"shop", "orders"}].Lease).Build(),
		Recorder:     &events.FakeRecorder{},
		Events:       NewEventBudget(clock.RealClock{}),
		OwnNamespace: "leasegate-system",
	}
	fence.policy.Store(testPolicy(f, ""))
	return fence
}

// podUser is the UserInfo of a pod-bound token of pod name/uid with service account shop/orders.
func podUser(name, uid string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{
		Username: "system:serviceaccount:shop:orders", Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{extraPodName: {name}, extraPodUID: {uid}},
	}
}

func raw(f *testing.F, obj runtime.Object) runtime.RawExtension {
	data, err := json.Marshal(obj)
	if err != nil {
		f.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

// fuzzEndpoint fuzzes one of the fence's endpoints from seeds: every body gets an AdmissionReview that
// allows, or refuses with a reason.
func fuzzEndpoint(f *testing.F, handler admission.Handler, seeds ...admissionv1.AdmissionRequest) {
	for _, seed := range seeds {
		f.Add(admissionfuzz.Body(f, seed))
	}
	f.Add([]byte(`{"request":{"uid":"1","userInfo":{"extra":{"authentication.kubernetes.io/pod-name":["a","b"]}}}}`))
	f.Add([]byte(`{"request":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		admissionfuzz.Check(t, handler, body)
	})
}

func FuzzGuarded(f *testing.F) {
	fence := fuzzFence(f)
	write := func(user authenticationv1.UserInfo, op admissionv1.Operation, group, resource string) admissionv1.AdmissionRequest {
		return admissionv1.AdmissionRequest{
			UID: "1", Operation: op, Namespace: "shop", Name: "orders", UserInfo: user,
			Resource: metav1.GroupVersionResource{Group: group, Version: "v1", Resource: resource},
			Kind:     metav1.GroupVersionKind{Group: group, Version: "v1", Kind: "Deployment"},
		}
	}
	fuzzEndpoint(f, fence.Guarded(),
		write(podUser("orders-a", "uid-a"), admissionv1.Update, "apps", "deployments"),
		write(podUser("orders-b", "uid-b"), admissionv1.Update, "apps", "deployments"),
		write(podUser("orders-b", "uid-b"), admissionv1.Create, "", "configmaps"),
		write(authenticationv1.UserInfo{Username: "system:serviceaccount:shop:orders"}, admissionv1.Delete, "", "services"),
		write(authenticationv1.UserInfo{Username: "jane", Groups: []string{"system:masters"}}, admissionv1.Update, "batch", "jobs"),
	)
}

func FuzzLeaseWrites(f *testing.F) {
	fence := fuzzFence(f)
	held := leases[namespacedName{"shop", "orders"}].Lease
	takenOver := held.DeepCopy()
	takenOver.Spec.HolderIdentity = new(string)
	*takenOver.Spec.HolderIdentity = "orders-b_uid-b"
	fuzzEndpoint(f, fence.LeaseWrites(),
		admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Update, Namespace: "shop", Name: "orders",
			UserInfo: podUser("orders-b", "uid-b"), OldObject: raw(f, held), Object: raw(f, takenOver)},
		admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "shop", Name: "orders",
			UserInfo: podUser("orders-a", "uid-a"), Object: raw(f, held)},
		admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Delete, Namespace: "shop", Name: "orders",
			UserInfo: podUser("orders-a", "uid-a"), OldObject: raw(f, held)},
	)
}

func FuzzEvictions(f *testing.F) {
	fence := fuzzFence(f)
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-a"}}
	fuzzEndpoint(f, fence.Evictions(),
		admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a",
			SubResource: "eviction", UserInfo: podUser("orders-a", "uid-a"), Object: raw(f, eviction)},
		admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "shop", Name: "orders-a",
			SubResource: "eviction", UserInfo: podUser("orders-b", "uid-b"), Object: raw(f, eviction)},
	)
}

func FuzzLeaderEndpoints(f *testing.F) {
	fence := fuzzFence(f)
	slice := func(service string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: service, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}}},
		}
	}
	write := func(op admissionv1.Operation, user authenticationv1.UserInfo, old, updated *discoveryv1.EndpointSlice) admissionv1.AdmissionRequest {
		req := admissionv1.AdmissionRequest{UID: "1", Operation: op, Namespace: "shop", Name: "orders-leader", UserInfo: user}
		if old != nil {
			req.OldObject = raw(f, old)
		}
		if updated != nil {
			req.Object = raw(f, updated)
		}
		return req
	}
	fuzzEndpoint(f, fence.LeaderEndpoints(),
		write(admissionv1.Create, podUser("orders-b", "uid-b"), nil, slice("orders-leader")),
		write(admissionv1.Update, authenticationv1.UserInfo{Username: "mallory"}, slice("orders-leader"), slice("elsewhere")),
		write(admissionv1.Create, authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:endpointslice-controller"}, nil, slice("web-leader")),
	)
}

func FuzzLeaderServices(f *testing.F) {
	fence := fuzzFence(f)
	companion := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-leader", Labels: map[string]string{contract.LeaderLease: "orders", contract.LeaderOf: "orders", contract.Managed: "true"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	taken := companion.DeepCopy()
	delete(taken.Labels, contract.LeaderOf)
	taken.Spec.Selector = map[string]string{"app": "orders"}
	write := func(op admissionv1.Operation, user authenticationv1.UserInfo, old, updated *corev1.Service) admissionv1.AdmissionRequest {
		req := admissionv1.AdmissionRequest{UID: "1", Operation: op, Namespace: "shop", Name: "orders-leader", UserInfo: user, Object: raw(f, updated)}
		if old != nil {
			req.OldObject = raw(f, old)
		}
		return req
	}
	fuzzEndpoint(f, fence.LeaderServices(),
		write(admissionv1.Update, authenticationv1.UserInfo{Username: "mallory"}, companion, taken),
		write(admissionv1.Create, podUser("orders-b", "uid-b"), nil, companion),
		write(admissionv1.Update, authenticationv1.UserInfo{Username: "jane", Groups: []string{"system:masters"}}, companion, taken),
	)
}
