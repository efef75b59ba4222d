package globalelection

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

func TestYieldAfterEndingOwnTerm(t *testing.T) {
	ended := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		ttl      time.Duration
		at       time.Duration // after the term ended
		wantWait time.Duration
		wantMay  bool
	}{
		{"right after the release, the key is left to the other clusters", 5 * time.Second, 0, 500 * time.Millisecond, false},
		{"a tenth of the TTL later, this cluster's next candidate may claim", 5 * time.Second, 500 * time.Millisecond, 0, true},
		{"a long TTL yields at most one backend call's bound", 60 * time.Second, 200 * time.Millisecond, 800 * time.Millisecond, false},
		{"the shortest TTL yields a tenth of it", 2 * time.Second, 100 * time.Millisecond, 100 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &election{yieldUntil: ended.Add(yieldFor(tt.ttl))}
			wait, may := e.mayClaim(ended.Add(tt.at))
			if wait != tt.wantWait || may != tt.wantMay {
				t.Errorf("mayClaim = %s, %v; want %s, %v", wait, may, tt.wantWait, tt.wantMay)
			}
		})
	}
	if wait, may := (&election{}).mayClaim(ended); !may || wait != 0 {
		t.Errorf("a cluster that never held the term yields %s", wait)
	}
}

// controllerOf is cluster a's controller on backend and clk, with MultiClusterLease shop/orders in a
// fake API server: the controller, its client, the lease as read, and the request that reconciles it.
func controllerOf(t *testing.T, backend Backend, clk *clocktesting.FakePassiveClock) (*Controller, client.Client, *v1alpha1.MultiClusterLease, ctrl.Request) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mcl := &v1alpha1.MultiClusterLease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(mcl).WithObjects(mcl).Build()
	c := &Controller{Client: kube, Backend: backend, Cluster: "a", Clock: clk, Log: logr.Discard(),
		elections: map[types.NamespacedName]*election{}}
	return c, kube, mcl, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "orders"}}
}

// slowResign is a backend of one key whose Resign takes resignTakes on the controller's clock, as a
// loaded backend's does.
type slowResign struct {
	clock       *clocktesting.FakePassiveClock
	resignTakes time.Duration
	term        Term
	held        bool
	campaigns   int
}

func (b *slowResign) Campaign(_ context.Context, key string, claim Claim, ttl time.Duration) (Term, bool, error) {
	b.campaigns++
	if b.held {
		return b.term, false, nil
	}
	b.term, b.held = Term{Key: key, Claim: claim, Token: int64(b.campaigns), TTL: ttl}, true
	return b.term, true, nil
}
func (b *slowResign) Confirm(context.Context, Term) (time.Duration, error) { return b.term.TTL, nil }
func (b *slowResign) Resign(context.Context, Term) error {
	b.clock.SetTime(b.clock.Now().Add(b.resignTakes))
	b.held = false
	return nil
}
func (b *slowResign) Get(context.Context, string) (Term, bool, error) { return b.term, b.held, nil }
func (b *slowResign) Watch(context.Context, func(string))             {}

func TestTheYieldCountsFromWhenTheKeyWentFree(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	backend := &slowResign{clock: clk, resignTakes: 400 * time.Millisecond}
	c, kube, mcl, req := controllerOf(t, backend, clk)
	stand := func(holder string) {
		t.Helper()
		if err := kube.Get(ctx, req.NamespacedName, mcl); err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(clk.Now())
		mcl.Spec = v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(5)), RenewTime: &now}
		if err := kube.Update(ctx, mcl); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	stand("a-0")
	if backend.campaigns != 1 || !backend.held {
		t.Fatalf("a-0 did not win the free key: %d campaigns", backend.campaigns)
	}
	clk.SetTime(clk.Now().Add(100 * time.Millisecond))
	stand("") // a-0 releases; resigning takes 400 ms
	// A follower of this cluster takes the spec 200 ms after the key went free: well inside the half second
	// (a tenth of the 5 s TTL) the other clusters have to claim it.
	clk.SetTime(clk.Now().Add(200 * time.Millisecond))
	stand("a-1")
	if backend.campaigns != 1 {
		t.Errorf("this cluster claimed the key again 200 ms after it went free, inside the %s left to the other clusters", yieldFor(5*time.Second))
	}
	clk.SetTime(clk.Now().Add(yieldFor(5 * time.Second)))
	stand("a-1")
	if backend.campaigns != 2 || backend.term.Claim.Holder != "a-1" {
		t.Errorf("after the yield, a-1 did not win the still free key: %d campaigns, term %+v", backend.campaigns, backend.term)
	}
}

// A term's validUntil counts from the TTL the backend granted its lease, not from the spec's duration:
// lengthened mid-term, the spec would publish a validUntil past the backend lease, and after a partition
// another cluster could win while this cluster's fence still admitted the old leader.
func TestValidUntilNeverOutlastsTheBackendLease(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	backend := &slowResign{clock: clk}
	c, kube, mcl, req := controllerOf(t, backend, clk)
	heartbeat := func(seconds int32) v1alpha1.MultiClusterLeaseStatus {
		t.Helper()
		if err := kube.Get(ctx, req.NamespacedName, mcl); err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(clk.Now())
		mcl.Spec = v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To("a-0"), LeaseDurationSeconds: ptr.To(seconds), RenewTime: &now}
		mcl.Generation++ // as the API server counts a change of spec; the fake client does not
		if err := kube.Update(ctx, mcl); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := kube.Get(ctx, req.NamespacedName, mcl); err != nil {
			t.Fatal(err)
		}
		return mcl.Status
	}
	latest := func(seconds int32) time.Time { return clk.Now().Add(v1alpha1.ValidFor(seconds, 0)) }

	if s := heartbeat(5); s.LocalLeader(clk.Now()) != "a-0" || s.ValidUntil.After(latest(5)) {
		t.Fatalf("won with a 5 s TTL: status %+v, want a-0 leading until %s at the latest", s, latest(5))
	}
	for _, tt := range []struct {
		name    string
		seconds int32
		within  int32
	}{
		{"the spec lengthened to an hour mid-term", 3600, 5},
		{"the spec shortened below the TTL", 3, 3},
	} {
		clk.SetTime(clk.Now().Add(time.Second))
		if s := heartbeat(tt.seconds); s.ValidUntil == nil || s.ValidUntil.After(latest(tt.within)) {
			t.Errorf("%s: validUntil %v, want at most %s (a backend lease of %d s)", tt.name, s.ValidUntil, latest(tt.within), backend.term.TTL/time.Second)
		}
	}
}
