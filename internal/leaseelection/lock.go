package leaseelection

import (
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/leasegate/leasegate/internal/lease"
)

// Lock is the lease an Elector elects on, and what holding it means: the elector's loop is the same for
// every kind, as client-go's leaderelection is over its resourcelock. A LeaseLock's holder leads while
// it renews; a MultiClusterLeaseLock's holder only stands for its cluster, and leads while the election
// controller confirms it.
//
// Its methods besides Store's are the loop's questions to the kind, so a Lock is one of the two here; a
// Store is what tests and load programs substitute.
type Lock interface {
	Store

	// handover is the handover request on l that candidates and the holder honour; ok is false when there
	// is none, or the kind has none.
	handover(l *Lease) (h lease.Handover, ok bool)
	// wrote records a write of ours as holder, started at started.
	wrote(l *Lease, started time.Time)
	// answersHolder reports whether the object carries answers to its holder's writes, so that each of
	// our own writes, as written or as the watch brings it back, is published.
	answersHolder() bool
	// describe completes the status of l, of which s holds the holder, the transitions and whether this
	// elector holds l (IsLeader), with what the kind says: the fencing token, a handover, a global holder,
	// and whether holding l is leading.
	describe(s *lease.Status, l *Lease, identity string, renewDeadline time.Duration, clock clock.PassiveClock)
	// termEnd is when (Unix nanoseconds) the term granted on top of the holder's renewals ends; bounded is
	// false when the holder leads on its renewals alone.
	termEnd() (until int64, bounded bool)
	// forgetTerm ends any such term, as the elector steps down.
	forgetTerm()
	// termLapsed is why the term ended while the elector still holds the object, of which the status
	// names globalHolder: the reason its "Stopped leading" line gives.
	termLapsed(globalHolder, identity string, renewDeadline time.Duration) string
	// steppedDownWithoutLeading is the message the elector logs when it stops holding the object without
	// leading on it.
	steppedDownWithoutLeading() string
	// streamer is the Store's StreamList, nil when the Store has none.
	streamer() streamingLister
}

// LeaseLock elects on coordination.k8s.io/v1 Leases (a Store from NewClient): the holder leads while it
// renews, and a handover asked on the lease is honoured.
type LeaseLock struct {
	Store
}

var _ Lock = LeaseLock{}

func (LeaseLock) handover(l *Lease) (lease.Handover, bool) { return lease.HandoverOf(l.Annotations) }

func (LeaseLock) wrote(*Lease, time.Time) {}

func (LeaseLock) answersHolder() bool { return false }

// describe: the fencing token is the Lease's leaseTransitions.
func (LeaseLock) describe(s *lease.Status, l *Lease, _ string, _ time.Duration, _ clock.PassiveClock) {
	s.FencingToken = int64(l.Spec.LeaseTransitions)
	if h, asked := lease.HandoverOf(l.Annotations); asked {
		s.Handover = &h
	}
}

func (LeaseLock) termEnd() (int64, bool) { return 0, false }

func (LeaseLock) forgetTerm() {}

// termLapsed: a Lease's holder leads until its renewals stop for the renew deadline.
func (LeaseLock) termLapsed(_, _ string, renewDeadline time.Duration) string {
	return renewalsStopped(renewDeadline)
}

// steppedDownWithoutLeading: holding a Lease is leading it.
func (LeaseLock) steppedDownWithoutLeading() string { return "Stopped leading" }

func (l LeaseLock) streamer() streamingLister { return streamerOf(l.Store) }

// streamerOf is store's StreamList, nil when it has none.
func streamerOf(store Store) streamingLister {
	s, _ := store.(streamingLister)
	return s
}

// renewalsStopped is the reason a holder steps down when it could not renew for the renew deadline.
func renewalsStopped(renewDeadline time.Duration) string {
	return fmt.Sprintf("could not renew for the renew deadline (%s)", renewDeadline)
}
