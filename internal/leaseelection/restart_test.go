package leaseelection

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// What an API server restart does to an elector: every watch drops, and the restarted server meets the
// electors' requests all at once.

// cutWatches ends every watch and refuses new ones (each ends at once, as a server that cannot serve
// them yet), so the elector's watch stays down.
func cutWatches(s *memStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endWatches = true
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
