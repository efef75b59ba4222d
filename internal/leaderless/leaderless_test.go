package leaderless

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaderless(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l := func(name, holder string, durationSeconds int32, renewedAgo time.Duration) coordinationv1.Lease {
		lease := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
		if renewedAgo >= 0 {
			lease.Spec = coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(durationSeconds),
				RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)},
			}
		}
		return lease
	}
	leases := []coordinationv1.Lease{
		l("held", "a_1", 15, 2*time.Second),
		l("never-taken", "", 0, -1),
		l("just-expired", "a_1", 4, 6*time.Second),      // expired 1s ago (4s + 1s margin), budget 5s
		l("expired-long-ago", "a_1", 4, 20*time.Second), // free for 15s > 5s
		l("slow-reconciler", "a_1", 60, 90*time.Second), // free for 29s < 61s
		l("released-and-left", "", 1, 10*time.Second),   // released 10s ago > 2s
		l("just-released", "", 1, time.Second),
	}
	got := leaderless(leases, now, time.Second)
	want := []leaderlessLease{{"shop", "expired-long-ago", 15}, {"shop", "released-and-left", 10}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("leaderless() = %+v, want %+v: each lease judged against its own budget", got, want)
	}
}
