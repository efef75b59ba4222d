package leaseelection

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
)

// shedErr is the API server shedding a request (API Priority and Fairness's 429) with a Retry-After.
func shedErr(retryAfter time.Duration) error {
	return &kubeclient.StatusError{Status: kubeclient.Status{Code: http.StatusTooManyRequests, Reason: "TooManyRequests"}, RetryAfter: retryAfter}
}

func noJitter(time.Duration) time.Duration     { return 0 }
func mostJitter(d time.Duration) time.Duration { return d - 1 }

func TestWatchRetryDelayNeverUndercutsRetryAfter(t *testing.T) {
	const retryPeriod = 2 * time.Second
	tests := []struct {
		name                string
		backoff, retryAfter time.Duration
		jitter              func(time.Duration) time.Duration
		want                time.Duration
	}{
		{name: "no Retry-After: the backoff", backoff: 800 * time.Millisecond, jitter: noJitter, want: 800 * time.Millisecond},
		{name: "the jitter is drawn over the retry period while the backoff is shorter", backoff: 800 * time.Millisecond, jitter: mostJitter, want: 800*time.Millisecond + retryPeriod - 1},
		{name: "the jitter is drawn over the backoff once it is longer", backoff: 10 * time.Second, jitter: mostJitter, want: 20*time.Second - 1},
		{name: "a Retry-After longer than the backoff replaces it", backoff: 800 * time.Millisecond, retryAfter: 5 * time.Second, jitter: noJitter, want: 5 * time.Second},
		{name: "the jitter comes on top of the Retry-After, so agents told alike do not return alike", backoff: 800 * time.Millisecond, retryAfter: 5 * time.Second, jitter: mostJitter, want: 7*time.Second - 1},
		{name: "a Retry-After shorter than the backoff changes nothing", backoff: 10 * time.Second, retryAfter: time.Second, jitter: noJitter, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := watchRetryDelay(retryPeriod, tt.backoff, tt.retryAfter, tt.jitter)
			if got != tt.want || got < tt.retryAfter {
				t.Errorf("watchRetryDelay(%s, %s, %s) = %s, want %s (never under the Retry-After)", retryPeriod, tt.backoff, tt.retryAfter, got, tt.want)
			}
		})
	}
}

// TestWatchRetriesAreSpreadOverTheRetryPeriod: after an API server restart every agent's watch fails at
// once; their next attempts are drawn over a window of one retry period after the backoff, not all at
// once.
func TestWatchRetriesAreSpreadOverTheRetryPeriod(t *testing.T) {
	const agents = 1000
	retryPeriod := 2 * time.Second
	lowest, highest := time.Duration(1<<62), time.Duration(0)
	for range agents {
		d := watchRetryDelay(retryPeriod, watchBackoffMin, 0, rand.N[time.Duration])
		lowest, highest = min(lowest, d), max(highest, d)
	}
	if lowest < watchBackoffMin || highest >= watchBackoffMin+retryPeriod {
		t.Errorf("retries between %s and %s: want within [%s, %s)", lowest, highest, watchBackoffMin, watchBackoffMin+retryPeriod)
	}
	if highest-lowest < retryPeriod/2 {
		t.Errorf("%d retries span only %s of the %s window: not spread", agents, highest-lowest, retryPeriod)
	}
}

func TestFollowerBackoffDoublesWhileShedAndHonoursRetryAfter(t *testing.T) {
	defaultTiming := lease.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	longTiming := lease.Timing{LeaseDuration: 150 * time.Second, RenewDeadline: 100 * time.Second, RetryPeriod: 20 * time.Second}
	shortTiming := lease.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 400 * time.Millisecond}
	slowTiming := lease.Timing{LeaseDuration: 5 * time.Minute, RenewDeadline: 200 * time.Second, RetryPeriod: 40 * time.Second}
	tests := []struct {
		name       string
		timing     lease.Timing
		shed       int
		retryAfter time.Duration
		jitter     func(time.Duration) time.Duration
		want       time.Duration
	}{
		{name: "first attempt shed without Retry-After: a second", timing: defaultTiming, shed: 1, jitter: noJitter, want: time.Second},
		{name: "first attempt shed: the Retry-After", timing: defaultTiming, shed: 1, retryAfter: time.Second, jitter: noJitter, want: time.Second},
		{name: "second in a row: doubled", timing: defaultTiming, shed: 2, retryAfter: time.Second, jitter: noJitter, want: 2 * time.Second},
		{name: "third in a row: doubled again", timing: defaultTiming, shed: 3, retryAfter: time.Second, jitter: noJitter, want: 4 * time.Second},
		{name: "many in a row: at most a lease duration shorter than the server's longest Retry-After", timing: defaultTiming, shed: 40, retryAfter: time.Second, jitter: noJitter, want: 15 * time.Second},
		{name: "a longer Retry-After wins", timing: defaultTiming, shed: 2, retryAfter: 5 * time.Second, jitter: noJitter, want: 5 * time.Second},
		{name: "a Retry-After the server doubled is not doubled again", timing: defaultTiming, shed: 3, retryAfter: 8 * time.Second, jitter: noJitter, want: 8 * time.Second},
		{name: "the own backoff past the Retry-After wins", timing: defaultTiming, shed: 5, retryAfter: 2 * time.Second, jitter: noJitter, want: 15 * time.Second},
		{name: "a Retry-After past the lease duration still wins", timing: defaultTiming, shed: 40, retryAfter: 30 * time.Second, jitter: noJitter, want: 30 * time.Second},
		{name: "a long retry period is not where it starts", timing: longTiming, shed: 1, retryAfter: time.Second, jitter: noJitter, want: time.Second},
		{name: "a long lease duration: at most the server's longest Retry-After", timing: longTiming, shed: 9, retryAfter: time.Second, jitter: noJitter, want: 32 * time.Second},
		{name: "a retry period past the server's longest Retry-After: at most the retry period, as often as a client-go follower", timing: slowTiming, shed: 9, retryAfter: time.Second, jitter: noJitter, want: 40 * time.Second},
		{name: "a retry period past the server's longest Retry-After is still not where it starts", timing: slowTiming, shed: 1, jitter: noJitter, want: time.Second},
		{name: "a Retry-After past every cap still wins", timing: slowTiming, shed: 40, retryAfter: 50 * time.Second, jitter: noJitter, want: 50 * time.Second},
		{name: "a retry period under a second is where it starts without Retry-After", timing: shortTiming, shed: 1, jitter: noJitter, want: 400 * time.Millisecond},
		{name: "jitter adds up to half the backoff", timing: defaultTiming, shed: 2, retryAfter: time.Second, jitter: mostJitter, want: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := followerBackoff(tt.timing, tt.shed, tt.retryAfter, tt.jitter)
			if got != tt.want || got < tt.retryAfter {
				t.Errorf("followerBackoff(%d shed, Retry-After %s) = %s, want %s", tt.shed, tt.retryAfter, got, tt.want)
			}
		})
	}
}

func TestRenewRetryDelay(t *testing.T) {
	tests := []struct {
		name             string
		err              error
		took, left, want time.Duration
	}{
		{name: "a failure without Retry-After: the retry period", err: errors.New("connection refused"), left: 8 * time.Second, want: 2 * time.Second},
		{name: "shed with a short Retry-After: sooner than the retry period", err: shedErr(time.Second), left: 8 * time.Second, want: time.Second},
		{name: "shed with a long Retry-After: that long", err: shedErr(5 * time.Second), left: 8 * time.Second, want: 5 * time.Second},
		{name: "never past the renew deadline", err: shedErr(30 * time.Second), left: 3 * time.Second, want: 3 * time.Second},
		{name: "a 429 without Retry-After: the retry period", err: shedErr(0), left: 8 * time.Second, want: 2 * time.Second},
		{name: "a retry period left: halfway to the deadline, not at it", err: errors.New("connection refused"), left: 2 * time.Second, want: time.Second},
		{name: "less than a retry period left: halfway again", err: errors.New("403 Forbidden"), left: time.Second, want: 500 * time.Millisecond},
		{name: "halving ends at a sixteenth of the retry period: the deadline", err: errors.New("connection refused"), left: 200 * time.Millisecond, want: 200 * time.Millisecond},
		{name: "a Retry-After shorter than the time left: the Retry-After", err: shedErr(time.Second), left: 1500 * time.Millisecond, want: time.Second},
		{name: "halfway would undercut the Retry-After: the deadline", err: shedErr(time.Second), left: time.Second, want: time.Second},
		{name: "the deadline passed: at once, to step down", err: errors.New("context deadline exceeded"), left: -time.Millisecond, want: 0},
		{name: "a try that was slow to fail: a retry period after it started", err: errors.New("403 Forbidden"), took: 1500 * time.Millisecond, left: 8 * time.Second, want: 500 * time.Millisecond},
		{name: "a try that failed after a retry period or more: at once", err: errors.New("context deadline exceeded"), took: 3 * time.Second, left: 8 * time.Second, want: 0},
		{name: "a Retry-After counts from its answer however long the try took", err: shedErr(time.Second), took: 1500 * time.Millisecond, left: 8 * time.Second, want: time.Second},
		{name: "a slow try with less than a retry period left: halfway to the deadline", err: errors.New("connection refused"), took: 500 * time.Millisecond, left: time.Second, want: 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renewRetryDelay(2*time.Second, tt.took, tt.err, tt.left); got != tt.want {
				t.Errorf("renewRetryDelay(%v after %s, %s left) = %s, want %s", tt.err, tt.took, tt.left, got, tt.want)
			}
		})
	}
}

// TestShedFollowerWaitsOutRetryAfter: a follower whose take the server sheds does not try again before
// the Retry-After has passed, not at its next retry period, nor when a watch event shows the lease free.
func TestShedFollowerWaitsOutRetryAfter(t *testing.T) {
	store, clock := storeWith(t, heldLease("", start)), clocktesting.NewFakeClock(start)
	retryAfter := 4 * testTiming.RetryPeriod
	store.mu.Lock()
	store.failWrites = shedErr(retryAfter)
	created := store.writes
	store.mu.Unlock()
	writes := func() int { // the elector's
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.writes - created
	}
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it tries to take the free lease", func() bool { return writes() == 1 })
	for range 3 {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	store.write(t, func(l *Lease) { l.Spec.RenewTime = lease.MicroTime{Time: clock.Now()} }) // still free: a watch event
	settle()
	if n := writes(); n != 1 {
		t.Fatalf("%d takes within %s of a Retry-After of %s: want 1", n, 3*testTiming.RetryPeriod, retryAfter)
	}
	store.mu.Lock()
	store.failWrites = nil
	store.mu.Unlock()
	eventually(t, "it takes the lease once the Retry-After (and its jitter) has passed", func() bool {
		clock.Step(testTiming.RetryPeriod)
		settle()
		return e.Status().IsLeader
	})
}

// TestShedLeaderRenewsAfterRetryAfterAndKeepsLeading: a leader whose renewal is shed tries again after
// the Retry-After, sooner than its retry period when the server allows it, and keeps the lease.
func TestShedLeaderRenewsAfterRetryAfterAndKeepsLeading(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	writes := func() int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.writes
	}
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	created := writes()
	retryAfter := testTiming.RetryPeriod * 3 / 2
	store.mu.Lock()
	store.failWrites = shedErr(retryAfter)
	store.mu.Unlock()
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "it renews at its retry period and is shed", func() bool { return writes() == created+1 })
	settle() // the write is counted before the elector sets its timer from the answer: let it set it
	clock.Step(retryAfter - time.Millisecond)
	settle()
	if n := writes(); n != created+1 {
		t.Fatalf("%d renewals before the Retry-After of %s passed: want 1", n-created, retryAfter)
	}
	store.mu.Lock()
	store.failWrites = nil
	store.mu.Unlock()
	clock.Step(time.Millisecond)
	eventually(t, "it renews once the Retry-After has passed", func() bool { return writes() == created+2 })
	if !e.Status().IsLeader || holderOf(store.current()) != "a-0_ua" {
		t.Error("the shed leader lost the lease")
	}
}

// TestWatchResumesFromTheLastVersionAndListsOnlyWhenExpired: a watch the server ends is resumed from
// the last version it saw, without a list; only an expired version (410) makes the elector list again.
func TestWatchResumesFromTheLastVersionAndListsOnlyWhenExpired(t *testing.T) {
	tests := []struct {
		name      string
		end       func(t *testing.T, s *memStore)
		wantLists int
		// watches until it watches again: the first; the resumed one (and the new one after the list).
		wantWatches int
	}{
		{name: "the server ends the watch: resumed, no list", wantLists: 1, wantWatches: 2, end: func(t *testing.T, s *memStore) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for w := range s.watchers {
				close(w)
			}
			s.watchers = nil
		}},
		{name: "the version expired (410): listed again", wantLists: 2, wantWatches: 3, end: func(t *testing.T, s *memStore) {
			s.restart(t, func(l *Lease) { l.Spec.RenewTime = lease.MicroTime{Time: start.Add(time.Minute)} })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// b holds the lease throughout: a stays a follower, whose watch this is.
			held := heldLease("b-0_ub", start)
			held.Spec.LeaseDurationSeconds = 3600
			store, clock := storeWith(t, held), clocktesting.NewFakeClock(start)
			e, _ := runElector(t, store, clock, "a-0_ua")
			eventually(t, "it watches", func() bool { return e.watch.watching.Load() })
			tt.end(t, store)
			eventually(t, "it watches again", func() bool {
				settle()
				store.mu.Lock()
				watches := store.watches
				store.mu.Unlock()
				if watches < tt.wantWatches {
					clock.Step(watchBackoffMax)
					return false
				}
				return e.watch.watching.Load()
			})
			store.mu.Lock()
			defer store.mu.Unlock()
			if store.lists != tt.wantLists {
				t.Errorf("%d lists, want %d", store.lists, tt.wantLists)
			}
		})
	}
}
