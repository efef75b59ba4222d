package leaseapi

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
		})
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
