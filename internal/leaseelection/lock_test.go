package leaseelection

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// What the two kinds tell the elector apart on: a Lease honours handovers, is fenced by its transitions
// and leads on its renewals alone; a MultiClusterLease ignores handovers, is fenced by the controller's
// term and leads only while an answer to one of its heartbeats names it. Each words its own step-downs.
func TestLocksDifferOnlyWhereTheirKindsDo(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	l := &Lease{
		Generation:  6,
		Annotations: map[string]string{contract.HandoverFrom: "a-0_ua"},
		Spec:        lease.Spec{HolderIdentity: "a-0_ua", LeaseDurationSeconds: 5, LeaseTransitions: 3},
		Global:      &GlobalAnswer{Holder: "a-0_ua", ObservedGeneration: 6, FencingToken: 41},
	}

	t.Run("Lease", func(t *testing.T) {
		lock := LeaseLock{}
		if h, ok := lock.handover(l); !ok || h.From != "a-0_ua" {
			t.Errorf("handover = %+v, %v: a Lease's handover is honoured", h, ok)
		}
		s := lease.Status{Holder: "a-0_ua", IsLeader: true}
		lock.describe(&s, l, "a-0_ua", 2*time.Second, clock)
		if s.FencingToken != 3 || s.Handover == nil || s.GlobalHolder != "" || !s.IsLeader {
			t.Errorf("status %+v: want fencing token 3 (the transitions), the handover, no global holder, leading", s)
		}
		if lock.answersHolder() {
			t.Error("a Lease carries no answers to its holder's writes")
		}
		if _, bounded := lock.termEnd(); bounded {
			t.Error("a Lease's holder leads on its renewals alone")
		}
		if got, want := lock.termLapsed("", "a-0_ua", 2*time.Second), "could not renew for the renew deadline (2s)"; got != want {
			t.Errorf("termLapsed = %q, want %q: a Lease's term is its renewals", got, want)
		}
		if got := lock.steppedDownWithoutLeading(); got != "Stopped leading" {
			t.Errorf("steppedDownWithoutLeading = %q: holding a Lease is leading it", got)
		}
	})

	t.Run("MultiClusterLease", func(t *testing.T) {
		lock := &MultiClusterLeaseLock{}
		if h, ok := lock.handover(l); ok {
			t.Errorf("handover = %+v: a MultiClusterLease has none", h)
		}
		lock.wrote(l, clock.Now())
		s := lease.Status{Holder: "a-0_ua", IsLeader: true}
		lock.describe(&s, l, "a-0_ua", 2*time.Second, clock)
		if s.FencingToken != 41 || s.Handover != nil || s.GlobalHolder != "a-0_ua" || !s.IsLeader {
			t.Errorf("status %+v: want the controller's fencing token 41, no handover, global holder a-0_ua, leading", s)
		}
		if !lock.answersHolder() {
			t.Error("a MultiClusterLease's status answers its holder's heartbeats")
		}
		if until, bounded := lock.termEnd(); !bounded || until != clock.Now().Add(2*time.Second).UnixNano() {
			t.Errorf("termEnd = %d, %v: want the renew deadline after the confirmed heartbeat", until, bounded)
		}
		lock.forgetTerm()
		if until, _ := lock.termEnd(); until != 0 || len(lock.writes) != 0 {
			t.Errorf("after forgetTerm: term ends %d, %d heartbeats kept", until, len(lock.writes))
		}
		s = lease.Status{Holder: "a-0_ua", IsLeader: true}
		lock.describe(&s, l, "a-0_ua", 2*time.Second, clock)
		if s.IsLeader {
			t.Error("an answer to no heartbeat of this elector's term confirmed it")
		}
		for _, tt := range []struct{ globalHolder, want string }{
			{"b-0_ub", `the election controller names "b-0_ub" as the global leader`},
			{"", `the election controller names "" as the global leader`},
			{"a-0_ua", "no heartbeat was confirmed for the renew deadline (2s)"},
		} {
			if got := lock.termLapsed(tt.globalHolder, "a-0_ua", 2*time.Second); got != tt.want {
				t.Errorf("termLapsed with global holder %q = %q, want %q", tt.globalHolder, got, tt.want)
			}
		}
		if got := lock.steppedDownWithoutLeading(); got != "Stopped standing for the global term" {
			t.Errorf("steppedDownWithoutLeading = %q: an unconfirmed candidate only stood for the global term", got)
		}
	})
}
