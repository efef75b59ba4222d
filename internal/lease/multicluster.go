package lease

import (
	"time"
)

// MaxClockRateError is how far, as a fraction, the rate of any clock involved (the etcd leader's that
// times the backend lease, the election controller's, a candidate's) may stray from true time. Real clocks
// stray by parts per million; 10% leaves room for a badly behaved VM, and is what the e2e suite skews by.
const MaxClockRateError = 0.1

// ConfirmedFor is how long a candidate may act after it started the heartbeat write that the status then
// confirmed (status.observedGeneration reached that write's generation, naming it global leader).
//
// The controller confirms a generation only with a backend renewal it sent after it saw that generation,
// so the backend lease cannot expire sooner than the write's start plus the TTL (the lease duration); less
// the rate error, the candidate stops first on its own clock. Only durations on one machine's clock are
// involved: no clock of another cluster, not even the controller's, can make it act too long.
func ConfirmedFor(leaseDurationSeconds int32) time.Duration {
	ttl := time.Duration(leaseDurationSeconds) * time.Second
	return ttl - time.Duration(float64(ttl)*MaxClockRateError)
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

// confirmedUntil is until when the controller's answer on l lets identity act: the latest of our writes
// that the answer covers, plus ConfirmedFor (the backend renewal that confirmed it was sent after that
// write), and no longer than the renew deadline after that write. A Lease's holder stops the renew
// deadline after its last successful renewal; here a renewal succeeds only once confirmed, so a leader
// cut off from the global backend stops at most the renew deadline after its last confirmed heartbeat,
// and another cluster can win no sooner than the TTL after it: the margin is the lease duration less the
// renew deadline, not the tenth of the TTL that ConfirmedFor alone would leave. Zero when the answer names
// someone else or covers none of our writes.
func confirmedUntil(l *Lease, identity string, writes []heartbeat, renewDeadline time.Duration) time.Time {
	holder, observed, ok := globalAnswer(l)
	if !ok || holder != identity || l.Spec.LeaseDurationSeconds == 0 {
		return time.Time{}
	}
	var latest time.Time
	for _, w := range writes {
		if w.generation <= observed && w.started.After(latest) {
			latest = w.started
		}
	}
	if latest.IsZero() {
		return time.Time{}
	}
	return latest.Add(min(ConfirmedFor(l.Spec.LeaseDurationSeconds), renewDeadline))
}
