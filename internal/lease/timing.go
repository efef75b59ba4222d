package lease

import (
	"fmt"
	"math"
	"time"
)

// Timing is an election's clock: how long a lease lasts, how long a leader keeps trying to renew before it
// stops acting, and how often anyone retries. The names and defaults follow client-go's leaderelection.
type Timing struct {
	// LeaseDuration is how long a follower waits after the last renewal before it may take the lease.
	LeaseDuration time.Duration
	// RenewDeadline is how long a leader keeps trying to renew before it stops acting as leader.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between renewals, and between a follower's attempts.
	RetryPeriod time.Duration
}

// DefaultClockSkewMargin is the clock skew margin the fence judges leases with unless leasegate-config
// says otherwise, and so also an agent's, injected or run by hand: the two must judge expiry alike.
const DefaultClockSkewMargin = time.Second

// DefaultTiming is client-go's and controller-runtime's default, which most operators already know.
var DefaultTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// TimingField names one of Timing's fields, so that each caller can report a TimingError in its own terms:
// a ConfigMap field path, a pod annotation, an environment variable.
type TimingField int

const (
	LeaseDurationField TimingField = iota
	RenewDeadlineField
	RetryPeriodField
)

// TimingError says which field breaks which rule.
type TimingError struct {
	Field  TimingField
	Value  time.Duration
	Reason string
}

func (e *TimingError) Error() string { return e.Reason }

// MaxLeaseDuration is the longest lease duration a Lease can store: leaseDurationSeconds is an int32.
const MaxLeaseDuration = math.MaxInt32 * time.Second

// Validate reports the first rule the timing breaks as a *TimingError, or nil.
//
// retry period < renew deadline < lease duration is what makes an election safe: a leader that cannot
// renew stops acting at the renew deadline, and the difference up to the lease duration is the budget for
// the time it takes to stop and for clock skew between the old leader and the follower taking over.
// A Lease stores its duration in whole seconds, so anything finer would be silently truncated.
func (t Timing) Validate() error {
	switch {
	case t.RetryPeriod <= 0:
		return &TimingError{RetryPeriodField, t.RetryPeriod, fmt.Sprintf("retry period must be positive, got %s", t.RetryPeriod)}
	case t.LeaseDuration < time.Second || t.LeaseDuration%time.Second != 0:
		return &TimingError{LeaseDurationField, t.LeaseDuration,
			fmt.Sprintf("lease duration must be a whole number of seconds (a Lease stores seconds), got %s", t.LeaseDuration)}
	case t.LeaseDuration > MaxLeaseDuration:
		return &TimingError{LeaseDurationField, t.LeaseDuration,
			fmt.Sprintf("lease duration must be at most %s (a Lease stores its seconds in 32 bits), got %s", MaxLeaseDuration, t.LeaseDuration)}
	case t.RetryPeriod >= t.RenewDeadline:
		return &TimingError{RetryPeriodField, t.RetryPeriod,
			fmt.Sprintf("retry period (%s) must be shorter than renew deadline (%s)", t.RetryPeriod, t.RenewDeadline)}
	case t.RenewDeadline >= t.LeaseDuration:
		return &TimingError{RenewDeadlineField, t.RenewDeadline,
			fmt.Sprintf("renew deadline (%s) must be shorter than lease duration (%s)", t.RenewDeadline, t.LeaseDuration)}
	}
	return nil
}

// TakeoverBudget is the longest a crashed leader's lease keeps followers out: the holder renewed just
// before it died, the lease runs its full duration plus the skew margin the judge allows, and the
// follower's attempt lands on the expiry timer (not a poll, since followers watch). The agent's metric,
// the injector's check of a takeover objective, the leaderless alert and kubectl leasegate status all
// state this one figure.
func TakeoverBudget(leaseDuration, clockSkewMargin time.Duration) time.Duration {
	return leaseDuration + clockSkewMargin
}

// TimingFor derives the timing that meets a takeover objective: after a leader crashes, a follower leads
// within objective. A crashed holder's lease keeps followers out for its duration plus the skew margin
// (TakeoverBudget; followers watch, so the take lands on the expiry timer, not a poll), so
//
//	lease duration = objective - clockSkewMargin, rounded down to whole seconds (a Lease stores seconds)
//	renew deadline = 2/3 of the lease duration, rounded down to 100 ms
//	retry period   = 2/15 of the lease duration, rounded down to 100 ms
//
// client-go's 15s/10s/2s in proportion: a leader that cannot renew stops acting a third of the lease
// duration before anyone may take over, and tries five times before it gives up. An objective shorter
// than one second plus the margin cannot be met, nor one whose lease duration a Lease cannot store: the
// error says the shortest, or the longest, that can.
func TimingFor(objective, clockSkewMargin time.Duration) (Timing, error) {
	d := (objective - clockSkewMargin).Truncate(time.Second)
	switch {
	case d < time.Second:
		return Timing{}, fmt.Errorf("a takeover within %s cannot be met: the lease duration would be under 1s after the clock skew margin (%s); the shortest objective is %s",
			objective, clockSkewMargin, time.Second+clockSkewMargin)
	case d > MaxLeaseDuration:
		return Timing{}, fmt.Errorf("a takeover within %s is longer than a Lease can store: the longest objective is %s", objective, MaxLeaseDuration+clockSkewMargin)
	}
	return Proportional(d), nil
}

// Proportional is the timing of a lease duration in client-go's proportions: renew deadline 2/3 and retry
// period 2/15 of it, each rounded down to 100 ms so they read well (15s gives 10s and 2s).
func Proportional(leaseDuration time.Duration) Timing {
	return Timing{
		LeaseDuration: leaseDuration,
		RenewDeadline: (leaseDuration * 2 / 3).Truncate(100 * time.Millisecond),
		RetryPeriod:   (leaseDuration * 2 / 15).Truncate(100 * time.Millisecond),
	}
}
