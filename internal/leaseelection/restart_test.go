package leaseelection

import (
	"context"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/lease"
)

// What an API server restart does to an elector: every watch drops, and the restarted server meets the
// electors' requests all at once.

// cutWatches ends every watch and refuses new ones (each ends at once, as a server that cannot serve
// them yet), so the elector's watch stays down.
func cutWatches(s *memStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endWatches = true
	s.endWatchersLocked()
}

// endWatchersLocked ends every open watch, as a connection cut under them does.
func (s *memStore) endWatchersLocked() {
	for w := range s.watchers {
		close(w)
	}
	s.watchers = nil
}

func (s *memStore) counts() (gets, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.writes
}

// TestFollowerWithItsWatchDownReadsOnlyWhenItsCopyCouldChangeHands: a follower whose watch is down does
// not read its lease every retry period while the last copy it saw is held by another; it reads once
// that copy's term could have ended, and takes the lease if it did.
func TestFollowerWithItsWatchDownReadsOnlyWhenItsCopyCouldChangeHands(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	cutWatches(store)
	// b's copy is in force until start + 3 s + the 1 s margin.
	expires := start.Add(4 * time.Second)
	for clock.Now().Add(testTiming.RetryPeriod).Before(expires) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	if gets, _ := store.counts(); gets != 0 {
		t.Fatalf("%d reads of a lease its copy shows held for %s more: want none", gets, expires.Sub(clock.Now()))
	}
	clock.Step(expires.Sub(clock.Now()))
	eventually(t, "it reads the lease once its copy's term could have ended, and takes it", func() bool { return e.Status().IsLeader })
	if gets, _ := store.counts(); gets != 1 {
		t.Errorf("%d reads, want 1", gets)
	}
}

// TestElectorThatSteppedDownRetriesItsOwnLeaseEveryRetryPeriodWhileShed: a leader that could not renew
// for its renew deadline (an API server restart outlasting it) and whose attempts to take its own lease
// back are shed keeps trying every retry period (plus jitter), not at a follower's doubling backoff, so
// the lease has a leader again soon after the server answers.
func TestElectorThatSteppedDownRetriesItsOwnLeaseEveryRetryPeriodWhileShed(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	store.mu.Lock()
	store.failWrites = shedErr(0)
	store.mu.Unlock()
	for !clock.Now().After(start.Add(testTiming.RenewDeadline)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	eventually(t, "it steps down at its renew deadline", func() bool { return !e.Status().IsLeader })
	_, before := store.counts()
	// Each wait is the retry period plus up to half of it of jitter.
	for attempt := 1; attempt <= 5; attempt++ {
		clock.Step(testTiming.RetryPeriod*3/2 + time.Millisecond)
		eventually(t, "it tries its own lease again within 1.5 retry periods", func() bool {
			_, writes := store.counts()
			return writes >= before+attempt
		})
		settle()
	}
	store.mu.Lock()
	store.failWrites = nil
	store.mu.Unlock()
	clock.Step(testTiming.RetryPeriod*3/2 + time.Millisecond)
	eventually(t, "it leads again once the server answers", func() bool { return e.Status().IsLeader })
	if l := store.current(); holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != 0 {
		t.Errorf("lease %+v: want a-0_ua's own term, 0 transitions", l.Spec)
	}
}

// TestElectorThatSteppedDownTakesItsOwnLeaseBackWithoutReadingIt: a leader that stepped down at its renew
// deadline while its watch is down takes its lease back on the copy it last wrote, as it would renew it,
// without reading it first: one request per lease once the server answers.
func TestElectorThatSteppedDownTakesItsOwnLeaseBackWithoutReadingIt(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	cutWatches(store)
	store.mu.Lock()
	store.failWrites = statusErr(403, "Forbidden") // a restarted API server before its authorizer has synced
	store.mu.Unlock()
	for !clock.Now().After(start.Add(testTiming.RenewDeadline)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	eventually(t, "it steps down at its renew deadline", func() bool { return !e.Status().IsLeader })
	store.mu.Lock()
	store.failWrites = nil
	store.mu.Unlock()
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "it leads again", func() bool { return e.Status().IsLeader })
	if gets, _ := store.counts(); gets != 0 {
		t.Errorf("%d reads before taking its own lease back: want none", gets)
	}
	if l := store.current(); holderOf(l) != "a-0_ua" || l.Spec.LeaseTransitions != 0 {
		t.Errorf("lease %+v: want a-0_ua's own term, 0 transitions", l.Spec)
	}
}

// answeringLock is a LeaseLock whose object answers its holder, as a MultiClusterLeaseLock's does: its
// leader watches its lease, as only such a leader does.
type answeringLock struct{ LeaseLock }

func (answeringLock) answersHolder() bool { return true }

// runWatchingLeader is runElector on an answeringLock.
func runWatchingLeader(t *testing.T, store Store, clock *clocktesting.FakeClock, identity string) (*Elector, context.CancelFunc) {
	t.Helper()
	return startElector(t, Config{Lock: answeringLock{LeaseLock{store}}, Namespace: "shop", Name: "orders", Identity: identity,
		Timing: testTiming, ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard()})
}

// refused is a request to an API server that is not running: nothing listens at its address.
var refused = &url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}

// failWatches ends every open watch and answers the watches that follow with err (none if nil). It
// returns how many watches were sent before, so that a test can tell how many met the previous error.
func failWatches(s *memStore, err error) (watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWatches = err
	s.endWatchersLocked()
	return s.watches
}

func (s *memStore) watching() (open bool, lists, watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers) > 0, s.lists, s.watches
}

// TestLeaderWatchResumesFromItsNextRenewalWithoutAList: after an API server restart, the versions every
// watch had have expired. A leader's watch neither lists nor retries on its own: it waits for the
// leader's next renewal and watches from the version that renewal wrote, which then tells the leader of
// the next change at once.
func TestLeaderWatchResumesFromItsNextRenewalWithoutAList(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runWatchingLeader(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	settle()
	_, lists, watches := store.watching()
	// Someone annotates the lease while the server restarts: the leader's next renewal conflicts, reads the
	// lease, and renews on it.
	store.restart(t, func(l *Lease) { l.Annotations = map[string]string{"example.com/team": "payments"} })
	eventually(t, "its watch resumes, expires, and waits", func() bool {
		_, _, n := store.watching()
		return n == watches+1
	})
	settle()
	if open, l, n := store.watching(); open || l != lists || n != watches+1 {
		t.Fatalf("before the next renewal: watch open %v, %d lists, %d watches: want none open, %d lists, %d watches", open, l, n, lists, watches+1)
	}
	eventually(t, "it renews and watches again", func() bool {
		settle()
		clock.Step(testTiming.RetryPeriod)
		open, _, _ := store.watching()
		return open
	})
	if _, l, _ := store.watching(); l != lists {
		t.Errorf("%d lists after the restart: want none", l-lists)
	}
	if !e.Status().IsLeader {
		t.Fatal("it stopped leading")
	}
	// The clock stands still from here: only the watch can tell the leader.
	store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "b-0_ub" })
	eventually(t, "its watch tells it the lease was taken", func() bool { return !e.Status().IsLeader })
}

// TestLeaderWatchWaitsForARenewalAndRetriesOnItsOwnOnceItStepsDown: a leader whose watch is down sends
// no watch, however long it waits, until it renews; one that never renews again (the server sheds every
// write until its renew deadline) steps down, and its watch then retries as a follower's does.
func TestLeaderWatchWaitsForARenewalAndRetriesOnItsOwnOnceItStepsDown(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runWatchingLeader(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	settle()
	_, _, watches := store.watching()
	store.mu.Lock()
	store.failWrites = shedErr(0)
	store.mu.Unlock()
	failWatches(store, refused)
	eventually(t, "its watch resumes and is refused", func() bool {
		_, _, n := store.watching()
		return n == watches+1
	})
	// A follower's watch would have retried by now: the backoff plus a draw over the longer of it and the
	// retry period.
	for clock.Now().Before(start.Add(watchBackoffMin + max(testTiming.RetryPeriod, watchBackoffMin))) {
		clock.Step(testTiming.RetryPeriod / 5)
		settle()
	}
	if !e.Status().IsLeader {
		t.Fatal("it stepped down before its renew deadline")
	}
	if _, _, n := store.watching(); n != watches+1 {
		t.Errorf("%d watches while it led without renewing: want none", n-watches-1)
	}
	for !clock.Now().After(start.Add(testTiming.RenewDeadline)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	eventually(t, "it steps down at its renew deadline", func() bool { return !e.Status().IsLeader })
	failWatches(store, nil)
	eventually(t, "its watch retries on its own", func() bool {
		settle()
		clock.Step(watchBackoffMax)
		open, _, _ := store.watching()
		return open
	})
}

// TestLeaderWatchThatKeepsFailingBacksOff: a leader's watch that fails on every attempt (its rights to
// watch are missing, say) is resumed after a renewal no sooner than its backoff allows, not at every
// renewal.
func TestLeaderWatchThatKeepsFailingBacksOff(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	settle()
	_, _, before := store.watching()
	failWatches(store, statusErr(403, "Forbidden"))
	// 12 s: 24 renewals, in which the backoff (0.8, 1.6, 3.2, 6.4 s) allows 5 attempts.
	for end := clock.Now().Add(12 * time.Second); clock.Now().Before(end); {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	if !e.Status().IsLeader {
		t.Fatal("it stopped leading")
	}
	if _, _, n := store.watching(); n-before > 5 {
		t.Errorf("%d watches in 12 s of renewals every %s: want at most 5, as the backoff allows", n-before, testTiming.RetryPeriod)
	}
}

// TestFollowerWatchListsOnlyAfterARefusedConnection: a follower's watch that failed resumes from the
// version it had, except after a refused connection: no server was running, and the one that answers
// next has a watch cache that starts after that version, so resuming would only expire.
func TestFollowerWatchListsOnlyAfterARefusedConnection(t *testing.T) {
	tests := []struct {
		name           string
		err            error
		listsAfterEach bool
	}{
		{name: "refused: it lists", err: refused, listsAfterEach: true},
		{name: "unavailable: it resumes from its version", err: statusErr(503, "ServiceUnavailable")},
		{name: "reset: it resumes from its version", err: &url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, clock := storeWith(t, heldLease("b-0_ub", start.Add(time.Hour))), clocktesting.NewFakeClock(start)
			e, _ := runElector(t, store, clock, "a-0_ua")
			eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
			settle()
			_, lists, watches := store.watching()
			failWatches(store, tt.err)
			eventually(t, "its watch fails", func() bool {
				settle()
				clock.Step(watchBackoffMax) // the cut watch delivered nothing: it waits before it resumes
				_, _, n := store.watching()
				return n > watches
			})
			// On a loaded machine the clock may move past more than one failed attempt: each is judged.
			failed := failWatches(store, nil) - watches
			eventually(t, "it watches again", func() bool {
				settle()
				clock.Step(watchBackoffMax)
				open, _, _ := store.watching()
				return open
			})
			want := 0
			if tt.listsAfterEach {
				want = failed
			}
			if _, l, _ := store.watching(); l-lists != want {
				t.Errorf("%d lists after %d failed watches, want %d", l-lists, failed, want)
			}
		})
	}
}

// TestWatchThatNeverListedSpreadsItsRetryToo: a watch whose first list failed draws its next attempt over
// the retry period, as one that had listed does: agents starting together whose first lists were shed
// must not all come back within the backoff.
func TestWatchThatNeverListedSpreadsItsRetryToo(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	store.failLists = statusErr(503, "ServiceUnavailable")
	// So long that a retry drawn over it lands within the backoff's first second once in millions.
	const retryPeriod = 1000 * time.Hour
	w := runWatch(t, store, clock, lease.Timing{LeaseDuration: 2 * retryPeriod, RenewDeadline: retryPeriod, RetryPeriod: retryPeriod})
	lists := func() int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.lists
	}
	eventually(t, "its first list fails", func() bool { return lists() == 1 })
	store.mu.Lock()
	store.failLists = nil
	store.mu.Unlock()
	settle()
	clock.Step(watchBackoffMin + time.Second)
	settle()
	if n := lists(); n != 1 {
		t.Fatalf("%d lists a second after the backoff: the first list's retry was not spread over the retry period", n)
	}
	clock.Step(retryPeriod)
	eventually(t, "it lists again within the backoff and a retry period", func() bool { return w.synced.Load() })
}

// TestFollowerListsAfterARestartOverTheLeaseDuration: after a refused connection (the API server was
// restarted) a follower's watch that had a copy of the lease draws its list over the lease duration, so
// that the followers' lists do not crowd the leaders' renewals out of the restarted server; a watch cut
// any other way resumes within the retry period, and one that never listed retries within it too, having
// no copy to judge the lease from meanwhile.
func TestFollowerListsAfterARestartOverTheLeaseDuration(t *testing.T) {
	// A lease duration so long that a list drawn over it lands within the first minutes once in tens of
	// thousands.
	const retryPeriod, leaseDuration = time.Second, 1000 * time.Hour
	timing := lease.Timing{LeaseDuration: leaseDuration, RenewDeadline: retryPeriod / 2, RetryPeriod: retryPeriod}
	reset := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}
	// minutes moves the clock on a few times by more than any backoff and retry period.
	minutes := func(clock *clocktesting.FakeClock) {
		for range 3 {
			settle()
			clock.Step(watchBackoffMax + retryPeriod)
		}
		settle()
	}
	tests := []struct {
		name string
		err  error
		// overLeaseDuration: the watch lists, not within minutes but within the lease duration.
		overLeaseDuration bool
	}{
		{name: "refused: it lists over the lease duration", err: refused, overLeaseDuration: true},
		{name: "reset: it resumes within the retry period", err: reset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, clock := storeWith(t, heldLease("b-0_ub", start.Add(time.Hour))), clocktesting.NewFakeClock(start)
			w := runWatch(t, store, clock, timing)
			eventually(t, "it watches", func() bool {
				open, _, _ := store.watching()
				return open && w.synced.Load()
			})
			_, lists, watches := store.watching()
			failWatches(store, tt.err)
			eventually(t, "its watch resumes and fails", func() bool {
				settle()
				if _, _, n := store.watching(); n > watches {
					return true
				}
				clock.Step(watchBackoffMax) // the cut watch delivered nothing: it waits before it resumes
				return false
			})
			failWatches(store, nil)
			minutes(clock)
			open, l, _ := store.watching()
			if open == tt.overLeaseDuration || l != lists {
				t.Fatalf("minutes after the failure: watch open %v after %d lists, want open %v after none", open, l-lists, !tt.overLeaseDuration)
			}
			if !tt.overLeaseDuration {
				return
			}
			clock.Step(leaseDuration)
			eventually(t, "it lists and watches within the lease duration", func() bool {
				open, _, _ := store.watching()
				return open
			})
			if _, l, _ := store.watching(); l != lists+1 {
				t.Errorf("%d lists, want 1", l-lists)
			}
		})
	}
	t.Run("refused before its first list: it retries within the retry period", func(t *testing.T) {
		store, clock := storeWith(t, heldLease("b-0_ub", start.Add(time.Hour))), clocktesting.NewFakeClock(start)
		store.mu.Lock()
		store.failLists = refused
		store.mu.Unlock()
		w := runWatch(t, store, clock, timing)
		eventually(t, "its first list is refused", func() bool {
			_, l, _ := store.watching()
			return l > 0
		})
		store.mu.Lock()
		store.failLists = nil
		store.mu.Unlock()
		minutes(clock)
		if !w.synced.Load() {
			t.Fatal("it had not listed minutes after its first list was refused")
		}
	})
}

// runWatch runs a watch of lease shop/orders on store alone, without an elector, until the test ends.
func runWatch(t *testing.T, store *memStore, clock *clocktesting.FakeClock, timing lease.Timing) *leaseWatch {
	w := newLeaseWatch(store, nil, "shop", "orders", timing, clock, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, make(chan struct{}, 1))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}
