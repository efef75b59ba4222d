package leaseelection

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
)

// memStore is a Store over one in-memory Lease, as the API server keeps it: JSON (so every read and write
// goes through Lease's own encoding, and fields the elector does not read must survive its writes),
// every write a compare-and-swap on resourceVersion, a watch that delivers every write after the version
// it starts from, and failures the test injects.
type memStore struct {
	mu       sync.Mutex
	object   []byte // nil: not found
	rv       int
	history  []memEvent
	watchers map[chan Event]bool
	// failWrites, when set, is what every Create and Update returns: an API server that cannot be reached.
	failWrites error
	// slowWrite, when set, runs at the start of every Create and Update, outside the lock: a write that
	// takes the time it moves a fake clock by.
	slowWrite func()
	// compacted: a watch from a resourceVersion before it has expired (410), as after etcd compacts.
	compacted int
	// stalled: open watches deliver nothing more, their connections healthy (a stuck watch cache).
	stalled bool
	// endWatches: every watch ends at once without an event (a proxy that closes them); watches counts
	// the watches asked for.
	endWatches bool
	watches    int
	// failWatches, when set, is what every Watch returns (counted in watches).
	failWatches error
	// gets counts the reads of the lease by name, lists its lists, writes its creates and updates
	// (failed ones too); failLists, when set, is what every List returns.
	gets, lists, writes int
	failLists           error
	// generations: the object is a MultiClusterLease, whose generation the API server bumps on every
	// change of spec.
	generations bool
}

type memEvent struct {
	kind   EventType
	rv     int
	object []byte
}

func statusErr(code int, reason string) error {
	return &kubeclient.StatusError{Status: kubeclient.Status{Code: code, Reason: reason, Message: reason}}
}

func decodeLease(t interface{ Fatal(...any) }, data []byte) *Lease {
	l := &Lease{}
	if err := json.Unmarshal(data, l); err != nil {
		t.Fatal(err)
	}
	return l
}

func (s *memStore) Get(_ context.Context, _, _ string) (*Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if s.object == nil {
		return nil, statusErr(404, "NotFound")
	}
	return decodeLease(panicker{}, s.object), nil
}

func (s *memStore) Create(_ context.Context, l *Lease) (*Lease, error) {
	s.takeTime()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.failWrites != nil {
		return nil, s.failWrites
	}
	if s.object != nil {
		return nil, statusErr(409, "AlreadyExists")
	}
	return s.storeLocked(l, Added), nil
}

func (s *memStore) Update(_ context.Context, l *Lease) (*Lease, error) {
	s.takeTime()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.failWrites != nil {
		return nil, s.failWrites
	}
	// A deleted lease conflicts too, as the API server answers a write that names its uid (every copy it
	// served does): the uid precondition fails.
	if s.object == nil || l.ResourceVersion != decodeLease(panicker{}, s.object).ResourceVersion {
		return nil, statusErr(409, "Conflict")
	}
	return s.storeLocked(l, Modified), nil
}

// takeTime runs slowWrite, if set.
func (s *memStore) takeTime() {
	s.mu.Lock()
	slow := s.slowWrite
	s.mu.Unlock()
	if slow != nil {
		slow()
	}
}

// storeLocked stores l, as JSON, at the next resourceVersion and tells the watchers.
func (s *memStore) storeLocked(l *Lease, kind EventType) *Lease {
	s.rv++
	stored := l.Clone()
	stored.ResourceVersion = strconv.Itoa(s.rv)
	data, err := json.Marshal(stored)
	if err != nil {
		panic(err)
	}
	if s.generations {
		data = s.withGenerationLocked(data, l.Spec)
	}
	s.object = data
	event := memEvent{kind: kind, rv: s.rv, object: data}
	s.history = append(s.history, event)
	for w := range s.watchers {
		if !s.stalled {
			w <- Event{Type: kind, Lease: decodeLease(panicker{}, data)}
		}
	}
	return decodeLease(panicker{}, data)
}

// withGenerationLocked sets the generation in data: the stored one, one more if spec changed.
func (s *memStore) withGenerationLocked(data []byte, spec lease.Spec) []byte {
	generation := int64(1)
	if s.object != nil {
		prev := decodeLease(panicker{}, s.object)
		generation = prev.Generation
		if before, after := mustJSON(prev.Spec), mustJSON(spec); before != after {
			generation++
		}
	}
	var object map[string]any
	if err := json.Unmarshal(data, &object); err != nil {
		panic(err)
	}
	object["metadata"].(map[string]any)["generation"] = generation
	data, err := json.Marshal(object)
	if err != nil {
		panic(err)
	}
	return data
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func (s *memStore) List(context.Context, string, string) (*Lease, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	if s.failLists != nil {
		return nil, "", s.failLists
	}
	if s.object == nil {
		return nil, strconv.Itoa(s.rv), nil
	}
	return decodeLease(panicker{}, s.object), strconv.Itoa(s.rv), nil
}

func (s *memStore) Watch(ctx context.Context, _, _, resourceVersion string) (<-chan Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from, _ := strconv.Atoi(resourceVersion)
	w := make(chan Event, 64) // larger than any test's writes: sent to under the lock, never blocking
	s.watches++
	if s.failWatches != nil {
		return nil, s.failWatches
	}
	if s.endWatches {
		close(w)
		return w, nil
	}
	if from < s.compacted {
		w <- Event{Type: Error, Err: statusErr(410, "Expired")}
		close(w)
		return w, nil
	}
	for _, event := range s.history {
		if event.rv > from {
			w <- Event{Type: event.kind, Lease: decodeLease(panicker{}, event.object)}
		}
	}
	if s.watchers == nil {
		s.watchers = map[chan Event]bool{}
	}
	s.watchers[w] = true
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchers[w] {
			delete(s.watchers, w)
			close(w)
		}
	}()
	return w, nil
}

// restart plays an API server restart with a compaction: every watch ends, the lease changes while
// nobody watches, and the history before that change is gone, so a watch resumed from the version it
// had seen expires and only a new list finds the change.
func (s *memStore) restart(t *testing.T, change func(*Lease)) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endWatchersLocked()
	next := decodeLease(t, s.object)
	change(next)
	s.storeLocked(next, Modified)
	s.compacted = s.rv
}

// panicker fails a decode inside the store, where no *testing.T is at hand: the store only decodes what
// it encoded.
type panicker struct{}

func (panicker) Fatal(args ...any) { panic(args) }

// write changes the lease as another client would (another candidate, a person).
func (s *memStore) write(t *testing.T, change func(*Lease)) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := decodeLease(t, s.object)
	change(next)
	s.storeLocked(next, Modified)
}

// remove deletes the lease as another client would (a person, a namespace's cleanup).
func (s *memStore) remove(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.object == nil {
		t.Fatal("no lease to delete")
	}
	last := s.object
	s.object = nil
	s.rv++
	s.history = append(s.history, memEvent{kind: Deleted, rv: s.rv, object: last})
	for w := range s.watchers {
		if !s.stalled {
			w <- Event{Type: Deleted, Lease: decodeLease(panicker{}, last)}
		}
	}
}

// writeObject changes the stored object's JSON as a client with other types would: fields Lease does not
// read.
func (s *memStore) writeObject(t *testing.T, change func(object map[string]any)) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var object map[string]any
	if err := json.Unmarshal(s.object, &object); err != nil {
		t.Fatal(err)
	}
	change(object)
	data, err := json.Marshal(object)
	if err != nil {
		t.Fatal(err)
	}
	s.storeLocked(decodeLease(t, data), Modified)
}

func (s *memStore) current() *Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return decodeLease(panicker{}, s.object)
}

// currentObject is the stored object as generic JSON.
func (s *memStore) currentObject(t *testing.T) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var object map[string]any
	if err := json.Unmarshal(s.object, &object); err != nil {
		t.Fatal(err)
	}
	return object
}

var (
	testTiming = lease.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	start      = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
)

// runElector runs an elector for identity on store, on clock, until the test ends (or it is cancelled).
func runElector(t *testing.T, store Store, clock *clocktesting.FakeClock, identity string) (*Elector, context.CancelFunc) {
	t.Helper()
	return startElector(t, Config{Lock: LeaseLock{store}, Namespace: "shop", Name: "orders", Identity: identity, Timing: testTiming,
		ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard()})
}

// runElectorRecording is runElector that also records, in order, whether each status it reported led.
func runElectorRecording(t *testing.T, store Store, clock *clocktesting.FakeClock, identity string) (e *Elector, changes func() []bool) {
	t.Helper()
	var mu sync.Mutex
	var led []bool
	e, _ = startElector(t, Config{Lock: LeaseLock{store}, Namespace: "shop", Name: "orders", Identity: identity, Timing: testTiming,
		ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard(), OnChange: func(s lease.Status) {
			mu.Lock()
			led = append(led, s.IsLeader)
			mu.Unlock()
		}})
	return e, func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(led)
	}
}

// startElector runs an elector of cfg until the test ends, or until the returned stop is called.
func startElector(t *testing.T, cfg Config) (*Elector, context.CancelFunc) {
	t.Helper()
	e, err := NewElector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(stop)
	return e, stop
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

// stepUntilLeading moves clock a retry period at a time, letting the elector act after each step, until e
// leads.
func stepUntilLeading(t *testing.T, clock *clocktesting.FakeClock, e *Elector, what string) {
	t.Helper()
	eventually(t, what, func() bool {
		settle()
		clock.Step(testTiming.RetryPeriod)
		return e.Status().IsLeader
	})
}

// stepWithoutLeading moves clock a retry period at a time, letting the elector act after each step, up to
// a retry period before until, and fails if e leads at any step: why names what bars it.
func stepWithoutLeading(t *testing.T, clock *clocktesting.FakeClock, e *Elector, since, until time.Time, why string) {
	t.Helper()
	for clock.Now().Before(until.Add(-testTiming.RetryPeriod)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
		if e.Status().IsLeader {
			t.Fatalf("it leads %s after %s", clock.Since(since), why)
		}
	}
}

// settle lets the elector's goroutines act on what they have, in real time, without moving the clock.
func settle() { time.Sleep(50 * time.Millisecond) }

func heldLease(holder string, renewed time.Time) *Lease {
	return &Lease{
		Namespace: "shop", Name: "orders",
		Spec: lease.Spec{
			HolderIdentity: holder, LeaseDurationSeconds: 3, LeaseTransitions: 4,
			AcquireTime: lease.MicroTime{Time: renewed}, RenewTime: lease.MicroTime{Time: renewed},
		},
	}
}

func storeWith(t *testing.T, l *Lease) *memStore {
	s := &memStore{}
	if l != nil {
		if _, err := s.Create(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func holderOf(l *Lease) string { return l.Spec.HolderIdentity }

func TestElectorCreatesAMissingLeaseAndRenewsIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	l := store.current()
	if holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != 0 || l.Spec.LeaseDurationSeconds != 3 {
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
	e, changes := runElectorRecording(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })

	store.mu.Lock()
	store.failWrites = statusErr(503, "ServiceUnavailable")
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
		c := changes()
		return len(c) >= 2 && !c[len(c)-1]
	})
}

// TestLeaderTriesAgainBeforeItsDeadlineNotAtIt: a leader whose renewal fails a retry period before its
// renew deadline tries again halfway there, and keeps leading if that try succeeds, as when a restarted
// API server answers again just before the deadline. A try at the deadline would be a step-down.
func TestLeaderTriesAgainBeforeItsDeadlineNotAtIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	failWrites := func(err error) {
		store.mu.Lock()
		defer store.mu.Unlock()
		store.failWrites = err
	}
	failWrites(errors.New("connection refused"))
	// Renewals at 0.5, 1, 1.5 s fail; the renew deadline is at 2 s.
	for range 3 {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	failWrites(nil)
	lastTry := start.Add(testTiming.RenewDeadline - testTiming.RetryPeriod/2)
	clock.SetTime(lastTry)
	eventually(t, "it renews halfway between its failed try and its deadline", func() bool {
		return store.current().Spec.RenewTime.Time.Equal(lastTry)
	})
	clock.SetTime(start.Add(testTiming.RenewDeadline))
	settle()
	if !e.Status().IsLeader {
		t.Fatal("it stopped leading at the deadline its last renewal had moved")
	}
}

// TestLeaderRetriesARetryPeriodAfterItsFailedTryStarted: a renewal that was slow to fail does not put off
// the next try by as long.
func TestLeaderRetriesARetryPeriodAfterItsFailedTryStarted(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	took := 3 * testTiming.RetryPeriod / 5
	store.mu.Lock()
	store.failWrites = errors.New("connection refused")
	store.slowWrite = func() { clock.Step(took) }
	store.mu.Unlock()
	failedTry := start.Add(testTiming.RetryPeriod)
	clock.SetTime(failedTry) // the renewal there fails after took
	eventually(t, "its renewal fails", func() bool { return clock.Now().Equal(failedTry.Add(took)) })
	settle()
	store.mu.Lock()
	store.failWrites, store.slowWrite = nil, nil
	store.mu.Unlock()
	nextTry := failedTry.Add(testTiming.RetryPeriod)
	clock.SetTime(nextTry)
	eventually(t, "it renews a retry period after the failed try started, not after it failed", func() bool {
		return store.current().Spec.RenewTime.Time.Equal(nextTry)
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
	if l := store.current(); holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != 5 {
		t.Errorf("taken lease %+v: want holder a-0_ua and one more transition (5)", l.Spec)
	}
}

func TestElectorTakesAReleasedLeaseWithoutWaiting(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	settle()
	store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "" })
	eventually(t, "it takes the released lease through its watch, the clock standing still", func() bool { return e.Status().IsLeader })
}

// TestElectorStartsOnItsWatchsList: an elector starting acts on its watch's first list, without a read of
// the lease beside it, unless that list does not come within a retry period.
func TestElectorStartsOnItsWatchsList(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lease     *Lease
		failLists bool
		wantGets  int
	}{
		{name: "a missing lease is created without a read", wantGets: 0},
		{name: "a released lease is taken without a read", lease: heldLease("", start.Add(-time.Minute)), wantGets: 0},
		{name: "its own lease from before a restart is taken back without a read", lease: heldLease("a-0_ua", start), wantGets: 0},
		{name: "with no list, the first act reads the lease after a retry period", lease: heldLease("", start.Add(-time.Minute)), failLists: true, wantGets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, clock := storeWith(t, tc.lease), clocktesting.NewFakeClock(start)
			if tc.failLists {
				store.failLists = statusErr(503, "ServiceUnavailable")
			}
			e, _ := runElector(t, store, clock, "a-0_ua")
			if tc.failLists {
				settle()
				if e.Status().IsLeader {
					t.Fatal("it acted before its list came or a retry period passed")
				}
				clock.Step(testTiming.RetryPeriod)
			}
			eventually(t, "it leads", func() bool { return e.Status().IsLeader })
			store.mu.Lock()
			defer store.mu.Unlock()
			if store.gets != tc.wantGets {
				t.Errorf("it read the lease %d times, want %d", store.gets, tc.wantGets)
			}
		})
	}
}

// restartUntilListed restarts the store's API server with a compaction, while c-0_uc takes the lease, and
// moves the clock until e has listed it again: only a list can tell e, whose watch expired. c's renewal is
// stamped an hour ahead, so the lease stays held however many backoffs the clock moves through before
// the list (a lease that expired on the way would be taken, and c never seen).
func restartUntilListed(t *testing.T, store *memStore, clock *clocktesting.FakeClock, e *Elector) {
	t.Helper()
	store.mu.Lock()
	lists := store.lists
	store.mu.Unlock()
	store.restart(t, func(l *Lease) {
		l.Spec.HolderIdentity, l.Spec.RenewTime = "c-0_uc", lease.MicroTime{Time: start.Add(time.Hour)}
	})
	// Its read at the old copy's expiry may tell it first; the list is what the watch needs to go on.
	eventually(t, "it sees the holder that changed while it was not watching, and lists again", func() bool {
		settle()
		clock.Step(watchBackoffMax) // each backoff: the watch that ended without an event, the expired one
		store.mu.Lock()
		listed := store.lists > lists
		store.mu.Unlock()
		return listed && e.Status().Holder == "c-0_uc"
	})
}

func TestElectorListsAgainWhenItsWatchExpired(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	restartUntilListed(t, store, clock, e)
	if e.Status().IsLeader {
		t.Error("it took a lease held by another")
	}
}

func TestElectorBacksOffWhenWatchesEndAtOnce(t *testing.T) {
	// b holds the lease throughout: a stays a follower, whose watch this is.
	held := heldLease("b-0_ub", start)
	held.Spec.LeaseDurationSeconds = 3600
	store, clock := storeWith(t, held), clocktesting.NewFakeClock(start)
	store.endWatches = true
	runElector(t, store, clock, "a-0_ua")
	time.Sleep(200 * time.Millisecond) // real time; the backoff waits on the fake clock, which stands still
	store.mu.Lock()
	watches := store.watches
	store.mu.Unlock()
	if watches != 1 {
		t.Fatalf("%d watches asked for in 200 ms with the clock standing still: want 1, then a wait", watches)
	}
	clock.Step(watchBackoffMax)
	eventually(t, "it watches again after the backoff", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.watches >= 2
	})
}

// listedThenStalled runs a-0_ua's elector beside b-0_ub's lease until it has listed it, then stalls its
// watch: the watch stays open but delivers nothing more.
func listedThenStalled(t *testing.T) (*memStore, *clocktesting.FakeClock, *Elector) {
	t.Helper()
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	store.mu.Lock()
	store.stalled = true
	store.mu.Unlock()
	return store, clock, e
}

func TestElectorReadsTheLeaseAfterLosingARaceOnAStalledWatch(t *testing.T) {
	store, clock, e := listedThenStalled(t)
	// b releases the lease, which the elector's copy does not show, so its first take conflicts.
	store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "" })
	stepUntilLeading(t, clock, e, "it reads the lease after the conflict and takes it")
}

// TestElectorThatLostARaceReadsNothingOnceItsWatchBringsTheWinner: a race lost on a stale copy leaves
// the next attempt to read the lease first only while the watch has brought nothing since; once it
// brings the winner's write, its copy is the base, and the elector takes the lease when that copy
// expires without a read.
func TestElectorThatLostARaceReadsNothingOnceItsWatchBringsTheWinner(t *testing.T) {
	store, clock, e := listedThenStalled(t)
	// b renews where the stalled watch does not show it, so a's take on its expired copy conflicts.
	store.write(t, func(l *Lease) { l.Spec.RenewTime = lease.MicroTime{Time: start.Add(2 * time.Second)} })
	_, writes := store.counts()
	clock.SetTime(start.Add(4*time.Second + time.Millisecond))
	eventually(t, "its take on the stale copy is sent", func() bool { _, w := store.counts(); return w > writes })
	settle()
	if holderOf(store.current()) != "b-0_ub" {
		t.Fatalf("lease held by %q, want b-0_ub: the take should have lost", holderOf(store.current()))
	}
	// The watch comes back to life with b's next renewal.
	store.mu.Lock()
	store.stalled = false
	store.mu.Unlock()
	renewed := clock.Now()
	store.write(t, func(l *Lease) { l.Spec.RenewTime = lease.MicroTime{Time: renewed} })
	eventually(t, "its watch brings b's renewal", func() bool { l := e.watch.latest(); return l != nil && l.Spec.RenewTime.Time.Equal(renewed) })
	clock.Step(testTiming.RetryPeriod)
	settle()
	if gets, _ := store.counts(); gets != 0 || e.Status().IsLeader {
		t.Fatalf("%d reads, leading %v, a retry period after the lost race: want no read, b still holding", gets, e.Status().IsLeader)
	}
	// b stops renewing: a takes the lease when the watch's copy expires, on that copy.
	clock.SetTime(renewed.Add(4*time.Second + time.Millisecond))
	eventually(t, "it takes the lease once the watch's copy expires", func() bool { return e.Status().IsLeader })
	if gets, _ := store.counts(); gets != 0 {
		t.Errorf("%d reads of the lease: want none, the watch being live", gets)
	}
}

// TestElectorThatLostARaceOnALaggingWatchWritesOnTheCopyItRead: while the watch still shows the version a
// race was lost on (a watch cache behind etcd), the attempts after the read judge the lease on the copy
// read, not on the watch's stale one: no take that is bound to conflict, and no read, each retry period.
func TestElectorThatLostARaceOnALaggingWatchWritesOnTheCopyItRead(t *testing.T) {
	store, clock, e := listedThenStalled(t)
	// b renews where the stalled watch does not show it, so a's take on its expired copy conflicts.
	renewed := start.Add(2 * time.Second)
	store.write(t, func(l *Lease) { l.Spec.RenewTime = lease.MicroTime{Time: renewed} })
	clock.SetTime(start.Add(4*time.Second + time.Millisecond))
	eventually(t, "its take on the stale copy conflicts and it reads the lease", func() bool {
		settle()
		clock.Step(testTiming.RetryPeriod)
		gets, _ := store.counts()
		return gets == 1
	})
	_, writes := store.counts()
	// b's renewal, as read, runs to renewed + 3 s + 1 s of margin: a does nothing until then.
	for clock.Now().Before(renewed.Add(4*time.Second - testTiming.RetryPeriod)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	if gets, w := store.counts(); gets != 1 || w != writes || e.Status().IsLeader {
		t.Fatalf("%d reads and %d more writes before the copy read expires, leading %v: want 1 read, no write, b holding", gets, w-writes, e.Status().IsLeader)
	}
	// b stops renewing: a takes the lease once the copy it read expires.
	clock.SetTime(renewed.Add(4*time.Second + time.Millisecond))
	stepUntilLeading(t, clock, e, "it takes the lease once the copy it read expires")
}

// TestFollowerCreatesALeaseDeletedSinceItsCopy: a take made from a copy of a lease deleted since
// conflicts, and the read after it finds no lease. The copy is not the version deleted (a holder after it
// may have renewed until the delete), so the follower creates the lease only a lease duration and margin
// after it learned of the delete, sends nothing meanwhile, and counts its term on from the copy's.
func TestFollowerCreatesALeaseDeletedSinceItsCopy(t *testing.T) {
	store, clock, e := listedThenStalled(t)
	store.remove(t)
	clock.SetTime(start.Add(4*time.Second + time.Millisecond))
	eventually(t, "its take conflicts and its read finds no lease", func() bool {
		settle()
		if gets, _ := store.counts(); gets == 1 {
			return true
		}
		clock.Step(testTiming.RetryPeriod)
		return false
	})
	learned := clock.Now()
	_, writes := store.counts()
	for clock.Now().Before(learned.Add(4*time.Second - testTiming.RetryPeriod)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	if gets, w := store.counts(); e.Status().IsLeader || gets != 1 || w != writes {
		t.Fatalf("within a lease duration and margin of the read: leading %v, %d more reads, %d more writes; want none", e.Status().IsLeader, gets-1, w-writes)
	}
	clock.SetTime(learned.Add(4*time.Second + time.Millisecond))
	stepUntilLeading(t, clock, e, "it creates the lease and leads")
	if l := store.current(); holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != 5 {
		t.Fatalf("lease %+v: want holder a-0_ua and 5 transitions, one on from the copy's", l.Spec)
	}
}

// TestFollowerThatListsNoLeaseWhereItSawOneWaitsOutBothTerms: a follower whose watch was down while the
// lease was deleted learns of it from a list that finds none, which does not tell the version deleted:
// it creates the lease only once the term of the copy it saw has ended and a lease duration and margin
// have passed since that list.
func TestFollowerThatListsNoLeaseWhereItSawOneWaitsOutBothTerms(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start.Add(time.Hour))), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	store.mu.Lock()
	store.endWatchersLocked()
	lists := store.lists
	store.mu.Unlock()
	store.remove(t)
	store.mu.Lock()
	store.compacted = store.rv // the delete is past what a resumed watch can bring
	store.mu.Unlock()
	eventually(t, "it lists the lease again and finds none", func() bool {
		settle()
		store.mu.Lock()
		listed := store.lists > lists
		store.mu.Unlock()
		if !listed {
			clock.Step(watchBackoffMax)
		}
		return listed && e.watch.latest() == nil
	})
	settle()
	listed := clock.Now()
	stepWithoutLeading(t, clock, e, listed, listed.Add(4*time.Second), "the list that found no lease, within a lease duration and margin")
	// b's copy, renewed an hour after start, holds its term until 3 s and 1 s of margin after that.
	termEnd := start.Add(time.Hour + 4*time.Second)
	clock.SetTime(termEnd.Add(-testTiming.RetryPeriod))
	settle()
	if e.Status().IsLeader {
		t.Fatal("it leads before the term of the copy it saw has ended")
	}
	clock.SetTime(termEnd.Add(time.Millisecond))
	stepUntilLeading(t, clock, e, "it creates the lease and leads")
	if l := store.current(); l.Spec.LeaseTransitions != 5 {
		t.Errorf("created with %d transitions, want 5, one on from the copy it saw", l.Spec.LeaseTransitions)
	}
}

// TestFollowerHonoursTheTermOfADeletedLease: deleting a lease ends nobody's term, so a follower that saw
// it held takes or creates it only once that copy's term could have ended, whether nobody creates it again
// (the follower creates it, its terms counted on from the deleted copy's) or leasegate's provisioning
// creates it again unheld (the follower takes it, one term on from that lease's).
func TestFollowerHonoursTheTermOfADeletedLease(t *testing.T) {
	for _, tc := range []struct {
		name            string
		createdUnheld   bool
		wantTransitions int32
	}{
		{name: "created again by the follower", wantTransitions: 5},
		{name: "created again unheld by provisioning", createdUnheld: true, wantTransitions: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
			e, _ := runElector(t, store, clock, "a-0_ua")
			eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
			store.remove(t)
			if tc.createdUnheld {
				// At once: the elector may see the new lease without ever having seen it missing.
				if _, err := store.Create(context.Background(), &Lease{Namespace: "shop", Name: "orders"}); err != nil {
					t.Fatal(err)
				}
				eventually(t, "its watch brings the unheld lease", func() bool { l := e.watch.latest(); return l != nil && holderOf(l) == "" })
			} else {
				eventually(t, "its watch brings the delete", func() bool { return e.watch.latest() == nil })
			}
			// b's term, as last seen: renewed at start, 3 s, 1 s of margin.
			stepWithoutLeading(t, clock, e, start, start.Add(4*time.Second), "the delete, within b's term")
			clock.SetTime(start.Add(4*time.Second + time.Millisecond))
			stepUntilLeading(t, clock, e, "it leads once b's term has ended")
			if l := store.current(); holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != tc.wantTransitions {
				t.Errorf("lease %+v: want holder a-0_ua and %d transitions", l.Spec, tc.wantTransitions)
			}
		})
	}
}

// TestLeaderCreatesItsDeletedLeaseAgainAndKeepsLeading: a leader whose lease is deleted creates it again
// at once on the terms it renews on (its acquire time and transition count, the fencing token), without
// stepping down, as client-go's elector does; until then the fence refuses its writes.
func TestLeaderCreatesItsDeletedLeaseAgainAndKeepsLeading(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stalled bool
	}{
		{name: "its next renewal finds none"},
		{name: "its next renewal conflicts and its read finds none", stalled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, clock := storeWith(t, heldLease("b-0_ub", start.Add(-time.Minute))), clocktesting.NewFakeClock(start)
			e, changes := runElectorRecording(t, store, clock, "a-0_ua")
			eventually(t, "it takes the expired lease", func() bool { return e.Status().IsLeader })
			taken := store.current()
			store.mu.Lock()
			store.stalled = tc.stalled
			store.mu.Unlock()

			store.remove(t)
			clock.Step(testTiming.RetryPeriod) // a leader does not watch its lease: its renewal finds the delete
			eventually(t, "it creates the lease again", func() bool {
				store.mu.Lock()
				defer store.mu.Unlock()
				return store.object != nil
			})
			l := store.current()
			if holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != taken.Spec.LeaseTransitions || !l.Spec.AcquireTime.Time.Equal(taken.Spec.AcquireTime.Time) {
				t.Errorf("lease created again as %+v: want holder a-0_ua, %d transitions and acquired %v, as it was taken", l.Spec, taken.Spec.LeaseTransitions, taken.Spec.AcquireTime.Time)
			}
			clock.Step(testTiming.RetryPeriod)
			eventually(t, "it renews the lease it created", func() bool {
				return store.current().Spec.RenewTime.Time.After(l.Spec.RenewTime.Time)
			})
			c := changes()
			led := false
			for i, leading := range c {
				if led && !leading {
					t.Fatalf("status changes %v: it stopped leading (change %d)", c, i)
				}
				led = led || leading
			}
		})
	}
}

func TestElectorStepsDownWhenTheLeaseIsTakenFromIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "b-0_ub" })
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "its next renewal conflicts, and it steps down on reading another holder", func() bool { return !e.Status().IsLeader })
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
	store.writeObject(t, func(object map[string]any) {
		object["metadata"].(map[string]any)["labels"] = map[string]any{"team": "shop"}
	})
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "it renews despite the conflict", func() bool {
		return store.current().Spec.RenewTime.Time.Equal(start.Add(testTiming.RetryPeriod))
	})
	labels := store.currentObject(t)["metadata"].(map[string]any)["labels"]
	if team, _ := labels.(map[string]any)["team"]; !e.Status().IsLeader || team != "shop" {
		t.Errorf("after someone labelled the lease: leading %v, labels %v; want leading and the label kept", e.Status().IsLeader, labels)
	}
}

func TestElectorReleasesOnShutdown(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, stop := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	stop()
	if l := store.current(); holderOf(l) != "" || l.Spec.LeaseDurationSeconds != 1 {
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

			store.write(t, func(l *Lease) {
				l.Annotations = map[string]string{contract.HandoverFrom: "a-0_ua"}
				if tc.to != "" {
					l.Annotations[contract.HandoverTo] = tc.to
				}
			})
			// a sees the request at its next renewal (it does not watch its lease); the clock stands still
			// from there, so the others take the lease on the release alone.
			clock.Step(testTiming.RetryPeriod)
			eventually(t, "another candidate takes the lease, the clock standing still", func() bool {
				h := holderOf(store.current())
				return h != "" && h != "a-0_ua"
			})
			l := store.current()
			if tc.to != "" && holderOf(l) != "c-0_uc" {
				t.Fatalf("holder %s: want the named candidate c-0", holderOf(l))
			}
			if _, asked := lease.HandoverOf(l.Annotations); asked {
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
	store.write(t, func(l *Lease) {
		l.Annotations = map[string]string{contract.HandoverFrom: "a-0_ua", contract.HandoverTo: "c-0"}
	})
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "a releases at its next renewal", func() bool { return holderOf(store.current()) == "" })
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

// TestElectorReportsHowItTookTheLease: the elector says how the holder it took the lease from left it,
// for the agent's leasegate_agent_takeovers_total.
func TestElectorReportsHowItTookTheLease(t *testing.T) {
	tests := []struct {
		name  string
		leave func(t *testing.T, store *memStore, clock *clocktesting.FakeClock)
		want  lease.Takeover
	}{
		{name: "the holder released it", want: lease.TakeoverGraceful, leave: func(t *testing.T, store *memStore, _ *clocktesting.FakeClock) {
			store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "" })
		}},
		{name: "the holder released it on a handover request", want: lease.TakeoverHandover, leave: func(t *testing.T, store *memStore, _ *clocktesting.FakeClock) {
			store.write(t, func(l *Lease) {
				l.Spec.HolderIdentity = ""
				l.Annotations = map[string]string{contract.HandoverFrom: "b-0_ub"}
			})
		}},
		{name: "the holder stopped renewing and the lease expired", want: lease.TakeoverCrash, leave: func(_ *testing.T, _ *memStore, clock *clocktesting.FakeClock) {
			clock.Step(4 * time.Second)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
			took := make(chan lease.Takeover, 4)
			e, err := NewElector(Config{
				Lock: LeaseLock{store}, Namespace: "shop", Name: "orders", Identity: "a-0_ua", Timing: testTiming,
				ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard(),
				OnTakeover: func(k lease.Takeover) { took <- k },
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); e.Run(ctx) }()
			defer func() { cancel(); <-done }()
			settle()
			tt.leave(t, store, clock)
			eventually(t, "it takes the lease", func() bool { return e.Status().IsLeader })
			// Reported before it leads, so it is there once IsLeader is.
			select {
			case got := <-took:
				if got != tt.want {
					t.Errorf("takeover = %q, want %q", got, tt.want)
				}
			default:
				t.Fatal("the elector took the lease and reported no takeover")
			}
			if len(took) != 0 {
				t.Errorf("more than one takeover reported: %q", <-took)
			}
		})
	}
}
