package leaseapi

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

var renewed = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// The API's pointers read as lease's plain values: nil is the zero value, and the judgement is the same.
func TestJudge(t *testing.T) {
	tests := []struct {
		name string
		spec coordinationv1.LeaseSpec
		now  time.Time
		want lease.Judgement
	}{
		{"renewed within the duration and margin: held",
			coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-0_ua"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed},
				AcquireTime: &metav1.MicroTime{Time: renewed.Add(-time.Hour)}, LeaseTransitions: ptr.To[int32](3)},
			renewed.Add(15500 * time.Millisecond), lease.Judgement{Holder: "a-0_ua", State: lease.Held, ExpiresAt: renewed.Add(16 * time.Second)}},
		{"past duration and margin: expired", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-0_ua"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}},
			renewed.Add(16 * time.Second), lease.Judgement{Holder: "a-0_ua", State: lease.Expired, ExpiresAt: renewed.Add(16 * time.Second)}},
		{"a nil holder is released", coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}},
			renewed, lease.Judgement{State: lease.Released}},
		{"an empty holder is released", coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}},
			renewed, lease.Judgement{State: lease.Released}},
		{"no renew time: never renewed, expired", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-0_ua"), LeaseDurationSeconds: ptr.To[int32](15)},
			renewed, lease.Judgement{Holder: "a-0_ua", State: lease.Expired}},
		{"no duration: cannot be held, expired", coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-0_ua"), RenewTime: &metav1.MicroTime{Time: renewed}},
			renewed, lease.Judgement{Holder: "a-0_ua", State: lease.Expired}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Judge(&tt.spec, tt.now, time.Second); got != tt.want {
				t.Errorf("Judge() = %+v, want %+v", got, tt.want)
			}
			// A lease as a cache keeps it is judged the same.
			if got := Keep(&coordinationv1.Lease{Spec: tt.spec}).Judge(tt.now, time.Second); got != tt.want {
				t.Errorf("Keep().Judge() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Only the label's value "true" marks a lease as leasegate's, as provisioning writes it.
func TestKeepReadsTheManagedLabel(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"no labels", nil, false},
		{"the label true", map[string]string{contract.Managed: "true"}, true},
		{"the label false", map[string]string{contract.Managed: "false"}, false},
		{"the label empty", map[string]string{contract.Managed: ""}, false},
		{"other labels only", map[string]string{"app": "orders"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Keep(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}).Managed; got != tt.want {
				t.Errorf("Keep().Managed = %v, want %v", got, tt.want)
			}
		})
	}
}

// The fence judges a cached lease on every guarded write.
func TestKeptJudgeAllocatesNothing(t *testing.T) {
	k := Keep(&coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a_0f1e2d3c"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}})
	if n := testing.AllocsPerRun(100, func() { k.Judge(renewed, time.Second) }); n != 0 {
		t.Errorf("Kept.Judge allocates %v times per call, want 0", n)
	}
}

func BenchmarkKeptJudge(b *testing.B) {
	k := Keep(&coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a_0f1e2d3c"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}})
	now := renewed.Add(5 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if k.Judge(now, time.Second).State != lease.Held {
			b.Fatal("want held")
		}
	}
}

func BenchmarkJudge(b *testing.B) {
	spec := &coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a_0f1e2d3c"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}
	now := renewed.Add(5 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if Judge(spec, now, time.Second).State != lease.Held {
			b.Fatal("want held")
		}
	}
}
