// Code written in the shape controller-gen generates; keep it in step with types.go by hand (the
// round-trip test in deepcopy_test.go fails when a field is missed).

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies the receiver into out.
func (in *MultiClusterLease) DeepCopyInto(out *MultiClusterLease) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy copies the receiver.
func (in *MultiClusterLease) DeepCopy() *MultiClusterLease {
	if in == nil {
		return nil
	}
	out := new(MultiClusterLease)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies the receiver as a runtime.Object.
func (in *MultiClusterLease) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the receiver into out.
func (in *MultiClusterLeaseSpec) DeepCopyInto(out *MultiClusterLeaseSpec) {
	*out = *in
	if in.HolderIdentity != nil {
		out.HolderIdentity = new(string)
		*out.HolderIdentity = *in.HolderIdentity
	}
	if in.LeaseDurationSeconds != nil {
		out.LeaseDurationSeconds = new(int32)
		*out.LeaseDurationSeconds = *in.LeaseDurationSeconds
	}
	if in.AcquireTime != nil {
		out.AcquireTime = in.AcquireTime.DeepCopy()
	}
	if in.RenewTime != nil {
		out.RenewTime = in.RenewTime.DeepCopy()
	}
	if in.LeaseTransitions != nil {
		out.LeaseTransitions = new(int32)
		*out.LeaseTransitions = *in.LeaseTransitions
	}
}

// DeepCopyInto copies the receiver into out.
func (in *MultiClusterLeaseStatus) DeepCopyInto(out *MultiClusterLeaseStatus) {
	*out = *in
	if in.AcquireTime != nil {
		out.AcquireTime = in.AcquireTime.DeepCopy()
	}
	if in.ValidUntil != nil {
		out.ValidUntil = in.ValidUntil.DeepCopy()
	}
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopyInto copies the receiver into out.
func (in *MultiClusterLeaseList) DeepCopyInto(out *MultiClusterLeaseList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]MultiClusterLease, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy copies the receiver.
func (in *MultiClusterLeaseList) DeepCopy() *MultiClusterLeaseList {
	if in == nil {
		return nil
	}
	out := new(MultiClusterLeaseList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject copies the receiver as a runtime.Object.
func (in *MultiClusterLeaseList) DeepCopyObject() runtime.Object { return in.DeepCopy() }
