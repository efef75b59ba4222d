package leaseelection

import (
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/leasegate/leasegate/internal/lease"
)

// MultiClusterLeaseLock elects on the spec of MultiClusterLeases (a Store from NewMultiClusterClient)
// exactly as on a Lease, but winning that local election is only candidacy: the holder leads only while
// the election controller has confirmed one of its heartbeats naming it global leader, for
// lease.ConfirmedFor after that heartbeat's write began. A MultiClusterLease has no handover: its term is
// the election controller's to grant. One lock serves one elector: it keeps that elector's heartbeats.
type MultiClusterLeaseLock struct {
	Store

	// writes are the elector's latest heartbeats (loop-owned), confirmed (Unix nanoseconds) the end of
	// the term the controller's answers grant it.
	writes    []heartbeat
	confirmed atomic.Int64
}

var _ Lock = (*MultiClusterLeaseLock)(nil)

func (*MultiClusterLeaseLock) handover(*Lease) (lease.Handover, bool) { return lease.Handover{}, false }

func (m *MultiClusterLeaseLock) streamer() streamingLister { return streamerOf(m.Store) }

// maxHeartbeats is how many of its latest writes a multi-cluster elector remembers: the controller
// answers within a renewal or two, or the term lapses anyway.
const maxHeartbeats = 8

// wrote records a heartbeat for the controller's answer.
func (m *MultiClusterLeaseLock) wrote(l *Lease, started time.Time) {
	if len(m.writes) == maxHeartbeats {
		m.writes = append(m.writes[:0], m.writes[1:]...)
	}
	m.writes = append(m.writes, heartbeat{generation: l.Generation, started: started})
}

func (*MultiClusterLeaseLock) answersHolder() bool { return true }

// describe: the fencing token is the controller's (status.fencingToken), 0 while nobody leads globally;
// leading this cluster's election is candidacy, and leading means the controller confirmed it.
func (m *MultiClusterLeaseLock) describe(s *lease.Status, l *Lease, identity string, renewDeadline time.Duration, clock clock.PassiveClock) {
	s.FencingToken = 0
	if l.Global != nil {
		s.FencingToken = l.Global.FencingToken
	}
	s.GlobalHolder, _, _ = globalAnswer(l)
	if s.IsLeader {
		m.confirm(l, identity, renewDeadline)
		s.IsLeader = clock.Now().UnixNano() < m.confirmed.Load()
	}
}

// confirm reads the controller's answer on l and extends (or, if it names someone else for our latest
// write, ends) the term it grants identity.
func (m *MultiClusterLeaseLock) confirm(l *Lease, identity string, renewDeadline time.Duration) {
	holder, observed, ok := globalAnswer(l)
	if !ok || len(m.writes) == 0 {
		return
	}
	if confirmed, decided := lease.Confirms(holder, observed, identity, m.writes[len(m.writes)-1].generation); decided && !confirmed {
		m.confirmed.Store(0)
		return
	}
	if until := confirmedUntil(l, identity, m.writes, renewDeadline).UnixNano(); until > m.confirmed.Load() {
		m.confirmed.Store(until)
	}
}

func (m *MultiClusterLeaseLock) termEnd() (int64, bool) { return m.confirmed.Load(), true }

func (m *MultiClusterLeaseLock) forgetTerm() {
	m.confirmed.Store(0)
	m.writes = m.writes[:0]
}

// termLapsed: the controller named another global leader, or confirmed none of our heartbeats in time.
func (*MultiClusterLeaseLock) termLapsed(globalHolder, identity string, renewDeadline time.Duration) string {
	if globalHolder != identity {
		return fmt.Sprintf("the election controller names %q as the global leader", globalHolder)
	}
	return fmt.Sprintf("no heartbeat was confirmed for the renew deadline (%s)", renewDeadline)
}

// steppedDownWithoutLeading: a candidate the controller did not confirm (a standby) stops standing for
// its cluster, but did not lead, so it does not say it stopped.
func (*MultiClusterLeaseLock) steppedDownWithoutLeading() string {
	return "Stopped standing for the global term"
}

// globalAnswer is the election controller's latest answer on a MultiClusterLease; ok is false for a Lease.
func globalAnswer(l *Lease) (holder string, observedGeneration int64, ok bool) {
	if l.Global == nil {
		return "", 0, false
	}
	return l.Global.Holder, l.Global.ObservedGeneration, true
}

// heartbeat is one of this elector's writes: its generation, and when the write started.
type heartbeat struct {
	generation int64
	started    time.Time
}

// confirmedUntil is until when the controller's answer on l lets identity act: the latest of our writes that
// the answer covers, plus lease.ConfirmedFor (the backend renewal that confirmed it was sent after that
// write), and no longer than the renew deadline after that write. A Lease's holder stops the renew deadline
// after its last successful renewal; here a renewal succeeds only once confirmed, so a leader cut off from
// the global backend stops at most the renew deadline after its last confirmed heartbeat, and another cluster
// can win no sooner than the TTL after it: the margin is the lease duration less the renew deadline, not the
// tenth of the TTL that lease.ConfirmedFor alone would leave. Zero when the answer names someone else or
// covers none of our writes.
func confirmedUntil(l *Lease, identity string, writes []heartbeat, renewDeadline time.Duration) time.Time {
	holder, observed, ok := globalAnswer(l)
	if !ok || l.Spec.LeaseDurationSeconds == 0 {
		return time.Time{}
	}
	var latest time.Time
	for _, w := range writes {
		if confirmed, _ := lease.Confirms(holder, observed, identity, w.generation); confirmed && w.started.After(latest) {
			latest = w.started
		}
	}
	if latest.IsZero() {
		return time.Time{}
	}
	return latest.Add(min(lease.ConfirmedFor(l.Spec.LeaseDurationSeconds), renewDeadline))
}
