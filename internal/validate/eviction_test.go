package validate

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
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
		// Drain tools evict from pods of their own, with service accounts leasegate never granted anything.
		{"cluster-autoscaler draining a node evicts the leader", pod("kube-system", "cluster-autoscaler", "cluster-autoscaler-7d9f", "uid-ca"), "scheduler-a", "uid-a", leaseArg{l: held}, NotGated, Allowed},
		{"Karpenter consolidating a node evicts the leader", pod("karpenter", "karpenter", "karpenter-5c8b", "uid-k"), "scheduler-a", "uid-a", leaseArg{l: held}, NotGated, Allowed},
		{"the descheduler evicts a follower", pod("kube-system", "descheduler", "descheduler-29a", "uid-d"), "scheduler-c", "uid-c", leaseArg{l: held}, NotGated, Allowed},
		{"kured rebooting a node evicts the leader", pod("kube-system", "kured", "kured-x2x", "uid-r"), "scheduler-a", "uid-a", leaseArg{l: held}, NotGated, Allowed},
		{"kubectl drain from a CI pod in the same namespace evicts the leader", pod("shop", "ci-runner", "ci-runner-1", "uid-ci"), "scheduler-a", "uid-a", leaseArg{l: held}, NotGated, Allowed},
		{"a pod of another namespace whose service account has the same name is another account", pod("tools", "scheduler", "scheduler-b", "uid-b"), "scheduler-a", "uid-a", leaseArg{l: held}, NotGated, Allowed},
		{"another workload sharing the evicted pod's service account is judged as a replica", pod("shop", "scheduler", "reports-0", "uid-rep"), "scheduler-a", "uid-a", leaseArg{l: held}, EvictsOther, Denied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Eviction{Requester: tt.requester, PodNamespace: "shop", PodName: tt.pod, PodUID: tt.uid, ServiceAccount: "scheduler", Lease: keptOrNil(tt.lease.l), MultiClusterLease: tt.lease.m}
			got := DecideEviction(e, now, time.Second)
			if got.Reason != tt.want || got.Outcome != tt.outcome {
				t.Errorf("DecideEviction() = %s (%s), want %s (%s)", got.Reason.Code(), got.Outcome, tt.want.Code(), tt.outcome)
			}
		})
	}
}

func TestDecideEvictionReadsAnUnsetServiceAccountAsDefault(t *testing.T) {
	held := heldLease("shop", "scheduler", lease.Identity("scheduler-a", "uid-a"), 2*time.Second, true)
	e := &Eviction{Requester: pod("shop", "default", "scheduler-b", "uid-b"), PodNamespace: "shop", PodName: "scheduler-a", PodUID: "uid-a", Lease: leaseapi.Keep(held)}
	if got := DecideEviction(e, now, time.Second); got.Reason != EvictsOther {
		t.Errorf("a replica running as the default account evicting a pod without serviceAccountName: %s, want %s", got.Reason.Code(), EvictsOther.Code())
	}
}

// The replicas of a lease may run as several service accounts; leasegate's Role lets each evict the
// lease's pods, so a candidate for the lease is judged whatever its account.
func TestDecideEvictionJudgesCandidatesOfTheLeaseOnAnyAccount(t *testing.T) {
	held := heldLease("shop", "scheduler", lease.Identity("scheduler-a", "uid-a"), 2*time.Second, true)
	e := &Eviction{Requester: pod("shop", "scheduler-canary", "scheduler-c", "uid-c"), PodNamespace: "shop", PodName: "scheduler-a", PodUID: "uid-a",
		ServiceAccount: "scheduler", Lease: leaseapi.Keep(held), RequesterIsCandidate: true}
	if got := DecideEviction(e, now, time.Second); got.Reason != EvictsOther {
		t.Errorf("a candidate on another account evicting the leader: %s, want %s", got.Reason.Code(), EvictsOther.Code())
	}
	e.RequesterIsCandidate = false
	if got := DecideEviction(e, now, time.Second); got.Reason != NotGated {
		t.Errorf("a pod on another account that is no candidate: %s, want %s", got.Reason.Code(), NotGated.Code())
	}
}

// keptOrNil is l as the lease cache keeps it; nil for no lease.
func keptOrNil(l *coordinationv1.Lease) *leaseapi.Kept {
	if l == nil {
		return nil
	}
	return leaseapi.Keep(l)
}
