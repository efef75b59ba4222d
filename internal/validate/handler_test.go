package validate

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/config"
)

func TestMessage(t *testing.T) {
	req := &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "shop", Name: "web-tls-1",
		Resource: metav1.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificaterequests"},
		UserInfo: authenticationv1.UserInfo{
			Username: "system:serviceaccount:cert-manager:cert-manager",
			Extra:    map[string]authenticationv1.ExtraValue{extraPodName: {"cm-0"}, extraPodUID: {"u0"}},
		},
	}}
	held := Verdict{Outcome: Denied, Guard: "cert-manager", LeaseNamespace: "kube-system", LeaseName: "cert-manager-controller"}
	tests := []struct {
		name    string
		reason  Reason
		holder  string
		format  string
		message string
	}{
		{"another pod holds the lease", HeldByAnother, "cm-1-external-cert-manager-controller", "",
			`leasegate: pod shop/cm-0 (system:serviceaccount:cert-manager:cert-manager) may not create certificaterequests.cert-manager.io shop/web-tls-1: ` +
				`lease kube-system/cert-manager-controller is held by cm-1-external-cert-manager-controller (guard "cert-manager"): another pod holds the lease`},
		{"nobody holds the lease", LeaseReleased, "", "",
			`leasegate: pod shop/cm-0 (system:serviceaccount:cert-manager:cert-manager) may not create certificaterequests.cert-manager.io shop/web-tls-1: ` +
				`lease kube-system/cert-manager-controller is held by nobody (guard "cert-manager"): the lease is released, so nobody holds it`},
		{"the holder names the requester in another format: the preset that reads it", HolderFormatMismatch, "cm-0-external-cert-manager-controller", "client-go",
			`leasegate: pod shop/cm-0 (system:serviceaccount:cert-manager:cert-manager) may not create certificaterequests.cert-manager.io shop/web-tls-1: ` +
				`lease kube-system/cert-manager-controller is held by cm-0-external-cert-manager-controller (guard "cert-manager"): ` +
				`the holder contains this pod's name, but not in the holder format the guard reads (holderFormat "client-go"); ` +
				`if the holder is this pod, set the guard's holderFormat to "cert-manager"`},
		{"the holder names the requester in another format: a template", HolderFormatMismatch, "leader=cm-0,u0", "pod-name",
			`leasegate: pod shop/cm-0 (system:serviceaccount:cert-manager:cert-manager) may not create certificaterequests.cert-manager.io shop/web-tls-1: ` +
				`lease kube-system/cert-manager-controller is held by leader=cm-0,u0 (guard "cert-manager"): ` +
				`the holder contains this pod's name, but not in the holder format the guard reads (holderFormat "pod-name"); ` +
				`if the holder is this pod, set the guard's holderFormat to "leader={pod},{uid}"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := held
			v.Reason, v.Holder, v.HolderFormat = tt.reason, tt.holder, tt.format
			if got := message(req, v); got != tt.message {
				t.Errorf("message() =\n%s\nwant\n%s", got, tt.message)
			}
		})
	}
}

func TestGuardedJudgesSubresourcesByTheirResource(t *testing.T) {
	fence := &Webhooks{
		Leases: leases, Recorder: &events.FakeRecorder{}, OwnNamespace: "leasegate-system",
		Cluster: fake.NewClientBuilder().WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}).Build(),
		Events:  NewEventBudget(clocktesting.NewFakePassiveClock(time.Now())),
	}
	cfg, err := config.Load([]byte(subresourceConfig))
	if err != nil {
		t.Fatal(err)
	}
	fence.policy.Store(Compile(cfg, "leasegate-system"))
	write := func(resource, subresource string) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "1", Operation: admissionv1.Update, Namespace: "shop", Name: "web", SubResource: subresource,
			Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: resource},
			Kind:     metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
			UserInfo: podUser("orders-b", "uid-b"),
		}}
	}
	resp := fence.Guarded().Handle(context.Background(), write("deployments", "scale"))
	// The handler judges at the wall clock, long after the test leases' renewals: expired, held by nobody.
	want := `leasegate: pod shop/orders-b (system:serviceaccount:shop:orders) may not update scale of deployments.apps shop/web: ` +
		`lease shop/orders is held by orders-a_uid-a (guard "orders"): the lease has expired, so nobody holds it`
	if resp.Allowed || resp.Result.Message != want {
		t.Errorf("a follower's deployments/scale: allowed %v, %q; want denied, %q", resp.Allowed, resp.Result.Message, want)
	}
	if resp := fence.Guarded().Handle(context.Background(), write("statefulsets", "status")); !resp.Allowed {
		t.Errorf("statefulsets/status, which the guard excludes: denied, %q", resp.Result.Message)
	}
}
