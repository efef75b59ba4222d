// Package leaderservice keeps, for each Service labelled leasegate.io/leader-lease, a companion
// "<service>-leader" Service whose one endpoint is the pod that holds that Lease: traffic that follows the
// holder, from the Lease watch, not from readiness (so rollouts, PodDisruptionBudgets and readiness: health
// are untouched).
//
// The companion has no selector; leasegate writes its EndpointSlice itself, because a role label on pods
// would need the right to patch every pod and would add a pod write and the endpoint controller's own
// batching to every failover. The slice is labelled endpointslice.kubernetes.io/managed-by: leasegate.io,
// so the endpoint controllers leave it alone, and endpointslices.leasegate.io refuses anyone else's write.
//
// Desired state is computed by pure functions (Companion, Holder, Slice) from plain values; the
// Reconciler around them reads caches and writes only when something differs.
package leaderservice

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
)

const (
	// Suffix names a companion: "<service>-leader".
	Suffix = "-leader"
	// ManagedBy is the value of endpointslice.kubernetes.io/managed-by on the slices leasegate writes.
	ManagedBy = "leasegate.io"
)

// CompanionName is the name of svc's companion Service.
func CompanionName(service string) string { return service + Suffix }

// IsCompanion reports whether svc is a companion leasegate keeps (it carries leasegate.io/leader-of).
func IsCompanion(svc *corev1.Service) bool { return svc.Labels[contract.LeaderOf] != "" }

// Companion returns the companion Service of svc, opted in by leasegate.io/leader-lease: same ports, no
// selector, owned by svc (so deleting svc deletes it). The error names the label or field and the fix.
func Companion(svc *corev1.Service) (*corev1.Service, error) {
	leaseName := svc.Labels[contract.LeaderLease]
	var problems []string
	if errs := validation.IsDNS1123Subdomain(leaseName); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("label %s=%q is not a Lease name (%s): set it to the lease the pods elect on, as leasegate.io/lease names it", contract.LeaderLease, leaseName, strings.Join(errs, "; ")))
	}
	name := CompanionName(svc.Name)
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("the companion Service %q is not a valid Service name (%s): shorten the Service's name to at most %d characters", name, strings.Join(errs, "; "), validation.DNS1035LabelMaxLength-len(Suffix)))
	}
	if len(svc.Spec.Selector) == 0 {
		problems = append(problems, "spec.selector is empty: a leader Service needs a selector, which says which pods may receive its traffic")
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		problems = append(problems, "spec.type ExternalName and headless Services have no endpoints to follow: label a ClusterIP Service")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("leader service %s/%s: %s", svc.Namespace, svc.Name, strings.Join(problems, "; "))
	}
	companion := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: name,
			Labels: map[string]string{contract.LeaderLease: leaseName, contract.LeaderOf: svc.Name, contract.Managed: "true"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, IPFamilies: svc.Spec.IPFamilies, IPFamilyPolicy: svc.Spec.IPFamilyPolicy},
	}
	for _, p := range svc.Spec.Ports {
		companion.Spec.Ports = append(companion.Spec.Ports, corev1.ServicePort{
			Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port, TargetPort: p.TargetPort,
		})
	}
	return companion, nil
}

// CompanionLease reports whether the Service called name, in a namespace whose labelled Services
// services reads (nil when there is none), is one whose slices leasegate alone writes, and the lease
// it follows: a companion leasegate keeps (leasegate.io/leader-of), or the name "<svc>-leader" of a
// Service svc opted in by leasegate.io/leader-lease. The opt-in claims the name before its companion
// exists, so that no slice can be there first and route the companion's traffic once it does. A
// labelled Service that is not a companion belongs to whoever opted it in, whatever its name.
func CompanionLease(name string, services func(name string) *corev1.Service) (leaseName string, kept bool) {
	if name == "" {
		return "", false
	}
	if svc := services(name); svc != nil {
		return svc.Labels[contract.LeaderLease], IsCompanion(svc)
	}
	followed, ok := strings.CutSuffix(name, Suffix)
	if !ok || followed == "" {
		return "", false
	}
	svc := services(followed)
	if svc == nil || IsCompanion(svc) || svc.Labels[contract.LeaderLease] == "" {
		return "", false
	}
	return svc.Labels[contract.LeaderLease], true
}

// RoutesAsCompanion reports whether svc routes only to the slices written for it, inside the cluster: a
// ClusterIP Service without a selector or external addresses.
func RoutesAsCompanion(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.Selector) == 0 && len(svc.Spec.ExternalIPs) == 0
}

// IsOwnSlice reports whether slice, which names companion as its Service, is the one leasegate writes
// for it: named after the companion and managed by leasegate. Any other slice of a companion is forged
// and removed. A slice of that name whose labels a writer forged is leasegate's by name: its endpoints,
// ports, labels and owner are overwritten on the next reconcile, so nothing its writer chose survives.
func IsOwnSlice(companion string, slice metav1.Object) bool {
	return slice.GetName() == companion && slice.GetLabels()[discoveryv1.LabelManagedBy] == ManagedBy
}

// Holder returns the pod of pods that may receive svc's leader traffic at now: the one lease l names as
// its holder, while the lease is held (judged as the fence judges it, with the clock skew margin), when
// svc's selector selects it, it has an address and is not terminating. recheck is when the answer changes
// by itself (the lease expires); zero when nothing but a write can change it. why says why there is no
// holder pod, for logs.
func Holder(l *coordinationv1.Lease, pods func(name string) *corev1.Pod, svc *corev1.Service, now time.Time, margin time.Duration) (holder *corev1.Pod, recheck time.Time, why string) {
	if l == nil {
		return nil, time.Time{}, "the lease does not exist"
	}
	j := leaseapi.Judge(&l.Spec, now, margin)
	if j.State != lease.Held {
		return nil, time.Time{}, "the lease is " + j.State.String()
	}
	podName, rest, ok := lease.ParseIdentity(j.Holder)
	if !ok {
		return nil, j.ExpiresAt, fmt.Sprintf("the holder %q is not a pod's identity", j.Holder)
	}
	pod := pods(podName)
	switch {
	case pod == nil:
		return nil, j.ExpiresAt, "the holder's pod " + podName + " is not an injected pod of this namespace"
	case l.Labels[contract.Managed] == "true" && string(pod.UID) != rest:
		// On leases leasegate manages the identity is <pod>_<uid>: a recreated pod of the same name is
		// not the holder.
		return nil, j.ExpiresAt, "the holder names an earlier pod called " + podName
	case !k8slabels.SelectorFromSet(svc.Spec.Selector).Matches(k8slabels.Set(pod.Labels)):
		return nil, j.ExpiresAt, "the holder's pod " + podName + " is not selected by the Service"
	case pod.DeletionTimestamp != nil:
		return nil, j.ExpiresAt, "the holder's pod " + podName + " is terminating"
	case podAddress(pod, addressType(svc)) == "":
		return nil, j.ExpiresAt, "the holder's pod " + podName + " has no address yet"
	}
	return pod, j.ExpiresAt, ""
}

// Slice is the companion's EndpointSlice: the holder's address with svc's ports resolved on it, or no
// endpoint at all when holder is nil. The slice is named after the companion and owned by it.
func Slice(svc, companion *corev1.Service, holder *corev1.Pod) *discoveryv1.EndpointSlice {
	family := addressType(svc)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: companion.Namespace, Name: companion.Name,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: companion.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
				contract.LeaderOf:            svc.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: companion.Name, UID: companion.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		AddressType: family,
		Endpoints:   []discoveryv1.Endpoint{},
		Ports:       []discoveryv1.EndpointPort{},
	}
	if holder == nil {
		return slice
	}
	for _, p := range svc.Spec.Ports {
		if port, ok := resolvePort(p, holder); ok {
			slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
				Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(port), AppProtocol: p.AppProtocol,
			})
		}
	}
	if len(slice.Ports) == 0 {
		return slice // none of the Service's ports exists on the holder: nothing to route to
	}
	ready := isReady(holder)
	slice.Endpoints = []discoveryv1.Endpoint{{
		Addresses:  []string{podAddress(holder, family)},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: holder.Namespace, Name: holder.Name, UID: holder.UID},
		NodeName:   nonEmpty(holder.Spec.NodeName),
	}}
	return slice
}

// resolvePort is the holder's port for a Service port, as the endpoint controllers resolve it
// (podutil.FindPort): a named targetPort is looked up among the containers' ports, then the native
// sidecars' (a gated pod's named port is on the agent), a port the pod lacks is left out; a number is
// itself, and no targetPort is the Service port.
func resolvePort(p corev1.ServicePort, pod *corev1.Pod) (int32, bool) {
	switch {
	case p.TargetPort.Type == intstr.String && p.TargetPort.StrVal != "":
		for _, c := range pod.Spec.Containers {
			if port, ok := namedPort(c, p); ok {
				return port, true
			}
		}
		for _, c := range pod.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				if port, ok := namedPort(c, p); ok {
					return port, true
				}
			}
		}
		return 0, false
	case p.TargetPort.IntValue() > 0:
		return int32(p.TargetPort.IntValue()), true
	}
	return p.Port, true
}

// namedPort is c's port that p's targetPort names, with p's protocol.
func namedPort(c corev1.Container, p corev1.ServicePort) (int32, bool) {
	for _, cp := range c.Ports {
		if cp.Name == p.TargetPort.StrVal && cp.Protocol == p.Protocol {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// addressType is the family of svc's first IP (IPv4 unless the Service says otherwise).
func addressType(svc *corev1.Service) discoveryv1.AddressType {
	if len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// podAddress is the pod's IP of family, "" when it has none yet.
func podAddress(pod *corev1.Pod, family discoveryv1.AddressType) string {
	for _, ip := range pod.Status.PodIPs {
		if strings.Contains(ip.IP, ":") == (family == discoveryv1.AddressTypeIPv6) {
			return ip.IP
		}
	}
	if ip := pod.Status.PodIP; ip != "" && strings.Contains(ip, ":") == (family == discoveryv1.AddressTypeIPv6) {
		return ip
	}
	return ""
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
