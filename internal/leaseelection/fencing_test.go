package leaseelection

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// cuttableStore is one candidate's view of a shared lease: cut, its writes fail as if it were cut off
// from the API server (or frozen), while the others go on.
type cuttableStore struct {
	*memStore
	cut atomic.Bool
}

func (s *cuttableStore) Update(ctx context.Context, l *Lease) (*Lease, error) {
	if s.cut.Load() {
		return nil, statusErr(503, "ServiceUnavailable")
	}
	return s.memStore.Update(ctx, l)
}

// terms records, for each identity, the fencing tokens it led with, in order, and checks that every
// report an elector makes (leading or not) never shows a token lower than one it showed before.
type terms struct {
	t  *testing.T
	mu sync.Mutex
	// led are the tokens of each term, in the order the terms began: (identity, token).
	led  []term
	seen map[string]int64
}

type term struct {
	identity string
	token    int64
}

func (r *terms) elector(store Store, clock *clocktesting.FakeClock, identity string) (*Elector, context.CancelFunc) {
	r.t.Helper()
	var leading bool
	e, err := NewElector(Config{
		Lock: LeaseLock{store}, Namespace: "shop", Name: "orders", Identity: identity, Timing: testTiming,
		ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard(),
		OnChange: func(s lease.Status) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if last, ok := r.seen[identity]; ok && s.FencingToken < last {
				r.t.Errorf("%s reported fencing token %d after %d", identity, s.FencingToken, last)
			}
			r.seen[identity] = s.FencingToken
			if s.IsLeader && !leading {
				r.led = append(r.led, term{identity, s.FencingToken})
			}
			leading = s.IsLeader
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	stop := func() { cancel(); <-done }
	r.t.Cleanup(stop)
	return e, sync.OnceFunc(stop)
}

func (r *terms) terms() []term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]term(nil), r.led...)
}

// TestFencingTokenGrowsWithEveryAcquisition takes one lease through every way it changes hands: created,
// released on shutdown and taken, handed over, taken from a holder cut off past its expiry, taken by a
// pod restarted with the same name (a new UID, so a new identity), and resumed by an agent restarted in
// the same pod (its own term goes on). Every new holder's token is above every earlier term's, each
// holder's token equals the lease's leaseTransitions, and no elector ever reports a lower token than it
// did before.
func TestFencingTokenGrowsWithEveryAcquisition(t *testing.T) {
	shared, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	r := &terms{t: t, seen: map[string]int64{}}
	stores := map[string]*cuttableStore{}
	storeOf := func(identity string) *cuttableStore {
		s := &cuttableStore{memStore: shared}
		stores[identity] = s
		return s
	}
	leads := func(e *Elector) func() bool { return func() bool { return e.Status().IsLeader } }

	a, stopA := r.elector(storeOf("a-0_ua"), clock, "a-0_ua")
	eventually(t, "a creates the lease and leads", leads(a))
	b, _ := r.elector(storeOf("b-0_ub"), clock, "b-0_ub")
	eventually(t, "b has seen the lease", func() bool { return b.Synced() })

	// Released on shutdown, taken at once.
	stopA()
	eventually(t, "b takes the released lease", leads(b))

	// Handed over to c.
	c, _ := r.elector(storeOf("c-0_uc"), clock, "c-0_uc")
	eventually(t, "c has seen the lease", func() bool { return c.Synced() && c.Status().Holder == "b-0_ub" })
	shared.write(t, func(l *Lease) {
		l.Annotations = map[string]string{contract.HandoverFrom: "b-0_ub", contract.HandoverTo: "c-0"}
	})
	clock.Step(testTiming.RetryPeriod) // b sees the request at its next renewal
	eventually(t, "c takes the handed-over lease", leads(c))

	// c is cut off: it stops at its renew deadline, and b takes the lease once it has expired.
	stores["c-0_uc"].cut.Store(true)
	eventually(t, "b takes the lease of c, cut off past its expiry", func() bool {
		clock.Step(testTiming.RetryPeriod)
		settle()
		return b.Status().IsLeader
	})

	// Pod c-0 is recreated: same name, new UID, a new identity, which takes the lease b releases.
	c2, _ := r.elector(storeOf("c-0_uc2"), clock, "c-0_uc2")
	eventually(t, "the new c-0 has seen the lease", func() bool { return c2.Synced() && c2.Status().Holder == "b-0_ub" })
	shared.write(t, func(l *Lease) { l.Annotations = map[string]string{contract.HandoverFrom: "b-0_ub"} })
	clock.Step(testTiming.RetryPeriod) // b sees the request at its next renewal
	eventually(t, "someone takes the lease b handed over", func() bool { return c2.Status().IsLeader || c.Status().IsLeader })

	// The holder's agent restarts in the same pod (same identity): it takes its own lease back, and its
	// term, and token, go on.
	holder := shared.current().Spec.HolderIdentity
	before := shared.current().Spec.LeaseTransitions
	resumed, _ := r.elector(&cuttableStore{memStore: shared}, clock, holder)
	eventually(t, "the restarted agent resumes its own lease", leads(resumed))
	if got := shared.current().Spec.LeaseTransitions; got != before {
		t.Errorf("an agent resuming its own lease changed leaseTransitions from %d to %d", before, got)
	}

	led := r.terms()
	if len(led) < 6 {
		t.Fatalf("terms %v: want at least 6 (create, release, handover, expiry, new pod, resumed)", led)
	}
	for i := 1; i < len(led); i++ {
		prev, next := led[i-1], led[i]
		switch {
		case next.identity == prev.identity && next.token < prev.token:
			t.Errorf("%s resumed with token %d after its term with %d", next.identity, next.token, prev.token)
		case next.identity != prev.identity && next.token <= prev.token:
			t.Errorf("%s led with token %d after %s led with %d: a new holder's token must be higher", next.identity, next.token, prev.identity, prev.token)
		}
	}
	if last := led[len(led)-1]; last.token != int64(shared.current().Spec.LeaseTransitions) {
		t.Errorf("the holder's token is %d, the lease's leaseTransitions %d: everyone reading the lease must see the holder's token", last.token, shared.current().Spec.LeaseTransitions)
	}
	t.Logf("terms: %v", led)
}

// TestFencingTokenOfAMultiClusterLeaseIsTheControllersTerm: on a MultiClusterLease, the token is the
// election controller's status.fencingToken, whatever the spec's count of local candidates says.
func TestFencingTokenOfAMultiClusterLeaseIsTheControllersTerm(t *testing.T) {
	e, err := NewElector(Config{Lock: &MultiClusterLeaseLock{Store: &memStore{}}, Namespace: "shop", Name: "orders", Identity: "a-0_ua", Timing: testTiming, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	l := heldLease("b-0_ub", start)
	l.Global = &GlobalAnswer{Holder: "b-0_ub", FencingToken: 7351}
	e.publish(l, false)
	if got := e.Status().FencingToken; got != 7351 {
		t.Errorf("FencingToken = %d, want the controller's 7351 (not leaseTransitions %d)", got, l.Spec.LeaseTransitions)
	}
	l.Global = &GlobalAnswer{}
	e.publish(l, false)
	if got := e.Status().FencingToken; got != 0 {
		t.Errorf("FencingToken = %d while nobody leads globally, want 0", got)
	}
}
