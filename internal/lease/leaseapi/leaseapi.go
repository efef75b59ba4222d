// Package leaseapi judges the Kubernetes API's own Lease type (k8s.io/api coordination/v1) with package
// lease's judgement. It is apart from package lease so that the agent, which reads and writes Leases with
// lease's own small types, never links the Kubernetes API types; the webhook and the plugin, which hold
// k8s.io/api Leases from their caches, judge them here.
package leaseapi

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// Judge is lease.Judge on a Lease's spec. It copies only the three fields the judgement reads, and does
// not allocate: the fence calls it on every guarded write.
func Judge(spec *coordinationv1.LeaseSpec, now time.Time, clockSkewMargin time.Duration) lease.Judgement {
	s := Spec(spec)
	return lease.Judge(&s, now, clockSkewMargin)
}

// Spec is the part of a Lease's spec that package lease judges: holder, duration and renew time. It
// returns a value, so it does not allocate.
func Spec(spec *coordinationv1.LeaseSpec) lease.Spec {
	var s lease.Spec
	if spec.HolderIdentity != nil {
		s.HolderIdentity = *spec.HolderIdentity
	}
	if spec.LeaseDurationSeconds != nil {
		s.LeaseDurationSeconds = *spec.LeaseDurationSeconds
	}
	if spec.RenewTime != nil {
		s.RenewTime = lease.MicroTime{Time: spec.RenewTime.Time}
	}
	return s
}

// Kept is a Lease as a cache keeps it for judging. What every judgement of it reads (the spec's three
// pointers, and whether leasegate manages it, a label) is taken from the object once, when the cache
// stores it, not on each of the many writes judged by it: reading them was a third of a fence decision.
type Kept struct {
	*coordinationv1.Lease
	// Judged is Spec(&Lease.Spec).
	Judged lease.Spec
	// Managed: the lease carries contract.Managed "true", so its holders are agent identities.
	Managed bool
}

// Keep reads l for judging. l must not change afterwards: a cache keeps each version of a lease as the
// watch decoded it.
func Keep(l *coordinationv1.Lease) *Kept {
	return &Kept{Lease: l, Judged: Spec(&l.Spec), Managed: l.Labels[contract.Managed] == "true"}
}

// Judge is lease.Judge on the kept lease.
func (k *Kept) Judge(now time.Time, clockSkewMargin time.Duration) lease.Judgement {
	return lease.Judge(&k.Judged, now, clockSkewMargin)
}
