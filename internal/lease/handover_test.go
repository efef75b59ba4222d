package lease

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/contract"
)

// annotatedLease is the part of a Lease the handover rules read.
type annotatedLease struct {
	Annotations map[string]string
	Spec        Spec
}

func TestHandoverBars(t *testing.T) {
	// released is the lease as its holder a-0 left it when asked to hand over: empty holder, its
	// 15 s duration kept, renewTime the instant of the release.
	released := func(to string) *annotatedLease {
		l := &annotatedLease{Annotations: map[string]string{contract.HandoverFrom: "a-0_uid-a"}}
		if to != "" {
			l.Annotations[contract.HandoverTo] = to
		}
		l.Spec = *spec("", 15)
		return l
	}
	tests := []struct {
		name       string
		lease      *annotatedLease
		identity   string
		now        time.Time
		wantBarred bool
	}{
		{name: "the pod that stepped down may not take it back at once", lease: released(""), identity: "a-0_uid-a", now: renewed.Add(time.Second), wantBarred: true},
		{name: "without a target any other candidate may take it", lease: released(""), identity: "b-0_uid-b", now: renewed.Add(time.Second)},
		{name: "the named target may take it", lease: released("c-0"), identity: "c-0_uid-c", now: renewed.Add(time.Second)},
		{name: "a candidate that is not the target is barred", lease: released("c-0"), identity: "b-0_uid-b", now: renewed.Add(time.Second), wantBarred: true},
		{name: "the clock skew margin extends the bar", lease: released("c-0"), identity: "b-0_uid-b", now: renewed.Add(15500 * time.Millisecond), wantBarred: true},
		{name: "once the released lease would have expired anyone may take it", lease: released("c-0"), identity: "b-0_uid-b", now: renewed.Add(16 * time.Second)},
		{name: "a held lease is not the request's to bar", lease: func() *annotatedLease {
			l := released("c-0")
			l.Spec = *spec("a-0_uid-a", 15)
			return l
		}(), identity: "b-0_uid-b", now: renewed.Add(time.Second)},
		{name: "no request bars nobody", lease: &annotatedLease{Spec: *spec("", 15)}, identity: "b-0_uid-b", now: renewed.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := HandoverOf(tt.lease.Annotations)
			until, barred := h.Bars(Judge(&tt.lease.Spec, tt.now, time.Second), &tt.lease.Spec, tt.identity, tt.now, time.Second)
			if barred != tt.wantBarred {
				t.Fatalf("barred = %v, want %v", barred, tt.wantBarred)
			}
			if barred && !until.Equal(renewed.Add(16*time.Second)) {
				t.Errorf("bar lifts at %s, want when the released lease would expire, %s", until, renewed.Add(16*time.Second))
			}
		})
	}
}

func TestHandoverAsksToStepDown(t *testing.T) {
	l := &annotatedLease{Annotations: map[string]string{contract.HandoverFrom: "a-0_uid-a", contract.HandoverTo: "c-0"}}
	h, ok := HandoverOf(l.Annotations)
	if !ok || !h.AsksToStepDown("a-0_uid-a") || h.AsksToStepDown("a-0_uid-other") || h.To != "c-0" {
		t.Fatalf("HandoverOf = %+v, %v: want a request from a-0_uid-a (and only that incarnation) to c-0", h, ok)
	}
	ClearHandover(l.Annotations)
	if _, ok := HandoverOf(l.Annotations); ok || len(l.Annotations) != 0 {
		t.Fatalf("ClearHandover left %v", l.Annotations)
	}
}

func TestTakeoverOf(t *testing.T) {
	handedOver := &annotatedLease{Annotations: map[string]string{contract.HandoverFrom: "a-0_uid-a"}, Spec: *spec("", 15)}
	tests := []struct {
		name     string
		lease    *annotatedLease
		now      time.Time
		identity string
		want     Takeover
		wantOK   bool
	}{
		{name: "a released lease was left gracefully", lease: &annotatedLease{Spec: *spec("", 15)}, now: renewed.Add(time.Second), identity: "b-0_uid-b", want: TakeoverGraceful, wantOK: true},
		{name: "a lease released on a handover request was handed over", lease: handedOver, now: renewed.Add(time.Second), identity: "b-0_uid-b", want: TakeoverHandover, wantOK: true},
		{name: "an expired lease of another holder is a crash", lease: &annotatedLease{Spec: *spec("a-0_uid-a", 15)}, now: renewed.Add(17 * time.Second), identity: "b-0_uid-b", want: TakeoverCrash, wantOK: true},
		{name: "its own expired lease, taken back, is no takeover", lease: &annotatedLease{Spec: *spec("b-0_uid-b", 15)}, now: renewed.Add(17 * time.Second), identity: "b-0_uid-b"},
		{name: "its own lease still in force, resumed after a restart, is no takeover", lease: &annotatedLease{Spec: *spec("b-0_uid-b", 15)}, now: renewed.Add(time.Second), identity: "b-0_uid-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := TakeoverOf(tt.lease.Annotations, Judge(&tt.lease.Spec, tt.now, time.Second), tt.identity)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("TakeoverOf = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
