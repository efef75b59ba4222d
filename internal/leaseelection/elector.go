package leaseelection

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
)

// releaseTimeout bounds the write that hands the lease back on shutdown. The agent must exit within a
// second of SIGTERM; a release that cannot land by then is left to expire.
const releaseTimeout = 500 * time.Millisecond

// Config is what an Elector needs. Lock, Namespace, Name and Identity are required.
type Config struct {
	// Lock is the lease the elector elects on: a LeaseLock, or a MultiClusterLeaseLock, on which winning
	// the local election is not enough (see MultiClusterLeaseLock).
	Lock      Lock
	Namespace string
	Name      string
	Identity  string
	Timing    lease.Timing
	// ClockSkewMargin is added to the lease duration when judging someone else's lease (see lease.Judge).
	ClockSkewMargin time.Duration
	// OnChange is called, from the election loop, every time Status changes. It must not block.
	OnChange func(lease.Status)
	// OnTakeover is called, from the election loop, each time the elector takes the lease from another
	// holder, with how that holder left. It must not block.
	OnTakeover func(lease.Takeover)
	Log        logr.Logger
	// Wake, with WakeURL, answers this elector's followers while it leads (see peer.go): it writes
	// WakeURL on the lease (contract.HolderURL), where followers wait for it to let go instead of
	// watching the lease. Without both it writes none, and its followers watch. A follower waits on any
	// holder whose lease names such a URL, whatever it sets here.
	Wake    *WakeHub
	WakeURL string
	// PeerClient is what followers wait on holders with; nil is NewPeerClient's.
	PeerClient *http.Client
	// Clock is what the elector reads the time from and arms its timer on; nil is the real clock (the
	// unit tests step a fake one).
	Clock clock.Clock
}

// Elector runs a leader election on one lease.
//
// It speaks client-go's leaderelection protocol, so it interoperates with client-go and
// controller-runtime electors on the same lease: every write is a compare-and-swap on resourceVersion; a
// leader renews every retry period and stops leading when it has failed to renew for the renew deadline;
// acquiring a lease from another holder counts a transition; releasing writes an empty holder, as
// ReleaseOnCancel does. It improves on client-go's follower, which reads the lease every retry period:
// a follower learns of a release the moment it is made, from the holder's agent where the holder names
// one (peer.go) and from a watch of the Lease otherwise, and reads the lease only when its copy could
// have expired, once a lease duration while a healthy leader renews. The leader does not watch its own
// lease: each renewal is a compare-and-swap, which fails, and so shows it, if anyone else wrote it.
type Elector struct {
	cfg   Config
	name  string // "<namespace>/<name>", for logs and Status
	clock clock.Clock

	// watch keeps the latest version of the lease; the loop decides what it means.
	watch *leaseWatch

	// Loop-owned election state. current is the latest version of the lease this elector read or wrote:
	// the base of its next compare-and-swap.
	current *Lease
	// known is the latest copy of the lease the loop has seen, from its watch, a read or its own write
	// (nil: none, or the lease was deleted): while the watch is down, it says when the lease could next
	// change hands, and whether the lease still names this elector.
	known     *Lease
	leading   bool
	lastRenew time.Time
	// race, when set, is the last race for the lease this follower lost, kept until the watch brings
	// another version of the lease than the one it showed then (see lostRace).
	race *lostRace
	// deleted, when set, says what this follower knows of a lease it found deleted, kept until the lease
	// is seen held again or this elector writes it as holder (see deletedLease).
	deleted *deletedLease
	// shed counts a follower's attempts in a row that the API server shed (429, 5xx, Retry-After), and
	// holdUntil is when it may try again: a watch event that makes the lease look free does not cut
	// that wait short.
	shed      int
	holdUntil time.Time

	// leaderUntil (Unix nanoseconds) is the renew deadline of the last successful renewal. Status never
	// reports leadership past it, even if the loop has not run to step down: a process that was paused
	// (SIGSTOP, a stalled node) must not answer "leader" from stale state the moment it resumes.
	leaderUntil atomic.Int64

	mu     sync.Mutex
	status lease.Status

	// seen is the latest copy of the lease the elector knows (known, for the endpoints and metrics).
	seen atomic.Pointer[Lease]

	// The wait on the holder (peer.go). waitingOn is the holder waited on (zero: none), given to the
	// waiter through peers and answered through woken; skipped is one whose wait ended, not waited on
	// again before skipUntil (the lease is watched instead); mustRead makes the next attempt read the
	// lease first, as a wake-up asks.
	peers     chan peerTarget
	woken     chan peerResult
	waitingOn peerTarget
	skipped   peerTarget
	skipUntil time.Time
	mustRead  bool
	// peersOnLoopback: this elector answers on loopback (WakeURL), so its peers may too (holderURLOf).
	peersOnLoopback bool
}

// lostRace is a take or create that lost a race: another candidate wrote the lease first, or the
// follower's copy was stale. A watch can stall while its connection stays healthy, and one that lists
// again from a watch cache behind etcd brings the same stale version back, so while the watch shows the
// version it showed then, its copy is not trusted: the next attempt reads the lease first, and the
// attempts after it take that read as their base.
type lostRace struct {
	// watched is the watch's copy when the race was lost (nil: it showed no lease).
	watched *Lease
	// read is the copy read since (nil: not read yet).
	read *Lease
}

// deletedLease is what a follower knows of the lease it found deleted. Deleting a lease ends nobody's
// term: its holder may still be acting, and creates it again at once where it may (see renew). So a
// follower takes or creates the lease only once the deleted term could have ended, as it would have
// without the delete, and a lease it creates counts its terms on from the deleted ones, so that the
// fencing token does not go back.
type deletedLease struct {
	// until is the earliest instant this elector may take or create the lease (zero: at once).
	until time.Time
	// transitions is the most leaseTransitions the deleted versions seen had.
	transitions int32
}

// sameVersion reports whether a and b are the same version of the lease, or both no lease. Two copies of
// one version (a list brings a new one) are the same; a resourceVersion names one version of one object.
func sameVersion(a, b *Lease) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ResourceVersion == b.ResourceVersion
}

// NewElector validates cfg and returns an elector that has not started.
func NewElector(cfg Config) (*Elector, error) {
	if cfg.Lock == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return nil, errors.New("leaseelection: an elector needs a lock, a lease namespace and name, and an identity")
	}
	if err := cfg.Timing.Validate(); err != nil {
		return nil, err
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(lease.Status) {}
	}
	if cfg.OnTakeover == nil {
		cfg.OnTakeover = func(lease.Takeover) {}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.PeerClient == nil {
		cfg.PeerClient = NewPeerClient()
	}
	name := cfg.Namespace + "/" + cfg.Name
	return &Elector{
		cfg:    cfg,
		name:   name,
		clock:  cfg.Clock,
		watch:  newLeaseWatch(cfg.Lock, cfg.Lock.streamer(), cfg.Namespace, cfg.Name, cfg.Timing, cfg.Clock, cfg.Log),
		status: lease.Status{Lease: name},
		peers:  make(chan peerTarget, 1),
		woken:  make(chan peerResult, 1),

		peersOnLoopback: onLoopback(cfg.WakeURL),
	}, nil
}

// Status returns a snapshot of what the elector knows.
func (e *Elector) Status() lease.Status {
	e.mu.Lock()
	s := e.status
	e.mu.Unlock()
	termEnd, bounded := e.cfg.Lock.termEnd()
	if now := e.clock.Now().UnixNano(); s.IsLeader && (now >= e.leaderUntil.Load() || bounded && now >= termEnd) {
		s.IsLeader = false
	}
	return s
}

// LastRenewal is the renewTime of the lease as last observed, zero before the first observation.
func (e *Elector) LastRenewal() time.Time {
	if l := e.seen.Load(); l != nil {
		return l.Spec.RenewTime.Time
	}
	return time.Time{}
}

// Expiry is when the lease as last observed could change hands: never before its expiry (renewTime +
// duration + clock skew margin) while someone holds it; zero when it is released or not yet observed.
func (e *Elector) Expiry() time.Time {
	l := e.seen.Load()
	if l == nil {
		return time.Time{}
	}
	return lease.Judge(&l.Spec, e.clock.Now(), e.cfg.ClockSkewMargin).ExpiresAt
}

// Watching reports whether the elector holds a watch of its lease open: a follower that cannot wait on
// the holder (see peer.go), or a leader whose lock answers it through the object.
func (e *Elector) Watching() bool { return e.watch.watching.Load() }

// Synced reports whether the elector has read the lease at least once (a list, a read or a write): it
// has reached the API server and knows who leads.
func (e *Elector) Synced() bool { return e.watch.synced.Load() || e.seen.Load() != nil }

// Run takes part in the election until ctx ends, then stops leading and releases the lease if it holds it.
func (e *Elector) Run(ctx context.Context) {
	changed := make(chan struct{}, 1)
	go e.watch.run(ctx, changed)
	go waitOnHolders(ctx, e.cfg.PeerClient, e.peers, e.woken)
	defer e.release()

	// The first act waits for the watch's first list (it comes through changed), up to a retry period:
	// acting on that list, not on a read of the lease beside it, halves the reads of an agent starting,
	// and thousands start at once when a node pool scales up or a control plane comes back. A list that
	// does not come in time leaves the first act to read the lease itself.
	timer := e.clock.NewTimer(e.cfg.Timing.RetryPeriod)
	defer timer.Stop()
	// lapse fires when a term the lock grants on top of the renewals (termEnd) runs out: nothing else may
	// happen then (the holder may still be renewing the object), and the step-down must reach the log,
	// the metric and the status file at that instant, as Status already says it.
	lapse := e.clock.NewTimer(time.Hour)
	lapse.Stop()
	defer lapse.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			timer.Reset(e.actNow(ctx))
		case <-changed:
			if wait, now := e.react(); now {
				timer.Reset(e.actNow(ctx))
			} else if wait > 0 {
				timer.Reset(wait)
			}
		case r := <-e.woken:
			if r.target == e.waitingOn {
				e.heard(r)
				timer.Reset(e.actNow(ctx))
			}
		case <-lapse.C():
			e.judgeTerm()
		}
		e.choosePath()
		if wait, ok := e.termLeft(); ok {
			lapse.Reset(wait)
		}
	}
}

// maxImmediateActs bounds how often actNow acts again without waiting.
const maxImmediateActs = 3

// actNow acts, and again at once while acting asks for no wait (it stepped down, or resolved a conflict
// with a fresh read), rather than through a zero-length timer: the loop then moves only on the events and
// timers that should move it, which is also what lets the unit tests drive it with a fake clock.
func (e *Elector) actNow(ctx context.Context) time.Duration {
	wait := e.act(ctx)
	for i := 0; wait <= 0 && i < maxImmediateActs && ctx.Err() == nil; i++ {
		wait = e.act(ctx)
	}
	return wait
}

// react judges a Lease the watch delivered and says when to act next: now (the lease became acquirable,
// or, for a leader, someone else wrote it), after wait (a follower's expiry timer), or leave the timer
// alone (wait 0, now false).
func (e *Elector) react() (wait time.Duration, now bool) {
	at := e.clock.Now()
	gone := e.watch.takeDeleted()
	if gone != nil {
		// Taken before the latest copy: the lease may have been created again since, and the delete's
		// term bars a take of the new one too.
		e.noteDeleted(gone, true, at)
	}
	observed := e.watch.latest()
	if observed == nil {
		// The lease was deleted: a leader creates it again (see renew), and a follower may create it
		// once the deleted term could have ended. A list that finds none, where this elector had seen
		// one, tells the lease is gone but not what its last version was.
		if gone == nil {
			e.noteDeleted(e.known, false, at)
		}
		e.know(nil)
		return 0, true
	}
	e.know(observed)
	if observed.Spec.HolderIdentity != "" {
		e.deleted = nil // held again: its own term is what bars a take now
	}
	j := lease.Judge(&observed.Spec, at, e.cfg.ClockSkewMargin)
	if e.leading {
		if j.Holder == e.cfg.Identity && e.handoverAsked(observed) {
			e.handOver(observed)
			return 0, false
		}
		// Our own renewals come back through the watch. Anything else is checked by renewing at once:
		// the compare-and-swap fails if someone else really wrote the lease.
		if j.Holder == e.cfg.Identity && e.cfg.Lock.answersHolder() {
			e.publish(observed, true) // the object's answer to our write
		}
		return 0, j.Holder != e.cfg.Identity
	}
	e.publish(observed, false)
	if wait, ok := e.mayTake(observed, j, at); !ok {
		return min(e.cfg.Timing.RetryPeriod, wait), false
	}
	return 0, true
}

// mayTake reports whether this elector may take the lease judged j now, or else how long until it should
// look again: the lease expires, a handover for another candidate stops barring it, or the term of a
// lease deleted before it could have ended.
func (e *Elector) mayTake(l *Lease, j lease.Judgement, now time.Time) (time.Duration, bool) {
	if wait, ok := e.termBars(l, j, now); !ok {
		return wait, false
	}
	return e.deletedTermLeft(now)
}

// termBars is mayTake for the lease judged j alone.
func (e *Elector) termBars(l *Lease, j lease.Judgement, now time.Time) (time.Duration, bool) {
	if !j.Acquirable(e.cfg.Identity) {
		return j.ExpiresAt.Sub(now), false
	}
	if h, ok := e.cfg.Lock.handover(l); ok {
		if until, barred := h.Bars(j, &l.Spec, e.cfg.Identity, now, e.cfg.ClockSkewMargin); barred {
			return until.Sub(now), false
		}
	}
	return 0, true
}

// deletedTermLeft reports whether the term of a lease found deleted has ended, so that this elector may
// take or create the lease, or else how long it has left.
func (e *Elector) deletedTermLeft(now time.Time) (time.Duration, bool) {
	if e.deleted == nil || !now.Before(e.deleted.until) {
		return 0, true
	}
	return e.deleted.until.Sub(now), false
}

// noteDeleted records that the lease was found deleted at now, last being the latest copy of it known
// (nil: none, as for an elector that never saw it, which may create it at once). exact: last is the
// version deleted, as the watch's delete event carried it, and its term, handover included, is the one
// to wait out. Otherwise last is only the latest version this elector saw (a read or a list found
// none, after a take that conflicted, say), and a holder after it may have renewed until the delete:
// nothing is taken before a lease duration and margin from when it first learned of the delete either;
// learning again that the lease is gone, from the same stale copy, moves nothing. What an earlier delete
// barred stays barred.
func (e *Elector) noteDeleted(last *Lease, exact bool, now time.Time) {
	if last == nil || !exact && e.deleted != nil {
		return
	}
	var until time.Time
	if wait, ok := e.termBars(last, lease.Judge(&last.Spec, now, e.cfg.ClockSkewMargin), now); !ok {
		until = now.Add(wait)
	}
	if !exact {
		term := max(e.cfg.Timing.LeaseDuration, time.Duration(last.Spec.LeaseDurationSeconds)*time.Second)
		until = later(until, now.Add(term+e.cfg.ClockSkewMargin))
	}
	d := &deletedLease{until: until, transitions: last.Spec.LeaseTransitions}
	if prev := e.deleted; prev != nil {
		d.until, d.transitions = later(d.until, prev.until), max(d.transitions, prev.transitions)
	}
	e.deleted = d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// handoverAsked reports whether l, a lease this elector holds, carries a handover that asks it to step
// down.
func (e *Elector) handoverAsked(l *Lease) bool {
	h, ok := e.cfg.Lock.handover(l)
	return ok && h.AsksToStepDown(e.cfg.Identity)
}

// act renews (leader) or tries to acquire (follower), and returns how long to wait before acting again.
func (e *Elector) act(ctx context.Context) time.Duration {
	if e.leading {
		return e.renew(ctx)
	}
	return e.tryAcquire(ctx)
}

func (e *Elector) tryAcquire(ctx context.Context) time.Duration {
	retry := e.cfg.Timing.RetryPeriod
	if now := e.clock.Now(); now.Before(e.holdUntil) {
		return e.holdUntil.Sub(now) // shed: the backoff is not over
	}
	if wait, ok := e.deletedTermLeft(e.clock.Now()); !ok {
		return min(retry, wait) // nothing to take or create before then: no read either
	}
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.Timing.RenewDeadline)
	defer cancel()

	// While the watch is open, or listed the lease within the last retry period, its copy (nil: there is
	// no lease) is the base for the compare-and-swap, which saves a read on the failover path and at
	// start; if the copy is stale the write conflicts and the next attempt reads first. While the watch is
	// down (an API server restart), an attempt reads the lease first, unless the last copy seen names this
	// elector (below).
	base := e.watch.latest()
	fresh := e.watch.fresh(retry)
	if e.race != nil && fresh && !sameVersion(base, e.race.watched) {
		// The watch brought another version since the race was lost (the winner's write, as a rule), so
		// it is not stalled and its copy is the base: no read. Every race a cold start has leaves its
		// losers, two of every three candidates, with a read that would compete with the first lists of
		// the electors whose leases are still unled.
		e.race = nil
	}
	readFirst := e.race != nil && e.race.read == nil || e.mustRead
	if fresh && e.race != nil && e.race.read != nil {
		// The watch still shows the version the race was lost on, older than the one read since: that
		// read is the base, so a watch that lags (a watch cache behind etcd) does not have this follower
		// write on its stale copy, conflict and read again every retry period.
		base = e.race.read
	}
	if fresh && !readFirst && base == nil {
		return e.create(reqCtx)
	}
	if !fresh && !readFirst && e.known != nil {
		// The watch is down, as every watch is while an API server restarts: the last copy seen says when
		// the lease can next change hands, and no read is sent before then. A client-go follower reads its
		// lease every retry period; thousands doing so at once are the first load a restarted API server
		// meets, beside the leaders' renewals it must serve to keep every lease led. The cost: a lease
		// released while the watch is down is taken when the copy's term would have ended (within the
		// takeover budget), not at once.
		now := e.clock.Now()
		if wait, ok := e.mayTake(e.known, lease.Judge(&e.known.Spec, now, e.cfg.ClockSkewMargin), now); !ok {
			return wait
		}
	}
	ownCopy := e.known != nil && e.known.Spec.HolderIdentity == e.cfg.Identity
	if !fresh && !readFirst && ownCopy {
		// The lease named this elector when it last saw it (it stepped down at its renew deadline while
		// the API server restarted): that copy is the base, as a renewal's is, with no read first. The
		// compare-and-swap fails if anyone wrote the lease since, and the next attempt reads it. One
		// request, not two, for each lease to have a leader again once the server answers.
		base = e.known
	} else if !fresh || readFirst {
		var err error
		base, err = e.cfg.Lock.Get(reqCtx, e.cfg.Namespace, e.cfg.Name)
		if kubeclient.IsNotFound(err) {
			e.noteDeleted(e.known, false, e.clock.Now())
			e.know(nil)
			e.mustRead = false
			return e.create(reqCtx)
		}
		if err != nil {
			return e.failedAttempt(err, "read")
		}
		e.know(base)
		e.publish(base, false)
		e.shed, e.mustRead = 0, false
		if e.race != nil {
			e.race.read = base
		}
	}

	now := e.clock.Now()
	j := lease.Judge(&base.Spec, now, e.cfg.ClockSkewMargin)
	if wait, ok := e.mayTake(base, j, now); !ok {
		return min(retry, wait)
	}
	transitions, acquired := base.Spec.LeaseTransitions, now
	if j.Holder == e.cfg.Identity && !base.Spec.AcquireTime.IsZero() {
		// Our own lease, still ours (this agent restarted, or stepped down on a deadline and reconnected):
		// the holder does not change, so neither do the transition count and acquire time.
		acquired = base.Spec.AcquireTime.Time
	} else {
		transitions++
	}
	next := base.Clone()
	next.Spec = e.spec(now, acquired, transitions)
	lease.ClearHandover(next.Annotations) // taken: the request, if any, is done
	e.stampURL(next)
	e.answerWaits()
	updated, err := e.cfg.Lock.Update(reqCtx, next)
	if err != nil {
		e.letGo()
		return e.failedAttempt(err, "take")
	}
	e.cfg.Lock.wrote(updated, now)
	if kind, ok := lease.TakeoverOf(base.Annotations, j, e.cfg.Identity); ok {
		e.cfg.OnTakeover(kind)
	}
	e.becomeLeader(now, updated)
	return retry
}

func (e *Elector) create(ctx context.Context) time.Duration {
	now := e.clock.Now()
	if wait, ok := e.deletedTermLeft(now); !ok {
		return min(e.cfg.Timing.RetryPeriod, wait)
	}
	var transitions int32
	if e.deleted != nil {
		// The lease was deleted: its terms go on counting, so the new term's token is none an earlier
		// term had, nor lower.
		transitions = e.deleted.transitions + 1
	}
	l := &Lease{Namespace: e.cfg.Namespace, Name: e.cfg.Name, Spec: e.spec(now, now, transitions)}
	e.stampURL(l)
	e.answerWaits()
	created, err := e.cfg.Lock.Create(ctx, l)
	if err != nil {
		e.letGo()
		return e.failedAttempt(err, "create")
	}
	e.cfg.Lock.wrote(created, now)
	e.becomeLeader(now, created)
	return e.cfg.Timing.RetryPeriod
}

func (e *Elector) renew(ctx context.Context) time.Duration {
	deadline := e.lastRenew.Add(e.cfg.Timing.RenewDeadline)
	now := e.clock.Now()
	if !now.Before(deadline) {
		e.stepDown(renewalsStopped(e.cfg.Timing.RenewDeadline))
		e.letGo()
		return 0
	}
	// A request still in flight at the deadline is abandoned: leadership ends on time, not when the
	// API server answers.
	reqCtx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()
	next := e.current.Clone()
	// The whole spec is rewritten, not just renewTime, so an edit of the lease by someone else cannot
	// change the terms this holder renews on.
	acquired := e.current.Spec.AcquireTime.Time
	if acquired.IsZero() {
		acquired = now
	}
	next.Spec = e.spec(now, acquired, e.current.Spec.LeaseTransitions)
	e.stampURL(next)
	updated, err := e.cfg.Lock.Update(kubeclient.Unlimited(reqCtx), next)
	if kubeclient.IsConflict(err) {
		// Someone else wrote the lease since our last write, or deleted it (the API server answers a
		// write naming a deleted lease's uid with a conflict, not a 404). Read it: if it still names us
		// (a label edit, say), renew on the fresh version at once; if another holds it or released it,
		// we have lost it.
		var current *Lease
		if current, err = e.cfg.Lock.Get(reqCtx, e.cfg.Namespace, e.cfg.Name); err == nil {
			e.current = current
			e.know(current)
			if holder := current.Spec.HolderIdentity; holder != e.cfg.Identity {
				reason := fmt.Sprintf("the lease was taken by %q", holder)
				if holder == "" {
					reason = "the lease was released, or deleted and created again unheld"
				}
				e.stepDown(reason)
				e.letGo()
				e.publish(current, false)
			} else if e.handoverAsked(current) {
				e.handOver(current)
			}
			return 0
		}
	}
	if kubeclient.IsNotFound(err) {
		// The lease was deleted (by a person, or a cleanup): nobody holds it, and the fence refuses this
		// leader's writes until someone does. It creates the lease again at once, as client-go's elector
		// does, on the terms it renews on. If another candidate created it first, the next act's
		// renewal conflicts with that lease and reads it (above).
		again := &Lease{Namespace: e.cfg.Namespace, Name: e.cfg.Name, Spec: next.Spec}
		e.stampURL(again)
		if updated, err = e.cfg.Lock.Create(kubeclient.Unlimited(reqCtx), again); kubeclient.IsAlreadyExists(err) {
			return 0
		}
	}
	if err == nil {
		e.cfg.Lock.wrote(updated, now)
		e.renewed(now, updated)
		if e.cfg.Lock.answersHolder() {
			e.publish(updated, true)
		}
		return e.cfg.Timing.RetryPeriod
	}
	if ctx.Err() == nil {
		e.cfg.Log.Error(err, "Renewing the lease failed; still leading until the renew deadline",
			"lease", e.name, "deadline", deadline.Format(time.RFC3339Nano))
	}
	return renewRetryDelay(e.cfg.Timing.RetryPeriod, e.clock.Since(now), err, deadline.Sub(e.clock.Now()))
}

// renewRetryDelay is when a leader whose renewal failed with err, after took, tries again, with left until
// its renew deadline: after the server's Retry-After when it gave one, which is sooner than the retry
// period when the server allows it (the renewals of leaders are what the shed followers' budget goes
// to), later when it asks for longer; a retry period after the failed try started otherwise.
//
// The retry period counts from the try's start, not its failure, as client-go's renew loop polls: a try
// that took long to fail must not put off the next by as long. A kube-apiserver restart does that: a
// renewal sent to a server still starting can wait seconds for its refusal, and its leader, whose next
// try is the first that can succeed, would renew that much later than client-go's. A Retry-After counts
// from the answer that carried it, so it is never undercut. Still at most one try per retry period.
//
// A retry that would land on the deadline or past it comes halfway to the deadline instead, and so on,
// down to a sixteenth of the retry period: a renewal tried at the deadline is a step-down, not a try, so
// a leader that failed a retry period before its deadline would otherwise have had no last try. A
// kube-apiserver restart does that to the leaders whose deadline falls just after the server answers
// again: their try before it is refused (the connection, or, for up to a second, the authorizer of a
// server still starting), and they would step down though the server answered in time. The halving is
// bounded: about four more requests, only in a renew deadline's last retry period. A Retry-After is
// still never undercut, and one that outlasts the deadline leaves the step-down to the deadline.
func renewRetryDelay(retryPeriod, took time.Duration, err error, left time.Duration) time.Duration {
	if left <= 0 {
		return 0
	}
	wait := max(retryPeriod-took, 0)
	retryAfter, _ := kubeclient.RetryAfterOf(err)
	if retryAfter > 0 {
		wait = retryAfter
	}
	if wait < left {
		return wait
	}
	if half := left / 2; half >= retryPeriod/minRenewRetryDivisor && half >= retryAfter {
		return half
	}
	return left
}

// minRenewRetryDivisor bounds the halving of renewRetryDelay: no halved retry comes sooner than the
// retry period over this after the failure it follows.
const minRenewRetryDivisor = 16

// release stops leading and hands the lease back with an empty holder, as client-go's ReleaseOnCancel
// does, so a follower takes it within a watch round trip instead of waiting for it to expire.
func (e *Elector) release() {
	if !e.leading {
		return
	}
	// Stop acting before anyone else can start.
	e.stepDown("shutting down")
	e.writeReleased(e.current, false)
	e.letGo()
}

// handOver steps down as the handover request on l asks, and releases the lease for its target.
func (e *Elector) handOver(l *Lease) {
	h, _ := e.cfg.Lock.handover(l)
	to := h.To
	if to == "" {
		to = "any other candidate"
	}
	// Published before stepping down, so the app hears why leadership ends.
	e.publish(l, true)
	e.stepDown("handing over to " + to + " as asked")
	e.writeReleased(l, true)
	e.letGo()
}

// writeReleased writes the lease, as of base, with an empty holder. A shutdown release gives the lease a
// one-second duration and drops any handover request, so any follower may take it at once; a handover
// keeps the lease's duration and the request, which bars everyone but its target for that long.
func (e *Elector) writeReleased(base *Lease, handover bool) {
	ctx, cancel := context.WithTimeout(kubeclient.Unlimited(context.Background()), releaseTimeout)
	defer cancel()
	for {
		now := e.clock.Now()
		next := base.Clone()
		next.Spec = e.spec(now, now, base.Spec.LeaseTransitions)
		next.Spec.HolderIdentity = ""
		delete(next.Annotations, contract.HolderURL)
		if !handover {
			next.Spec.LeaseDurationSeconds = 1
			lease.ClearHandover(next.Annotations)
		}
		_, err := e.cfg.Lock.Update(ctx, next)
		if err == nil {
			e.cfg.Log.Info("Released the lease", "lease", e.name, "handover", handover)
			return
		}
		if kubeclient.IsConflict(err) {
			// Our copy is stale: a renewal that timed out on our side may have landed. Release the
			// current version if it still names us; never release someone else's lease.
			if base, err = e.cfg.Lock.Get(ctx, e.cfg.Namespace, e.cfg.Name); err == nil {
				if base.Spec.HolderIdentity != e.cfg.Identity {
					return
				}
				continue
			}
		}
		e.cfg.Log.Error(err, "Releasing the lease failed; followers take it when it expires", "lease", e.name)
		return
	}
}

// spec is the lease this elector writes as holder.
func (e *Elector) spec(renew, acquired time.Time, transitions int32) lease.Spec {
	return lease.Spec{
		HolderIdentity:       e.cfg.Identity,
		LeaseDurationSeconds: int32(e.cfg.Timing.LeaseDuration / time.Second),
		AcquireTime:          lease.MicroTime{Time: acquired},
		RenewTime:            lease.MicroTime{Time: renew},
		LeaseTransitions:     transitions,
	}
}

func (e *Elector) becomeLeader(renewed time.Time, l *Lease) {
	e.leading = true
	e.watch.lead(true)
	e.shed, e.holdUntil, e.race = 0, time.Time{}, nil
	e.renewed(renewed, l)
	e.publish(l, true)
}

// renewed records a successful write as holder; renewTime is the time the write was started.
func (e *Elector) renewed(renewTime time.Time, l *Lease) {
	e.current, e.lastRenew, e.deleted = l, renewTime, nil
	e.know(l)
	e.watch.wrote(l)
	e.leaderUntil.Store(renewTime.Add(e.cfg.Timing.RenewDeadline).UnixNano())
}

func (e *Elector) stepDown(reason string) {
	e.leading = false
	e.watch.lead(false)
	e.leaderUntil.Store(0)
	e.cfg.Lock.forgetTerm()
	e.mu.Lock()
	wasLeader := e.status.IsLeader
	e.status.IsLeader = false
	status := e.status
	e.mu.Unlock()
	// A holder that did not lead (its lock granted it no term, or the term lapsed) does not say it stopped
	// leading: the lock words what it stops.
	msg := "Stopped leading"
	if !wasLeader {
		msg = e.cfg.Lock.steppedDownWithoutLeading()
	}
	e.cfg.Log.Info(msg, "lease", e.name, "identity", e.cfg.Identity, "reason", reason)
	e.cfg.OnChange(status)
}

// termLeft is, for an elector whose lock grants terms and that leads, how long its term has left (ok
// false when it does not lead).
func (e *Elector) termLeft() (time.Duration, bool) {
	termEnd, bounded := e.cfg.Lock.termEnd()
	if !bounded {
		return 0, false
	}
	e.mu.Lock()
	leading := e.status.IsLeader
	e.mu.Unlock()
	if !leading {
		return 0, false
	}
	return max(time.Duration(termEnd-e.clock.Now().UnixNano()), 0), true
}

// judgeTerm publishes the end of a term the lock granted that ran out with nothing to extend it.
func (e *Elector) judgeTerm() {
	termEnd, _ := e.cfg.Lock.termEnd()
	e.mu.Lock()
	if !e.status.IsLeader || e.clock.Now().UnixNano() < termEnd {
		e.mu.Unlock()
		return
	}
	e.status.IsLeader = false
	status := e.status
	e.mu.Unlock()
	e.cfg.Log.Info("Stopped leading", "lease", e.name, "identity", e.cfg.Identity, "reason", e.termLapsed(status))
	e.cfg.OnChange(status)
}

// termLapsed says, in the lock's words, why the term it granted ended while this elector still holds the
// object, as the status s says it.
func (e *Elector) termLapsed(s lease.Status) string {
	return e.cfg.Lock.termLapsed(s.GlobalHolder, e.cfg.Identity, e.cfg.Timing.RenewDeadline)
}

// publish records the holder a lease names and whether we lead, and reports a change.
func (e *Elector) publish(l *Lease, leading bool) {
	next := lease.Status{
		Lease:       e.name,
		Holder:      l.Spec.HolderIdentity,
		IsLeader:    leading,
		Transitions: l.Spec.LeaseTransitions,
	}
	e.cfg.Lock.describe(&next, l, e.cfg.Identity, e.cfg.Timing.RenewDeadline, e.clock)
	if t := l.Spec.AcquireTime; !t.IsZero() && next.Holder != "" {
		since := t.Time
		next.Since = &since
	}

	e.mu.Lock()
	prev := e.status
	e.status = next
	e.mu.Unlock()
	if prev.Holder == next.Holder && prev.IsLeader == next.IsLeader && prev.Transitions == next.Transitions && prev.GlobalHolder == next.GlobalHolder &&
		prev.FencingToken == next.FencingToken && prev.Handover.Equal(next.Handover) {
		return
	}
	switch {
	case next.IsLeader && !prev.IsLeader:
		e.cfg.Log.Info("Started leading", "lease", next.Lease, "holder", next.Holder, "transitions", next.Transitions)
	case prev.IsLeader && !next.IsLeader:
		// The term the lock granted ended while this elector still holds the object (a holder that stops
		// holding it steps down in stepDown).
		e.cfg.Log.Info("Stopped leading", "lease", next.Lease, "identity", e.cfg.Identity, "reason", e.termLapsed(next))
	case prev.Holder != next.Holder:
		e.cfg.Log.Info("Leader changed", "lease", next.Lease, "holder", next.Holder, "transitions", next.Transitions)
	}
	e.cfg.OnChange(next)
}

// failedAttempt handles a follower's failed read, take or create, and says when to try again: after
// the retry period, or, while the API server sheds this follower's requests, after a backoff that
// doubles with each attempt shed in a row (followerBackoff), unless the lease still names this elector.
func (e *Elector) failedAttempt(err error, what string) time.Duration {
	e.logAttempt(err, what)
	retryAfter, shed := kubeclient.RetryAfterOf(err)
	if !shed {
		e.shed = 0
		return e.cfg.Timing.RetryPeriod
	}
	e.shed++
	var wait time.Duration
	if e.known != nil && e.known.Spec.HolderIdentity == e.cfg.Identity {
		// It stepped down at its renew deadline (an API server restart outlasted it) and the lease still
		// names it: nobody else may take the lease before that term ends, so its attempts are the
		// lease's only way back to a leader until then. They are a renewal's load, one per lease per
		// retry period, which the followers' backoff leaves room for: they do not double.
		wait = shedBackoff(e.cfg.Timing.RetryPeriod, e.cfg.Timing.LeaseDuration, 1, retryAfter, rand.N[time.Duration])
	} else {
		wait = followerBackoff(e.cfg.Timing, e.shed, retryAfter, rand.N[time.Duration])
	}
	e.holdUntil = e.clock.Now().Add(wait)
	return wait
}

// firstShedWait is where a shed follower's own backoff starts: what API Priority and Fairness asks for
// in its Retry-After until its rejections persist.
const firstShedWait = time.Second

// longestShedWait is the longest Retry-After API Priority and Fairness asks for: it doubles its
// Retry-After up to this while a priority level's rejections persist.
const longestShedWait = 32 * time.Second

// followerBackoff is how long a follower waits after the n-th attempt in a row that the API server shed:
// its own backoff, from firstShedWait (or the retry period if shorter) doubling with each, up to the
// longer of the retry period and longestShedWait but never past the lease duration, or the server's
// Retry-After if that is longer.
//
// It starts from the server's word, not from the retry period: the retry period is the lease's pace,
// chosen for its takeover objective and its writes, and says nothing about the server's load (a
// follower of a 20 s retry period starting from it would leave an unled lease unled for 20, 40, then
// 80 s). Nor does it double the Retry-After: API Priority and Fairness already doubles that (up to 32 s)
// while a priority level's rejections persist, and lowers it as they stop, so doubling on top would
// keep followers away long after the server has room again.
//
// The cap is what bounds the load and the wait together. A shed follower never tries more often than
// one of client-go's, which tries every retry period whatever the server says, so thousands of them
// load the server no more than client-go's electors would. And it sleeps no longer than the server's
// longest Retry-After or one retry period: a cap at the lease duration (5 minutes at a 10,000-lease
// timing) left the last unled leases of a cold start unled for minutes after the server had room.
// The leaders keep renewing on their retry period, and the server's capacity that the followers give
// up goes to them.
func followerBackoff(t lease.Timing, n int, retryAfter time.Duration, jitter func(time.Duration) time.Duration) time.Duration {
	limit := min(t.LeaseDuration, max(t.RetryPeriod, longestShedWait))
	return shedBackoff(min(t.RetryPeriod, firstShedWait), limit, n, retryAfter, jitter)
}

// shedBackoff is first, doubled for each of n-1 attempts shed before, up to limit, or the server's
// Retry-After if that is longer, plus up to half as much again of jitter (jitter(d) draws from [0, d)),
// so that the electors shed together do not return together.
func shedBackoff(first, limit time.Duration, n int, retryAfter time.Duration, jitter func(time.Duration) time.Duration) time.Duration {
	backoff := first
	for i := 1; i < n && backoff < limit; i++ {
		backoff *= 2
	}
	backoff = max(min(backoff, limit), retryAfter)
	return backoff + jitter(backoff/2+1)
}

func (e *Elector) logAttempt(err error, what string) {
	if kubeclient.IsConflict(err) || kubeclient.IsAlreadyExists(err) {
		// Another candidate won the race, or our copy was stale: the watch brings the current lease, and
		// the next attempt reads it first in case the watch does not.
		e.race = &lostRace{watched: e.watch.latest()}
		e.cfg.Log.V(1).Info("Lost the race for the lease", "lease", e.name, "attempt", what)
		return
	}
	e.cfg.Log.Error(err, "Could not "+what+" the lease", "lease", e.name)
}

// know records l as the latest copy of the lease the elector knows (nil: none, or it was deleted).
func (e *Elector) know(l *Lease) {
	e.known = l
	e.seen.Store(l)
}
