package lease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

func TestConfirmedUntil(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	writes := []heartbeat{{generation: 4, started: t0}, {generation: 5, started: t0.Add(time.Second)}, {generation: 6, started: t0.Add(2 * time.Second)}}
	answer := func(holder string, observed int64) *coordinationv1.Lease {
		return asLease(&v1alpha1.MultiClusterLease{
			ObjectMeta: metav1.ObjectMeta{Generation: 6},
			Spec:       v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To("a-0"), LeaseDurationSeconds: ptr.To[int32](5)},
			Status:     v1alpha1.MultiClusterLeaseStatus{GlobalHolder: holder, ObservedGeneration: observed},
		})
	}
	tests := []struct {
		name   string
		lease  *coordinationv1.Lease
		writes []heartbeat
		want   time.Time
	}{
		{"an answer to the latest write: its start plus 90% of the TTL", answer("a-0", 6), writes, t0.Add(2*time.Second + 4500*time.Millisecond)},
		{"an answer to an earlier write counts from that write", answer("a-0", 5), writes, t0.Add(time.Second + 4500*time.Millisecond)},
		{"an answer to none of our writes grants nothing", answer("a-0", 3), writes, time.Time{}},
		{"an answer naming another candidate grants nothing", answer("b-0", 6), writes, time.Time{}},
		{"no writes, nothing to confirm", answer("a-0", 6), nil, time.Time{}},
		{"a plain Lease carries no answer", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](5)}}, writes, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := confirmedUntil(tt.lease, "a-0", tt.writes); !got.Equal(tt.want) {
				t.Errorf("confirmedUntil() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMultiClusterLeaseRoundTrip(t *testing.T) {
	m := &v1alpha1.MultiClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", ResourceVersion: "42", Annotations: map[string]string{"team": "shop"}},
		Spec: v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To("a-0"), LeaseDurationSeconds: ptr.To[int32](5),
			RenewTime: &metav1.MicroTime{Time: time.Unix(1, 0)}, LeaseTransitions: ptr.To[int32](3)},
		Status: v1alpha1.MultiClusterLeaseStatus{GlobalHolder: "b-0", ObservedGeneration: 9},
	}
	back := asMultiClusterLease(asLease(m))
	if back.ResourceVersion != "42" || *back.Spec.HolderIdentity != "a-0" || *back.Spec.LeaseTransitions != 3 || !back.Spec.RenewTime.Equal(m.Spec.RenewTime) {
		t.Errorf("the spec and the version for the compare-and-swap must survive the round trip: %+v", back)
	}
	if len(back.Annotations) != 1 || back.Annotations["team"] != "shop" {
		t.Errorf("only the user's annotations may be written back, got %v", back.Annotations)
	}
	if holder, observed, ok := globalAnswer(asLease(m)); !ok || holder != "b-0" || observed != 9 {
		t.Errorf("globalAnswer() = %q, %d, %v", holder, observed, ok)
	}
}
