package leaseelection

import (
	"context"
	"net/url"
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

// TestElectorReadsFirstAfterATakeWhoseAnswerNeverCame: a leader that stepped down while its watch is
// down tries to take its lease back, and the API server carries the take out but queues the answer past
// the request's deadline, as under the load of a restart. The lease names it again, at a version its
// copy does not have: its next attempt reads the lease and takes it, a retry period later, instead of
// writing on its copy, being refused as a conflict, and reading only a retry period after that.
func TestElectorReadsFirstAfterATakeWhoseAnswerNeverCame(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it leads", func() bool { return e.Status().IsLeader })
	cutWatches(store)
	store.mu.Lock()
	store.failWrites = statusErr(403, "Forbidden")
	store.mu.Unlock()
	for !clock.Now().After(start.Add(testTiming.RenewDeadline)) {
		clock.Step(testTiming.RetryPeriod)
		settle()
	}
	eventually(t, "it steps down at its renew deadline", func() bool { return !e.Status().IsLeader })
	store.mu.Lock()
	store.failWrites = nil
	store.loseAnswers, store.lostAnswer = 1, &url.Error{Op: "Put", URL: "https://api/leases/a", Err: context.DeadlineExceeded}
	store.mu.Unlock()
	_, before := store.counts()
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "its take is carried out, unanswered", func() bool { _, writes := store.counts(); return writes == before+1 })
	if l := store.current(); holderOf(l) != "a-0_ua" {
		t.Fatalf("the lease names %q after the unanswered take, want a-0_ua", holderOf(l))
	}
	settle()
	gets, _ := store.counts()
	clock.Step(testTiming.RetryPeriod)
	eventually(t, "it leads again one retry period after the unanswered take", func() bool { return e.Status().IsLeader })
	if after, writes := store.counts(); after != gets+1 || writes != before+2 {
		t.Errorf("after the unanswered take: %d reads and %d writes, want 1 read and then 1 write (no conflict on the stale copy)", after-gets, writes-before-1)
	}
}

// TestElectorWithItsWatchOpenTakesOnTheWatchsCopyAfterAnUnansweredTake: while its watch is open, a
// follower whose take was carried out but not answered sends no read: the watch brings the lease its
// take wrote, and it takes on that copy. Under the load that left the take unanswered, a read per
// unanswered write would only add to it.
func TestElectorWithItsWatchOpenTakesOnTheWatchsCopyAfterAnUnansweredTake(t *testing.T) {
	store, clock := storeWith(t, heldLease("b-0_ub", start)), clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it has listed the lease", func() bool { return e.Synced() })
	store.mu.Lock()
	store.loseAnswers, store.lostAnswer = 1, &url.Error{Op: "Put", URL: "https://api/leases/a", Err: context.DeadlineExceeded}
	store.mu.Unlock()
	gets, before := store.counts()
	store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "" })
	eventually(t, "it leads on the copy its watch brought, the clock standing still", func() bool { return e.Status().IsLeader })
	if after, writes := store.counts(); after != gets || writes != before+2 {
		t.Errorf("%d reads and %d writes, want no read and 2 writes (the unanswered take, the one on the watch's copy)", after-gets, writes-before)
	}
}
