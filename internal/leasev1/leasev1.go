// Package leasev1 reads coordination.k8s.io/v1 Leases as package lease's plain values. It is apart from
// package lease so that the agent, which reads and writes Leases with lease's own small types, never
// links the Kubernetes API types; the webhook and the plugin, which hold k8s.io/api Leases from their
// caches, judge them through SpecOf.
package leasev1

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leasegate/leasegate/internal/lease"
)

// SpecOf is spec as lease.Judge reads it. It copies five fields and does not allocate: the fence calls it
// on every guarded write.
func SpecOf(spec *coordinationv1.LeaseSpec) lease.Spec {
	var s lease.Spec
	if spec.HolderIdentity != nil {
		s.HolderIdentity = *spec.HolderIdentity
	}
	if spec.LeaseDurationSeconds != nil {
		s.LeaseDurationSeconds = *spec.LeaseDurationSeconds
	}
	if spec.AcquireTime != nil {
		s.AcquireTime = lease.MicroTime{Time: spec.AcquireTime.Time}
	}
	if spec.RenewTime != nil {
		s.RenewTime = lease.MicroTime{Time: spec.RenewTime.Time}
	}
	if spec.LeaseTransitions != nil {
		s.LeaseTransitions = *spec.LeaseTransitions
	}
	return s
}

// Judge judges a Lease's spec at now: lease.Judge over SpecOf.
func Judge(spec *coordinationv1.LeaseSpec, now time.Time, clockSkewMargin time.Duration) lease.Judgement {
	s := SpecOf(spec)
	return lease.Judge(&s, now, clockSkewMargin)
}
