package lease

import (
	"time"

	"github.com/leasegate/leasegate/internal/contract"
)

// Handover is a planned step-down recorded on a Lease (kubectl leasegate handover): the holder named From
// releases the lease, and until the released lease would have expired only To (a pod name; "" for any
// other candidate) may take it. Acquiring the lease clears the request, so it is acted on once.
type Handover struct {
	// From is the holder identity asked to step down.
	From string `json:"from"`
	// To is the pod that should take over, "" for any candidate but From.
	To string `json:"to,omitempty"`
}

// Equal reports whether h and o ask the same, nil being no request.
func (h *Handover) Equal(o *Handover) bool {
	if h == nil || o == nil {
		return h == o
	}
	return *h == *o
}

// HandoverOf reads the handover requested in a lease's annotations; ok is false when there is none.
func HandoverOf(annotations map[string]string) (h Handover, ok bool) {
	h.From = annotations[contract.HandoverFrom]
	h.To = annotations[contract.HandoverTo]
	return h, h.From != ""
}

// AsksToStepDown reports whether the request asks holder identity to step down from a lease it holds.
func (h Handover) AsksToStepDown(identity string) bool { return h.From != "" && h.From == identity }

// Bars reports whether the request keeps identity from taking a lease judged j until it returns: while
// the released lease would still be in force, From may not take it back and nobody but To may take it.
// When it returns a time, the bar lifts then.
func (h Handover) Bars(j Judgement, released *Spec, identity string, now time.Time, clockSkewMargin time.Duration) (time.Time, bool) {
	if h.From == "" || j.State == Held {
		return time.Time{}, false
	}
	until, renewed := inForceUntil(released, clockSkewMargin)
	if !renewed || !now.Before(until) {
		return time.Time{}, false
	}
	pod, _, _ := ParseIdentity(identity)
	if identity == h.From || h.To != "" && pod != h.To {
		return until, true
	}
	return time.Time{}, false
}

// ClearHandover removes a handover request from the annotations of a lease about to be written.
func ClearHandover(annotations map[string]string) {
	delete(annotations, contract.HandoverFrom)
	delete(annotations, contract.HandoverTo)
}

// Takeover is how the previous holder left a lease another candidate took: what tells a planned
// failover from a crash on a dashboard.
type Takeover string

const (
	// TakeoverGraceful: the holder released the lease (it shut down).
	TakeoverGraceful Takeover = "graceful"
	// TakeoverCrash: the holder stopped renewing (crashed, frozen, cut off, or past its renew deadline)
	// and the lease expired.
	TakeoverCrash Takeover = "crash"
	// TakeoverHandover: the holder released the lease on a handover request.
	TakeoverHandover Takeover = "handover"
)

// Takeovers are every kind, in a fixed order.
var Takeovers = []Takeover{TakeoverGraceful, TakeoverCrash, TakeoverHandover}

// TakeoverOf classifies identity's taking of a lease with these annotations, judged j just before: ok
// is false when it took nothing from anyone (the lease was its own, still in force).
func TakeoverOf(annotations map[string]string, j Judgement, identity string) (Takeover, bool) {
	switch {
	case j.State == Held:
		return "", false // only its own lease is acquirable while held: a restarted agent resuming
	case j.State == Expired:
		if j.Holder == identity {
			return "", false // its own lease, run out while it was away: nobody else held it meanwhile
		}
		return TakeoverCrash, true
	}
	if _, handover := HandoverOf(annotations); handover {
		return TakeoverHandover, true
	}
	return TakeoverGraceful, true
}
