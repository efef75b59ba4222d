package leaderservice

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func service(mutate ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "svc-uid", Labels: map[string]string{contract.LeaderLease: "orders"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "orders"},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")},
				{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9091)},
				{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 8081},
			},
		},
	}
	for _, m := range mutate {
		m(svc)
	}
	return svc
}

func pod(name, uid string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + uid), Labels: map[string]string{"app": "orders"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{
			Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		}}},
		Status: corev1.PodStatus{
			PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func heldBy(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Labels: map[string]string{contract.Managed: "true"}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)},
		},
	}
}

func TestHolder(t *testing.T) {
	a := pod("orders-a", "a")
	pods := map[string]*corev1.Pod{
		"orders-a":   a,
		"orders-far": pod("orders-far", "far", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "billing"} }),
		"orders-new": pod("orders-new", "new", func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }),
		"orders-bye": pod("orders-bye", "bye", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }),
	}
	lookup := func(name string) *corev1.Pod { return pods[name] }
	tests := []struct {
		name        string
		lease       *coordinationv1.Lease
		wantPod     *corev1.Pod
		wantRecheck time.Time
		wantWhy     string
	}{
		{"the holder's pod while the lease is held, rechecked when it would expire", heldBy("orders-a_uid-a", 2*time.Second), a, now.Add(14 * time.Second), ""},
		{"nobody once the lease expired unrenewed", heldBy("orders-a_uid-a", 20*time.Second), nil, time.Time{}, "the lease is expired"},
		{"nobody while it is released", heldBy("", time.Second), nil, time.Time{}, "the lease is released"},
		{"nobody when the lease does not exist", nil, nil, time.Time{}, "the lease does not exist"},
		{"not a recreated pod of the holder's name", heldBy("orders-a_uid-old", time.Second), nil, now.Add(15 * time.Second), "an earlier pod called orders-a"},
		{"not a pod the Service does not select", heldBy("orders-far_uid-far", time.Second), nil, now.Add(15 * time.Second), "is not selected by the Service"},
		{"not a pod without an address", heldBy("orders-new_uid-new", time.Second), nil, now.Add(15 * time.Second), "has no address yet"},
		{"not a terminating pod", heldBy("orders-bye_uid-bye", time.Second), nil, now.Add(15 * time.Second), "is terminating"},
		{"not a holder that is no pod's identity", heldBy("controller-manager", time.Second), nil, now.Add(15 * time.Second), "is not a pod's identity"},
		{"not a holder whose pod is unknown", heldBy("orders-z_uid-z", time.Second), nil, now.Add(15 * time.Second), "is not an injected pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, recheck, why := Holder(tt.lease, lookup, service(), now, time.Second)
			if got != tt.wantPod || !recheck.Equal(tt.wantRecheck) || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("Holder() = %v, %s, %q; want %v, %s, %q", got, recheck, why, tt.wantPod, tt.wantRecheck, tt.wantWhy)
			}
		})
	}
}

func TestSlice(t *testing.T) {
	svc := service()
	companion, err := Companion(svc)
	if err != nil {
		t.Fatal(err)
	}
	companion.UID = "companion-uid"

	got := Slice(svc, companion, pod("orders-a", "a"))
	if got.Name != "orders-leader" || got.Labels[discoveryv1.LabelServiceName] != "orders-leader" || got.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
		t.Errorf("slice %s labelled %v: want orders-leader, for Service orders-leader, managed by %s", got.Name, got.Labels, ManagedBy)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "companion-uid" {
		t.Errorf("slice owners %v: want the companion", got.OwnerReferences)
	}
	wantPorts := map[string]int32{"http": 8080, "grpc": 9091, "admin": 8081}
	if len(got.Ports) != len(wantPorts) {
		t.Fatalf("ports %v: want %v (a named port resolved on the holder, a number kept, none the Service port)", got.Ports, wantPorts)
	}
	for _, p := range got.Ports {
		if wantPorts[*p.Name] != *p.Port {
			t.Errorf("port %s = %d, want %d", *p.Name, *p.Port, wantPorts[*p.Name])
		}
	}
	if len(got.Endpoints) != 1 || got.Endpoints[0].Addresses[0] != "10.1.0.7" || !*got.Endpoints[0].Conditions.Ready ||
		got.Endpoints[0].TargetRef.Name != "orders-a" || *got.Endpoints[0].NodeName != "node-a" {
		t.Errorf("endpoints %+v: want the holder's address, Ready, naming its pod and node", got.Endpoints)
	}

	notReady := Slice(svc, companion, pod("orders-a", "a", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }))
	if *notReady.Endpoints[0].Conditions.Ready || *notReady.Endpoints[0].Conditions.Serving {
		t.Errorf("a holder that is not Ready is published not ready: %+v", notReady.Endpoints[0].Conditions)
	}
	if none := Slice(svc, companion, nil); len(none.Endpoints) != 0 || none.Endpoints == nil {
		t.Errorf("without a holder the slice has an empty (not null) endpoint list: %+v", none.Endpoints)
	}
	namedOnly := service(func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] })
	if missing := Slice(namedOnly, companion, pod("orders-a", "a", func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil })); len(missing.Endpoints) != 0 {
		t.Errorf("a holder without the Service's named port gets no endpoint: %+v", missing.Endpoints)
	}
	gated := pod("orders-a", "a", func(p *corev1.Pod) {
		// The mutation gate moves the app's named port to the agent, a native sidecar.
		p.Spec.Containers[0].Ports = nil
		p.Spec.InitContainers = []corev1.Container{
			{Name: "setup", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 7000, Protocol: corev1.ProtocolTCP}}},
			{Name: "leasegate-agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9441, Protocol: corev1.ProtocolTCP}}},
		}
	})
	if s := Slice(namedOnly, companion, gated); len(s.Ports) != 1 || *s.Ports[0].Port != 9441 {
		t.Errorf("a named port on a native sidecar (the gate) resolves there, not on a plain init container: %+v", s.Ports)
	}
	v6 := service(func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })
	dual := pod("orders-a", "a", func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::7"}) })
	if s := Slice(v6, companion, dual); s.AddressType != discoveryv1.AddressTypeIPv6 || s.Endpoints[0].Addresses[0] != "fd00::7" {
		t.Errorf("an IPv6 Service gets the holder's IPv6 address: %s %+v", s.AddressType, s.Endpoints)
	}
}

func TestCompanion(t *testing.T) {
	got, err := Companion(service())
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "orders-leader" || got.Spec.Selector != nil || len(got.Spec.Ports) != 3 || got.Labels[contract.LeaderOf] != "orders" ||
		got.OwnerReferences[0].UID != "svc-uid" || !*got.OwnerReferences[0].Controller {
		t.Errorf("companion %+v: want orders-leader, without selector, the three ports, owned by orders", got)
	}
	tests := []struct {
		name    string
		svc     *corev1.Service
		wantErr string
	}{
		{"a label that is no lease name", service(func(s *corev1.Service) { s.Labels[contract.LeaderLease] = "Orders_1" }), "label leasegate.io/leader-lease=\"Orders_1\" is not a Lease name"},
		{"a name too long for its companion", service(func(s *corev1.Service) { s.Name = strings.Repeat("o", 60) }), "shorten the Service's name to at most 56 characters"},
		{"no selector", service(func(s *corev1.Service) { s.Spec.Selector = nil }), "spec.selector is empty"},
		{"a headless Service", service(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }), "headless"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Companion(tt.svc); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Companion() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCompanionLease(t *testing.T) {
	companion, err := Companion(service())
	if err != nil {
		t.Fatal(err)
	}
	// The cache holds labelled Services only: an opted-in Service, its companion, and a Service that
	// opted in with a name ending in the suffix.
	cached := map[string]*corev1.Service{
		"orders":        service(),
		"orders-leader": companion,
		"web":           service(func(s *corev1.Service) { s.Name, s.Labels[contract.LeaderLease] = "web", "web-lease" }),
		"api-leader":    service(func(s *corev1.Service) { s.Name, s.Labels[contract.LeaderLease] = "api-leader", "api" }),
		"api":           service(func(s *corev1.Service) { s.Name, s.Labels[contract.LeaderLease] = "api", "api" }),
	}
	tests := []struct {
		name      string
		service   string
		cached    map[string]*corev1.Service
		wantLease string
		wantKept  bool
	}{
		{"the companion leasegate keeps", "orders-leader", cached, "orders", true},
		{"the companion of an opted-in Service before it exists", "web-leader", cached, "web-lease", true},
		{"the companion's name once the Service opted in, even with the companion gone", "orders-leader", map[string]*corev1.Service{"orders": service()}, "orders", true},
		{"not the opted-in Service itself", "orders", cached, "orders", false},
		{"not a Service that merely ends in -leader", "billing-leader", cached, "", false},
		{"not a Service that opted in itself, whatever its name", "api-leader", cached, "api", false},
		{"not the name of a companion's companion", "orders-leader-leader", cached, "", false},
		{"not the bare suffix", "-leader", map[string]*corev1.Service{"": service()}, "", false},
		{"not a slice without a Service", "", cached, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lease, kept := CompanionLease(tt.service, func(name string) *corev1.Service { return tt.cached[name] })
			if kept != tt.wantKept || (kept && lease != tt.wantLease) {
				t.Errorf("CompanionLease(%q) = %q, %v; want %q, %v", tt.service, lease, kept, tt.wantLease, tt.wantKept)
			}
		})
	}
}

func TestIsOwnSlice(t *testing.T) {
	slice := func(name, managedBy string) *metav1.PartialObjectMetadata {
		s := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "orders-leader"}}}
		if managedBy != "" {
			s.Labels[discoveryv1.LabelManagedBy] = managedBy
		}
		return s
	}
	tests := []struct {
		name  string
		slice *metav1.PartialObjectMetadata
		want  bool
	}{
		{"leasegate's slice", slice("orders-leader", ManagedBy), true},
		{"another name, even managed by leasegate", slice("orders-leader-x", ManagedBy), false},
		{"leasegate's name, managed by the endpoint controller", slice("orders-leader", "endpointslice-controller.k8s.io"), false},
		{"leasegate's name, managed by nobody", slice("orders-leader", ""), false},
		{"a mirrored slice", slice("orders-leader-abcde", "endpointslicemirroring-controller.k8s.io"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsOwnSlice("orders-leader", tt.slice); got != tt.want {
				t.Errorf("IsOwnSlice(%s) = %v, want %v", tt.slice.Name, got, tt.want)
			}
		})
	}
}

// The cache of every slice's metadata keeps what finding and deleting a forged one needs, no more.
func TestSlimSlice(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "orders-leader-x", UID: "uid-x", ResourceVersion: "42", Generation: 3,
		Labels:          map[string]string{discoveryv1.LabelServiceName: "orders-leader", discoveryv1.LabelManagedBy: "mallory", "team": "red"},
		Annotations:     map[string]string{"note": strings.Repeat("x", 1000)},
		OwnerReferences: []metav1.OwnerReference{{Name: "orders-leader"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	in.SetGroupVersionKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"))
	out, err := SlimSlice(in)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	want := metav1.ObjectMeta{
		Namespace: "shop", Name: "orders-leader-x", UID: "uid-x", ResourceVersion: "42",
		Labels: map[string]string{discoveryv1.LabelServiceName: "orders-leader", discoveryv1.LabelManagedBy: "mallory"},
	}
	if !apiequality.Semantic.DeepEqual(got.ObjectMeta, want) {
		t.Errorf("SlimSlice() kept %+v, want %+v", got.ObjectMeta, want)
	}
	if got.Kind != "EndpointSlice" {
		t.Errorf("SlimSlice() dropped the kind: %v", got.TypeMeta)
	}
}
