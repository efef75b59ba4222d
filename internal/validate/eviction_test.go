package validate

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leasegate/leasegate/internal/lease"
)

func TestDecideEviction(t *testing.T) {
	held := heldLease("shop", "scheduler", lease.Identity("scheduler-a", "uid-a"), 2*time.Second, true)
	expired := heldLease("shop", "scheduler", lease.Identity("scheduler-a", "uid-a"), 20*time.Second, true)
	takenOver := heldLease("shop", "scheduler", lease.Identity("scheduler-b", "uid-b"), time.Second, true)
	type leaseArg struct{ l *coordinationv1.Lease }
	tests := []struct {
		name      string
		requester *Requester
		pod, uid  string
		lease     leaseArg
		want      Reason
		outcome   Outcome
	}{
		{"a pod that lost its lease to another evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{takenOver}, EvictsSelf, Allowed},
		{"a pod whose lease expired evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{expired}, EvictsSelf, Allowed},
		{"a pod whose lease is gone evicts itself", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{}, EvictsSelf, Allowed},
		{"the leader may not evict itself while it holds the lease", pod("shop", "scheduler", "scheduler-a", "uid-a"), "scheduler-a", "uid-a", leaseArg{held}, EvictsWhileHolding, Denied},
		{"a replica may not evict the leader", pod("shop", "scheduler", "scheduler-b", "uid-b"), "scheduler-a", "uid-a", leaseArg{held}, EvictsOther, Denied},
		{"a replica may not evict a follower either", pod("shop", "scheduler", "scheduler-b", "uid-b"), "scheduler-c", "uid-c", leaseArg{held}, EvictsOther, Denied},
		{"a recreated pod with the same name is another pod", pod("shop", "scheduler", "scheduler-a", "uid-new"), "scheduler-a", "uid-a", leaseArg{takenOver}, EvictsOther, Denied},
		{"people and controllers are left to RBAC", &Requester{Username: "jane@example.com"}, "scheduler-a", "uid-a", leaseArg{held}, NotGated, Allowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideEviction(&Eviction{Requester: tt.requester, PodName: tt.pod, PodUID: tt.uid, Lease: tt.lease.l}, now, time.Second)
			if got.Reason != tt.want || got.Outcome != tt.outcome {
				t.Errorf("DecideEviction() = %s (%s), want %s (%s)", got.Reason.Code(), got.Outcome, tt.want.Code(), tt.outcome)
			}
		})
	}
}
