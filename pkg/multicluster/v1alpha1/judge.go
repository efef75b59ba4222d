package v1alpha1

import (
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

// MaxClockRateError is how far, as a fraction, the rate of any clock involved may stray from true time
// (see lease.MaxClockRateError, which the agent reads without linking this API package).
const MaxClockRateError = lease.MaxClockRateError

// ConfirmedFor is how long a candidate may act after it started the heartbeat write that the status then
// confirmed: lease.ConfirmedFor, which says why.
func ConfirmedFor(leaseDurationSeconds int32) time.Duration {
	return lease.ConfirmedFor(leaseDurationSeconds)
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
// another leader): lease.Confirms, the rule the agent's elector reads its answers by.
func (s *MultiClusterLeaseStatus) Confirms(identity string, generation int64) (confirmed, decided bool) {
	return lease.Confirms(s.GlobalHolder, s.ObservedGeneration, identity, generation)
}
