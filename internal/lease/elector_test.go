package lease

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
)

// memStore is a Store over one in-memory Lease, as the API server keeps it: every write a
// compare-and-swap on resourceVersion, a watch that delivers every write after the version it starts
// from, and failures the test injects.
type memStore struct {
	mu       sync.Mutex
	lease    *coordinationv1.Lease // nil: not found
	rv       int
	history  []watch.Event
	watchers []*watch.RaceFreeFakeWatcher
	// failWrites, when set, is what every Create and Update returns: an API server that cannot be reached.
	failWrites error
}

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (s *memStore) Get(_ context.Context, _, name string) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return nil, apierrors.NewNotFound(leaseResource, name)
	}
	return s.lease.DeepCopy(), nil
}

func (s *memStore) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWrites != nil {
		return nil, s.failWrites
	}
	if s.lease != nil {
		return nil, apierrors.NewAlreadyExists(leaseResource, l.Name)
	}
	return s.storeLocked(l, watch.Added), nil
}

func (s *memStore) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWrites != nil {
		return nil, s.failWrites
	}
	if s.lease == nil {
		return nil, apierrors.NewNotFound(leaseResource, l.Name)
	}
	if l.ResourceVersion != s.lease.ResourceVersion {
		return nil, apierrors.NewConflict(leaseResource, l.Name, nil)
	}
	return s.storeLocked(l, watch.Modified), nil
}

func (s *memStore) storeLocked(l *coordinationv1.Lease, kind watch.EventType) *coordinationv1.Lease {
	s.rv++
	stored := l.DeepCopy()
	stored.ResourceVersion = strconv.Itoa(s.rv)
	s.lease = stored
	event := watch.Event{Type: kind, Object: stored.DeepCopy()}
	s.history = append(s.history, event)
	for _, w := range s.watchers {
		if !w.IsStopped() {
			w.Action(event.Type, event.Object.DeepCopyObject())
		}
	}
	return stored.DeepCopy()
}

func (s *memStore) List(context.Context, string, metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
	if s.lease != nil {
		list.Items = []coordinationv1.Lease{*s.lease.DeepCopy()}
	}
	return list, nil
}

func (s *memStore) Watch(_ context.Context, _ string, opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := watch.NewRaceFreeFake()
	if ptr.Deref(opts.SendInitialEvents, false) {
		// A streamed list (client-go's reflectors ask for one): the lease as it is, then the bookmark
		// that ends the initial events.
		if s.lease != nil {
			w.Add(s.lease.DeepCopy())
		}
		w.Action(watch.Bookmark, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: strconv.Itoa(s.rv), Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}})
	} else {
		from, _ := strconv.Atoi(opts.ResourceVersion)
		for _, event := range s.history {
			if rv, _ := strconv.Atoi(event.Object.(*coordinationv1.Lease).ResourceVersion); rv > from {
				w.Action(event.Type, event.Object.DeepCopyObject())
			}
		}
	}
	s.watchers = append(s.watchers, w)
	return w, nil
}

// write changes the lease as another client would (another candidate, a person).
func (s *memStore) write(t *testing.T, change func(*coordinationv1.Lease)) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.lease.DeepCopy()
	change(next)
	s.storeLocked(next, watch.Modified)
}

func (s *memStore) current() *coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease.DeepCopy()
}

var (
	testTiming = Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	start      = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
)

// runElector runs an elector for identity on store, on clock, until the test ends (or it is cancelled).
func runElector(t *testing.T, store Store, clock *clocktesting.FakeClock, identity string) (*Elector, context.CancelFunc) {
	t.Helper()
	e, err := NewElector(Config{
		Client: store, Namespace: "shop", Name: "orders", Identity: identity, Timing: testTiming,
		ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return e, func() {
		cancel()
		<-done
	}
}

// eventually waits, in real time, for the elector's goroutines to reach a state.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// settle lets the elector's goroutines act on what they have, in real time, without moving the clock.
func settle() { time.Sleep(50 * time.Millisecond) }

func heldLease(holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](3), LeaseTransitions: ptr.To[int32](4),
			AcquireTime: &metav1.MicroTime{Time: renewed}, RenewTime: &metav1.MicroTime{Time: renewed},
		},
	}
}

func storeWith(t *testing.T, l *coordinationv1.Lease) *memStore {
	s := &memStore{}
	if l != nil {
		if _, err := s.Create(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func holderOf(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }

func TestElectorCreatesAMissingLeaseAndRenewsIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	l := store.current()
	if holderOf(l) != "a-0_ua" || ptr.Deref(l.Spec.LeaseTransitions, -1) != 0 || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 3 {
		t.Fatalf("created lease %+v: want holder a-0_ua, 0 transitions, 3 s", l.Spec)
	}
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "it renews one retry period later", func() bool {
		return store.current().Spec.RenewTime.Time.Equal(start.Add(testTiming.RetryPeriod))
	})
	if !e.Status().IsLeader {
		t.Error("a renewing leader stopped leading")
	}
}

func TestElectorStopsLeadingAtItsRenewDeadline(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	var mu sync.Mutex
	var changes []bool
	e, err := NewElector(Config{Client: store, Namespace: "shop", Name: "orders", Identity: "a-0_ua", Timing: testTiming,
		ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard(), OnChange: func(s Status) {
			mu.Lock()
			changes = append(changes, s.IsLeader)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })

	store.mu.Lock()
	store.failWrites = apierrors.NewServiceUnavailable("the API server is away")
	store.mu.Unlock()
	clock.Step(testTiming.RenewDeadline - time.Millisecond)
	settle()
	if !e.Status().IsLeader {
		t.Fatal("it stopped leading before its renew deadline")
	}
	// Past the deadline, Status says so at once, whether or not the loop has run: a process that was
	// frozen must not answer "leader" from stale state the moment it resumes.
	clock.Step(time.Millisecond)
	if e.Status().IsLeader {
		t.Fatal("Status reported leadership at the renew deadline")
	}
	eventually(t, "the loop steps down and says so", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changes) >= 2 && !changes[len(changes)-1]
	})
}

func TestElectorTakesAnExpiredLeaseAndNotBefore(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	settle()
	// The lease runs 3 s after its renewal, and the clock skew margin gives its holder 1 s more.
	clock.Step(4*time.Second - time.Millisecond)
	settle()
	if e.Status().IsLeader || holderOf(store.current()) != "b-0_ub" {
		t.Fatal("it took the lease before its duration and the clock skew margin had passed")
	}
	clock.Step(time.Millisecond)
	eventually(t, "it takes the expired lease", func() bool { return e.Status().IsLeader })
	if l := store.current(); holderOf(l) != "a-0_ua" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 5 {
		t.Errorf("taken lease %+v: want holder a-0_ua and one more transition (5)", l.Spec)
	}
}

func TestElectorTakesAReleasedLeaseWithoutWaiting(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	settle()
	store.write(t, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })
	eventually(t, "it takes the released lease through its watch, the clock standing still", func() bool { return e.Status().IsLeader })
}

func TestElectorStepsDownWhenTheLeaseIsTakenFromIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	store.write(t, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b-0_ub") })
	eventually(t, "it steps down on seeing another holder", func() bool { return !e.Status().IsLeader })
	if got := e.Status().Holder; got != "b-0_ub" {
		t.Errorf("it names %q as holder, want b-0_ub", got)
	}
	if holderOf(store.current()) != "b-0_ub" {
		t.Error("it wrote the lease back")
	}
}

func TestElectorRenewsOnAFreshCopyAfterAnotherWriteThatKeepsIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	store.write(t, func(l *coordinationv1.Lease) { metav1.SetMetaDataLabel(&l.ObjectMeta, "team", "shop") })
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "it renews despite the conflict", func() bool {
		return store.current().Spec.RenewTime.Time.Equal(start.Add(testTiming.RetryPeriod))
	})
	if l := store.current(); !e.Status().IsLeader || l.Labels["team"] != "shop" {
		t.Errorf("after someone labelled the lease: leading %v, labels %v; want leading and the label kept", e.Status().IsLeader, l.Labels)
	}
}

func TestElectorReleasesOnShutdown(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, stop := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	stop()
	if l := store.current(); holderOf(l) != "" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 1 {
		t.Errorf("released lease %+v: want an empty holder and a 1 s duration, so a follower takes it at once", l.Spec)
	}
	if e.Status().IsLeader {
		t.Error("it still says it leads after shutting down")
	}
}

func TestElectorHandsOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   string // "" for any other candidate
	}{
		{name: "to a named candidate, the others barred", to: "c-0"},
		{name: "to any other candidate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
			a, _ := runElector(t, store, clock, "a-0_ua")
			eventually(t, "a leads", func() bool { return a.Status().IsLeader })
			b, _ := runElector(t, store, clock, "b-0_ub")
			c, _ := runElector(t, store, clock, "c-0_uc")
			settle()

			store.write(t, func(l *coordinationv1.Lease) {
				metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverFrom, "a-0_ua")
				if tc.to != "" {
					metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverTo, tc.to)
				}
			})
			eventually(t, "another candidate takes the lease, the clock standing still", func() bool {
				h := holderOf(store.current())
				return h != "" && h != "a-0_ua"
			})
			l := store.current()
			if tc.to != "" && holderOf(l) != "c-0_uc" {
				t.Fatalf("holder %s: want the named candidate c-0", holderOf(l))
			}
			if _, asked := HandoverOf(l); asked {
				t.Errorf("the request is still on the lease after it was taken: %v", l.Annotations)
			}
			if a.Status().IsLeader || (b.Status().IsLeader && c.Status().IsLeader) {
				t.Errorf("leaders: a %v, b %v, c %v; want only the new holder", a.Status().IsLeader, b.Status().IsLeader, c.Status().IsLeader)
			}
		})
	}
}

func TestElectorHandoverBarsOthersUntilTheReleasedLeaseWouldExpire(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	a, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "a leads", func() bool { return a.Status().IsLeader })
	b, _ := runElector(t, store, clock, "b-0_ub")
	settle()
	// The named target, c-0, runs no agent: it never takes the lease.
	store.write(t, func(l *coordinationv1.Lease) {
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverFrom, "a-0_ua")
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverTo, "c-0")
	})
	eventually(t, "a releases", func() bool { return holderOf(store.current()) == "" })
	clock.Step(4*time.Second - time.Millisecond)
	settle()
	if h := holderOf(store.current()); h != "" {
		t.Fatalf("%s took the lease while the handover to c-0 still barred it", h)
	}
	clock.Step(time.Millisecond)
	eventually(t, "once the released lease would have expired, a candidate takes it", func() bool {
		return a.Status().IsLeader || b.Status().IsLeader
	})
}
