package lease

import (
	"time"
)

// State is who, if anyone, holds a lease at one instant.
type State int

const (
	// Released: the holder identity is empty, as a leader leaves it when it steps down. Nobody holds it.
	Released State = iota
	// Held: the holder renewed recently enough that the lease is still in force.
	Held
	// Expired: a holder is named but its last renewal is too old. Nobody holds it any more.
	Expired
)

func (s State) String() string {
	switch s {
	case Released:
		return "released"
	case Held:
		return "held"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Judgement is the verdict on a lease at one instant.
type Judgement struct {
	// Holder is the identity named in the lease, even when it no longer holds it.
	Holder string
	State  State
	// ExpiresAt is when the lease stops being held; zero unless the lease names a holder with a renewal.
	ExpiresAt time.Time
}

// Judge decides who holds a lease at now: the holder named in spec holds it while
// now < renewTime + leaseDurationSeconds + clockSkewMargin. A lease that names a holder but lacks a renew
// time or duration was never validly renewed and is expired.
//
// The margin is added, not subtracted: renewTime was written with the holder's clock and is judged with
// the caller's, so the caller extends the holder's term by the skew it is willing to tolerate. It runs on
// every admission request the fence sees, so it must not allocate.
//
// The Lease API's own types reach it through leaseapi.Judge, so the agent need not link them.
func Judge(spec *Spec, now time.Time, clockSkewMargin time.Duration) Judgement {
	if spec.HolderIdentity == "" {
		return Judgement{State: Released}
	}
	j := Judgement{Holder: spec.HolderIdentity, State: Expired}
	expires, renewed := inForceUntil(spec, clockSkewMargin)
	if !renewed {
		return j
	}
	j.ExpiresAt = expires
	if now.Before(j.ExpiresAt) {
		j.State = Held
	}
	return j
}

// inForceUntil is when a lease renewed as spec says stops being in force, whoever it names:
// renewTime + leaseDurationSeconds + clockSkewMargin. renewed is false without a renew time or duration.
func inForceUntil(spec *Spec, clockSkewMargin time.Duration) (until time.Time, renewed bool) {
	if spec.RenewTime.IsZero() || spec.LeaseDurationSeconds == 0 {
		return time.Time{}, false
	}
	return spec.RenewTime.Add(time.Duration(spec.LeaseDurationSeconds)*time.Second + clockSkewMargin), true
}

// Acquirable reports whether identity may take the lease: nobody holds it, or identity already does.
func (j Judgement) Acquirable(identity string) bool {
	return j.State != Held || j.Holder == identity
}
