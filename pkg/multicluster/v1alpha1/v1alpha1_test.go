package v1alpha1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestLocalLeader(t *testing.T) {
	until := func(d time.Duration) *metav1.MicroTime { return &metav1.MicroTime{Time: now.Add(d)} }
	tests := []struct {
		name   string
		status MultiClusterLeaseStatus
		want   string
	}{
		{"the local global leader before validUntil", MultiClusterLeaseStatus{GlobalHolder: "a-0", ValidUntil: until(time.Millisecond)}, "a-0"},
		{"nobody at validUntil: the deadline is exclusive", MultiClusterLeaseStatus{GlobalHolder: "a-0", ValidUntil: until(0)}, ""},
		{"nobody past validUntil, though status still names the holder", MultiClusterLeaseStatus{GlobalHolder: "a-0", ValidUntil: until(-time.Second)}, ""},
		{"nobody here when the leader is in another cluster (no validUntil)", MultiClusterLeaseStatus{GlobalHolder: "b-0", HolderCluster: "b"}, ""},
		{"nobody when nobody leads", MultiClusterLeaseStatus{ValidUntil: until(time.Second)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.status.LocalLeader(now); got != tt.want {
				t.Errorf("LocalLeader() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConfirms(t *testing.T) {
	tests := []struct {
		name                string
		status              MultiClusterLeaseStatus
		generation          int64
		confirmed, answered bool
	}{
		{"an answer to this heartbeat naming the candidate", MultiClusterLeaseStatus{GlobalHolder: "a-0", ObservedGeneration: 7}, 7, true, true},
		{"an answer to a later heartbeat confirms this one too", MultiClusterLeaseStatus{GlobalHolder: "a-0", ObservedGeneration: 8}, 7, true, true},
		{"an answer to an earlier heartbeat confirms nothing", MultiClusterLeaseStatus{GlobalHolder: "a-0", ObservedGeneration: 6}, 7, false, false},
		{"an answer naming another leader", MultiClusterLeaseStatus{GlobalHolder: "b-0", ObservedGeneration: 7}, 7, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			confirmed, answered := tt.status.Confirms("a-0", tt.generation)
			if confirmed != tt.confirmed || answered != tt.answered {
				t.Errorf("Confirms() = %v, %v; want %v, %v", confirmed, answered, tt.confirmed, tt.answered)
			}
		})
	}
}

func TestTimingMargins(t *testing.T) {
	// A 5 s TTL: the candidate acts at most 4.5 s after the write the controller confirmed; the fence, which
	// reads the controller's clock, a further clock skew margin less.
	if got := ConfirmedFor(5); got != 4500*time.Millisecond {
		t.Errorf("ConfirmedFor(5) = %s, want 4.5s", got)
	}
	if got := ValidFor(5, time.Second); got != 3500*time.Millisecond {
		t.Errorf("ValidFor(5, 1s) = %s, want 3.5s", got)
	}
	if got := ValidFor(1, time.Second); got > 0 {
		t.Errorf("ValidFor(1, 1s) = %s: a TTL shorter than its margins must leave no time to act", got)
	}
}

// TestDeepCopy fills every field and checks the copy is equal and shares no memory with the original, so
// a field added to types.go without its deep copy (make generate) fails here.
func TestDeepCopy(t *testing.T) {
	in := &MultiClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Labels: map[string]string{"a": "b"}},
		Spec: MultiClusterLeaseSpec{
			HolderIdentity: ptr.To("a-0"), LeaseDurationSeconds: ptr.To[int32](5),
			AcquireTime: &metav1.MicroTime{Time: now}, RenewTime: &metav1.MicroTime{Time: now}, LeaseTransitions: ptr.To[int32](2),
		},
		Status: MultiClusterLeaseStatus{
			GlobalHolder: "a-0", HolderCluster: "a", AcquireTime: &metav1.MicroTime{Time: now}, FencingToken: 42,
			ValidUntil: &metav1.MicroTime{Time: now}, ObservedGeneration: 3,
			Conditions: []metav1.Condition{{Type: ConditionLeading, Status: metav1.ConditionTrue}},
		},
	}
	out := in.DeepCopy()
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("DeepCopy() = %+v, want %+v", out, in)
	}
	*out.Spec.HolderIdentity, *out.Spec.LeaseDurationSeconds, *out.Spec.LeaseTransitions = "x", 9, 9
	out.Spec.RenewTime.Time, out.Status.ValidUntil.Time, out.Status.AcquireTime.Time = time.Time{}, time.Time{}, time.Time{}
	out.Spec.AcquireTime.Time = time.Time{}
	out.Status.Conditions[0].Reason = "changed"
	out.Labels["a"] = "c"
	if *in.Spec.HolderIdentity != "a-0" || *in.Spec.LeaseDurationSeconds != 5 || *in.Spec.LeaseTransitions != 2 ||
		!in.Spec.RenewTime.Equal(&metav1.MicroTime{Time: now}) || !in.Spec.AcquireTime.Equal(&metav1.MicroTime{Time: now}) ||
		!in.Status.ValidUntil.Equal(&metav1.MicroTime{Time: now}) || !in.Status.AcquireTime.Equal(&metav1.MicroTime{Time: now}) ||
		in.Status.Conditions[0].Reason != "" || in.Labels["a"] != "b" {
		t.Errorf("changing the copy changed the original: %+v", in)
	}
	list := &MultiClusterLeaseList{Items: []MultiClusterLease{*in}}
	if got := list.DeepCopy(); !reflect.DeepEqual(got, list) || &got.Items[0] == &list.Items[0] {
		t.Errorf("MultiClusterLeaseList.DeepCopy() = %+v", got)
	}
}
