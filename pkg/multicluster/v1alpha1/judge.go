package v1alpha1

import "time"

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

// ValidFor is how long after a backend renewal was sent the fence may admit the global leader's writes:
// the status's validUntil is the renewal's send time (controller's clock) plus ValidFor. Besides the
// rate error it subtracts the clock skew allowed inside the cluster, because the fence reads validUntil
// with its own clock. It is zero or negative when the TTL is too short for the margins.
func ValidFor(leaseDurationSeconds int32, clockSkewMargin time.Duration) time.Duration {
	return ConfirmedFor(leaseDurationSeconds) - clockSkewMargin
}

// LocalLeader is the candidate of this cluster whose writes the fence admits at now, "" when none: the
// status names it as the global holder and its validUntil has not passed on the reader's clock. It needs
// no contact with the backend or the controller: a cluster cut off from both stops by itself.
func (s *MultiClusterLeaseStatus) LocalLeader(now time.Time) string {
	if s.GlobalHolder == "" || s.ValidUntil == nil || !now.Before(s.ValidUntil.Time) {
		return ""
	}
	return s.GlobalHolder
}

// Confirms reports whether the status confirms identity as global leader for a heartbeat of generation
// (or a later one), and decided reports whether it has answered that heartbeat at all (it may name
// another leader).
func (s *MultiClusterLeaseStatus) Confirms(identity string, generation int64) (confirmed, decided bool) {
	decided = s.ObservedGeneration >= generation
	return decided && s.GlobalHolder == identity, decided
}
