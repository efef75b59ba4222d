package fence

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

func TestDecideEviction(t *testing.T) {
	held := heldLease("shop", "scheduler", lease.Identity("scheduler-a", "uid-a"), 2*time.Second, true)
	expired := heldLease("shop", "scheduler", lease.Identity("scheduler-a", "uid-a"), 20*time.Second, true)
	takenOver := heldLease("shop", "scheduler", lease.Identity("scheduler-b", "uid-b"), time.Second, true)
	// A MultiClusterLease whose status names scheduler-a as global leader, valid for another second or
	// past its validUntil, and one naming the leader of another cluster.
	globalLeader := func(holder, cluster string, validFor time.Duration) *v1alpha1.MultiClusterLease {
		return &v1alpha1.MultiClusterLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "scheduler"},
			Status: v1alpha1.MultiClusterLeaseStatus{
				GlobalHolder: holder, HolderCluster: cluster, ValidUntil: &metav1.MicroTime{Time: now.Add(validFor)},
			},
		}
	}
	leadsGlobally := globalLeader(lease.Identity("scheduler-a", "uid-a"), "a", time.Second)
	pastValidUntil := globalLeader(lease.Identity("scheduler-a", "uid-a"), "a", -time.Millisecond)
	leadsElsewhere := globalLeader(lease.Identity("scheduler-z", "uid-z"), "b", time.Second)
	type leaseArg struct {
		l *coordinationv1.Lease
		m *v1alpha1.MultiClusterLease
	}
	tests := []struct {
		name      string
		requester *Requester
		pod, uid  string
		lease     leaseArg
		want      Reason
		outcome   Outcome
	}{
		{"a pod that lost its lease to another evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{l: takenOver}, EvictsSelf, Allowed},
		{"a pod whose lease expired evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{l: expired}, EvictsSelf, Allowed},
		{"a pod whose lease is gone evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{}, EvictsSelf, Allowed},
		{"the leader may not evict itself while it holds the lease", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{l: held}, EvictsWhileHolding, Denied},
		{"a replica may not evict the leader", pod("shop", "scheduler", "scheduler-b", "uid-b"), "scheduler-a", "uid-a", leaseArg{l: held}, EvictsOther, Denied},
		{"a replica may not evict a follower either", pod("shop", "scheduler", "scheduler-b", "uid-b"), "scheduler-c", "uid-c", leaseArg{l: held}, EvictsOther, Denied},
		{"a recreated pod with the same name is another pod", pod("shop", "scheduler", "scheduler-a", "uid-new"), "scheduler-a", "uid-a", leaseArg{l: takenOver}, EvictsOther, Denied},
		{"the global leader may not evict itself while this cluster's status names it", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{m: leadsGlobally}, EvictsWhileHolding, Denied},
		{"a global leader past its validUntil has lost and evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{m: pastValidUntil}, EvictsSelf, Allowed},
		{"a pod whose cluster lost the global lease evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{m: leadsElsewhere}, EvictsSelf, Allowed},
		{"a replica may not evict the global leader", pod("shop", "scheduler", "scheduler-b", "uid-b"), "scheduler-a", "uid-a", leaseArg{m: leadsGlobally}, EvictsOther, Denied},
		{"people and controllers are left to RBAC", &Requester{Username: "jane@example.com"}, "scheduler-a", "uid-a", leaseArg{l: held}, NotGated, Allowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideEviction(&Eviction{Requester: tt.requester, PodName: tt.pod, PodUID: tt.uid, Lease: tt.lease.l, MultiClusterLease: tt.lease.m}, now, time.Second)
			if got.Reason != tt.want || got.Outcome != tt.outcome {
				t.Errorf("DecideEviction() = %s (%s), want %s (%s)", got.Reason.Code(), got.Outcome, tt.want.Code(), tt.outcome)
			}
		})
	}
}
