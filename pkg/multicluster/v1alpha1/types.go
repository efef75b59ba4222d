// Package v1alpha1 is the MultiClusterLease API: one leader across clusters, elected on a global backend
// by leasegate's election controller in each cluster.
//
// The spec is the local election, written by candidates exactly like a coordination.k8s.io/v1 Lease
// (compare-and-swap on resourceVersion), so the replicas in one cluster settle on one local candidate.
// The status is written only by the election controller, through the /status subresource: who leads
// globally, the fencing token of that term, and until when the local leader may act.
//
// The package depends on apimachinery, not client-go: a program that reads the API, as the fence does, or
// registers it in a scheme gets the types without a client.
//
// +kubebuilder:object:generate=true
// +groupName=leasegate.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leasegate/leasegate/internal/contract"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: contract.MultiClusterLeaseGroup, Version: contract.MultiClusterLeaseVersion}

const (
	// Kind and Resource name the API in RBAC, webhooks and REST paths.
	Kind     = contract.LeaseKindMultiClusterLease
	Resource = contract.MultiClusterLeaseResource
	// MinLeaseDurationSeconds is the shortest lease duration a candidate may claim with (the CRD's
	// validation says so too): the lease duration is the global backend's TTL.
	MinLeaseDurationSeconds = 2
)

// Condition types the election controller sets.
const (
	// ConditionLeading is True while a candidate of this cluster holds the global lease.
	ConditionLeading = "Leading"
	// ConditionBackendReachable is False when the controller could not reach the global backend at its
	// last attempt: a leader in this cluster then stops at validUntil, and no candidate here can win.
	ConditionBackendReachable = "BackendReachable"
)

// MultiClusterLease is a leader election across clusters.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type MultiClusterLease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MultiClusterLeaseSpec   `json:"spec,omitempty"`
	Status MultiClusterLeaseStatus `json:"status,omitempty"`
}

// MultiClusterLeaseSpec is the local election: the candidate that leads this cluster's replicas, and its
// heartbeat. Its fields mean what a Lease's do; every renewal changes renewTime and so bumps the object's
// generation, which the controller confirms in status.observedGeneration.
type MultiClusterLeaseSpec struct {
	// HolderIdentity is the local candidate, "" when released.
	HolderIdentity *string `json:"holderIdentity,omitempty"`
	// LeaseDurationSeconds is how long the local candidate's claim lasts without a renewal; the controller
	// also uses it as the global backend's lease TTL.
	LeaseDurationSeconds *int32 `json:"leaseDurationSeconds,omitempty"`
	// AcquireTime is when the local candidate took the local election.
	AcquireTime *metav1.MicroTime `json:"acquireTime,omitempty"`
	// RenewTime is the local candidate's last heartbeat.
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`
	// LeaseTransitions counts changes of local candidate.
	LeaseTransitions *int32 `json:"leaseTransitions,omitempty"`
}

// MultiClusterLeaseStatus is the global outcome as this cluster's election controller last confirmed it.
type MultiClusterLeaseStatus struct {
	// GlobalHolder is the identity of the candidate that leads across clusters, "" when nobody does.
	GlobalHolder string `json:"globalHolder,omitempty"`
	// HolderCluster is the name of the cluster whose candidate leads.
	HolderCluster string `json:"holderCluster,omitempty"`
	// AcquireTime is when the global leader's term began, on this controller's clock.
	AcquireTime *metav1.MicroTime `json:"acquireTime,omitempty"`
	// FencingToken identifies the global leader's term: the create revision of the leader's key in the
	// backend, unique per term and only ever growing. Downstream systems may refuse writes carrying a
	// token lower than one they have seen.
	FencingToken int64 `json:"fencingToken,omitempty"`
	// ValidUntil is set only while the global leader is this cluster's candidate: the instant it must stop
	// acting, even if it hears nothing more. It is the last backend confirmation's send time plus the
	// backend TTL minus a safety margin, so a leader here always stops before another cluster can win.
	ValidUntil *metav1.MicroTime `json:"validUntil,omitempty"`
	// ObservedGeneration is the spec generation (the candidate heartbeat) this status confirms.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Leading, BackendReachable.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MultiClusterLeaseList is a list of MultiClusterLeases.
//
// +kubebuilder:object:root=true
type MultiClusterLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MultiClusterLease `json:"items"`
}

// AddToScheme registers the API's types.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &MultiClusterLease{}, &MultiClusterLeaseList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
