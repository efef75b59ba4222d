package leaseelection

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
)

// leaseWatch keeps the latest version of one lease and says when it changed. It replaces client-go's
// informer, whose reflector this needs a small part of. It reports what it saw and nothing more: the
// elector reads it and decides.
type leaseWatch struct {
	store Store
	// streamer, when set, lists and watches in one request (the store's StreamList).
	streamer        streamingLister
	namespace, name string
	// retryPeriod is the election's: the window over which failed watches spread their next attempts.
	// leaseDuration is the election's too: the wider window over which a follower's watch spreads its list
	// after the API server restarted (see run).
	retryPeriod, leaseDuration time.Duration
	clock                      clock.Clock
	log                        logr.Logger

	// observed is the latest version of the lease the watch delivered (nil before the first, and after a
	// delete); synced is set once it has listed the lease, watching while a watch stream is open, listedAt
	// (Unix nanoseconds) when it last listed it.
	observed atomic.Pointer[Lease]
	// deleted is the lease's last version, as a delete event carried it, until the elector takes it
	// (takeDeleted): the elector may run only after a later event has replaced observed.
	deleted  atomic.Pointer[Lease]
	synced   atomic.Bool
	watching atomic.Bool
	listedAt atomic.Int64

	// leading is set while the elector leads; resume carries the elector's own writes of the lease as
	// holder, and nil when it steps down (latest wins: see offer). A watch that is down resumes from such
	// a write (see run).
	leading atomic.Bool
	resume  chan *Lease

	// gate says whether the elector wants the lease watched (see watchGate).
	gate watchGate
}

// watchGate is whether the elector wants its lease watched: not while it leads, nor while it waits on the
// holder instead (see peer.go). Turning it off ends the watch open; turning it on starts one, from the
// version the elector last knew when it gives one.
type watchGate struct {
	mu sync.Mutex
	on bool
	// from is the version to watch from when the gate opens (nil: the watch's own).
	from *Lease
	// cancel ends the watch running through the gate (nil: none).
	cancel context.CancelFunc
	// changed is closed, and replaced, on every change.
	changed chan struct{}
}

// set opens or closes the gate; from, on opening, is the latest version the elector knows.
func (g *watchGate) set(on bool, from *Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on == g.on {
		return
	}
	g.on = on
	if on {
		g.from = from
	} else if g.cancel != nil {
		g.cancel()
		g.cancel = nil
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// pass waits until the gate is open, or ctx ends, and returns a context that ends with ctx or when the
// gate closes, its cancel, and the version to watch from when the elector gave one since the last pass.
func (g *watchGate) pass(ctx context.Context) (context.Context, context.CancelFunc, *Lease) {
	for {
		g.mu.Lock()
		if g.on {
			passCtx, cancel := context.WithCancel(ctx)
			g.cancel = cancel
			from := g.from
			g.from = nil
			g.mu.Unlock()
			return passCtx, cancel, from
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx, func() {}, nil
		case <-changed:
		}
	}
}

func newLeaseWatch(store Store, streamer streamingLister, namespace, name string, timing lease.Timing, clock clock.Clock, log logr.Logger) *leaseWatch {
	w := &leaseWatch{
		store: store, streamer: streamer, namespace: namespace, name: name,
		retryPeriod: timing.RetryPeriod, leaseDuration: timing.LeaseDuration,
		clock: clock, log: log, resume: make(chan *Lease, 1),
	}
	w.gate.on, w.gate.changed = true, make(chan struct{}) // until the elector knows better, it watches
	return w
}

// want tells the watch whether the elector wants the lease watched; from, when it does, is the latest
// version the elector knows, which a watch that was off starts from.
func (w *leaseWatch) want(on bool, from *Lease) { w.gate.set(on, from) }

// latest is the latest version of the lease seen, nil before the first and after a delete.
func (w *leaseWatch) latest() *Lease { return w.observed.Load() }

// takeDeleted returns the last version of the lease a delete event carried since it was last called (nil:
// none), and forgets it.
func (w *leaseWatch) takeDeleted() *Lease { return w.deleted.Swap(nil) }

// fresh reports whether latest is current enough to write on: a watch stream is open, or the lease was
// listed within the last window.
func (w *leaseWatch) fresh(window time.Duration) bool {
	return w.watching.Load() || w.clock.Since(time.Unix(0, w.listedAt.Load())) < window
}

// wrote tells the watch of l, which the elector just wrote as holder: the freshest version of the lease
// there is, and one the API server it was written to can watch from.
func (w *leaseWatch) wrote(l *Lease) { w.offer(l) }

// lead tells the watch whether the elector leads. A step-down ends the wait of a leader's watch that is
// down, which now retries on its own.
func (w *leaseWatch) lead(leading bool) {
	w.leading.Store(leading)
	if !leading {
		w.offer(nil)
	}
}

// offer puts l in resume, in place of anything there: only the elector's loop sends, so it never waits.
func (w *leaseWatch) offer(l *Lease) { offerLatest(w.resume, l) }

// The backoff between failed attempts to list or watch the lease: from watchBackoffMin, doubling, up to
// watchBackoffMax, each followed by a point drawn over the retry period (watchRetryDelay) so that
// thousands of agents cut off by an API server restart, or starting together, do not come back in step,
// and never shorter than the server's Retry-After. The figures are client-go's reflector's: an API
// server restarting under thousands of watchers meets every one of them again at the rate the cap
// allows, and under 15,000 of them a restarted API server took four times as long to answer ready with
// 0.2 s to 10 s here (and the follower backoff before followerBackoff's present form) as with these
// (docs/scale.md, runs 19-22). A follower whose watch is down loses no takeover to the longer wait: it
// judges the lease from the last copy it saw, and reads it before it takes it unless that copy names it
// the holder (see tryAcquire).
const (
	watchBackoffMin = 800 * time.Millisecond
	watchBackoffMax = 30 * time.Second
)

// watchRetryDelay is the wait of a watch after a failure: the backoff, or the server's Retry-After if
// longer, plus a point drawn by jitter over the window (the retry period, or the lease duration for a
// follower's list after a restart: see run), or over the backoff once it has grown past it. It never
// undercuts the Retry-After.
//
// The spread is the same for a watch that had listed the lease and for one that never did. The elections
// whose watches failed together (an API server restarted: every watch dropped, then expired) so come
// back over a retry period rather than in the same instant, and a late watch costs no safety: a leader
// renews on its own copy, and a follower without a watch judges the lease from the last copy it saw and
// reads it before it takes it (unless that copy names it the holder). A first list that failed is spread
// too, though the elector's first act waits for it, because that wait is bounded by a retry period too
// (see Run), and thousands of agents start together as thousands come back from a restart. Drawn over
// the backoff alone, the shed first lists of 15,000 starting agents led every lease no sooner
// (docs/scale.md, runs 41 against 33, 42 and 46).
func watchRetryDelay(window, backoff, retryAfter time.Duration, jitter func(time.Duration) time.Duration) time.Duration {
	return max(backoff, retryAfter) + jitter(max(window, backoff))
}

// run keeps latest current and signals changed after each change, until ctx ends: it lists the lease by
// name, then watches it from the list's resourceVersion, resuming from the last version seen (bookmarks
// included) when the server ends a watch, and listing again when that version has expired. Where the
// store and the API server can, the list and its watch are one request (StreamList); otherwise two.
//
// After a kube-apiserver restart every watch is down at once, and the versions they had have expired on
// the new server. What comes back first, and what not at all, is chosen so that the leaders' renewals
// meet as few other requests as can be:
//   - a leader's watch (only a leader whose lock answers it through the object watches: see
//     Elector.path) waits for the leader's next renewal and resumes from the version it wrote, with
//     no list: its renewals need no watch (each is a compare-and-swap), and its renewal is one the new
//     server can watch from;
//   - a follower's watch tries again at a point drawn over the retry period (or the backoff, when
//     longer: watchRetryDelay), so that thousands do not come back in the same instant;
//   - after a refused connection a follower's watch lists, as the version it had has expired on the
//     server that answers next, and draws that list over the lease duration instead: a list costs the
//     restarted server far more than a renewal, and the followers, two of every three agents at three
//     candidates a lease, are what crowded the leaders' renewals and conflict reads out of a restarted
//     API server at 5,000 leases (docs/scale.md, runs 57-59). The later watch costs no takeover: a
//     follower judges the lease from the copy it has, whose expiry is at most a lease duration away, and
//     reads the lease before it takes it (unless that copy names it the holder). It costs only the
//     prompt news of a release made in that window, which the follower then sees when its copy expires,
//     as after a crash. A watch that never listed has no copy to judge from, and keeps the retry period.
func (w *leaseWatch) run(outer context.Context, changed chan<- struct{}) {
	label := w.namespace + "/" + w.name
	ctx := outer
	notify := func(l *Lease) {
		w.observed.Store(l)
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var resourceVersion string // "" lists first
	// relisting: the watch lists (resourceVersion is empty) because a connection was refused, until a
	// list succeeds or the elector's write gives it a version to watch from.
	relisting := false
	// resumeFrom takes l, the elector's write (nil: it stepped down), as the version to watch from, and
	// reports whether it did.
	resumeFrom := func(l *Lease) bool {
		if l == nil {
			return false
		}
		resourceVersion, relisting = l.ResourceVersion, false
		w.listed(l, notify)
		return true
	}
	backoff := watchBackoffMin
	wait := func(err error) {
		if ctx.Err() != nil {
			return // shutting down: the failure is the cancellation
		}
		defer func() { backoff = min(2*backoff, watchBackoffMax) }()
		// A write already in resume was made while the watch was up, and may be older than what it saw.
		select {
		case <-w.resume:
		default:
		}
		// Expiry is routine (the server compacted past the version this watch had). Anything else, such
		// as an API server restart or missing rights, is shown, each time it happens, at most every
		// watchBackoffMax once it persists.
		show := func(msg string, kv ...any) {
			kv = append([]any{"lease", label}, kv...)
			if kubeclient.IsResourceExpired(err) {
				w.log.V(1).Info(msg, append(kv, "reason", err.Error())...)
			} else {
				w.log.Error(err, msg, kv...)
			}
		}
		retryAfter, _ := kubeclient.RetryAfterOf(err)
		if w.leading.Load() {
			show("Watching the lease failed; resuming after the next renewal")
			if resumeFrom(w.awaitRenewal(ctx, max(backoff, retryAfter))) || ctx.Err() != nil {
				return
			}
		}
		if kubeclient.IsConnectionRefused(err) {
			resourceVersion, relisting = "", true
		}
		window := w.retryPeriod
		if relisting && w.synced.Load() {
			window = w.leaseDuration
		}
		// Even an expiry waits the backoff: a server that keeps expiring watches must not be listed in a
		// tight loop.
		delay := watchRetryDelay(window, backoff, retryAfter, rand.N[time.Duration])
		show("Watching the lease failed; retrying", "in", delay, "list", resourceVersion == "")
		t := w.clock.NewTimer(delay)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				return
			case l := <-w.resume:
				if resumeFrom(l) {
					return
				}
			}
		}
	}

	// streaming: the store can stream a list and the server has not refused it.
	streaming := w.streamer != nil
	for outer.Err() == nil {
		// Each pass runs while the elector wants the lease watched: ctx, which the closures above read too,
		// ends when it stops wanting it, and the watch then waits for the next pass, keeping the version
		// it had, or taking the one the elector knows by then.
		passCtx, endPass, from := w.gate.pass(outer)
		ctx = passCtx
		if from != nil {
			// The elector's copy is newer than anything this watch saw while it was off, and what an
			// attempt takes as its base while the watch is open (latest).
			resourceVersion, relisting = from.ResourceVersion, false
			w.observed.Store(from)
		}
		w.pass(ctx, &resourceVersion, &relisting, &streaming, &backoff, wait, notify)
		endPass()
	}
}

// pass is one turn of run's loop: it lists the lease, or watches it until the watch ends, and waits after
// a failure (wait).
func (w *leaseWatch) pass(ctx context.Context, resourceVersion *string, relisting, streaming *bool, backoff *time.Duration, wait func(error), notify func(*Lease)) {
	if ctx.Err() != nil {
		return
	}
	listing := *resourceVersion == ""
	if listing && !*streaming {
		l, rv, err := w.store.List(ctx, w.namespace, w.name)
		if err != nil {
			wait(err)
			return
		}
		*resourceVersion, *relisting = rv, false
		w.listed(l, notify)
		return
	}
	open := func(ctx context.Context) (<-chan Event, error) {
		if listing {
			return w.streamer.StreamList(ctx, w.namespace, w.name)
		}
		return w.store.Watch(ctx, w.namespace, w.name, *resourceVersion)
	}
	progressed, err := w.follow(ctx, open, listing, resourceVersion, notify)
	if progressed {
		*backoff, *relisting = watchBackoffMin, false
	}
	switch {
	case ctx.Err() != nil:
		// The elector stopped wanting the watch, or is stopping: no failure to wait out.
	case errors.Is(err, errStreamingListRefused), errors.Is(err, errStreamingListIgnored):
		w.log.V(1).Info("The API server does not stream lists; listing and watching the lease instead", "lease", w.namespace+"/"+w.name, "reason", err.Error())
		*streaming = false
	case err != nil:
		if kubeclient.IsResourceExpired(err) {
			*resourceVersion = ""
		}
		wait(err)
	}
}

// awaitRenewal is a leader's watch's wait after a failure: for the elector's next write as holder, and for
// at least wait (the backoff, or the server's Retry-After), so that a watch that keeps failing (missing
// rights, say) is asked no more often than a follower's. It returns the latest write, or nil when the
// elector stepped down first (its watch then retries on its own) or ctx ended.
func (w *leaseWatch) awaitRenewal(ctx context.Context, wait time.Duration) *Lease {
	t := w.clock.NewTimer(wait)
	defer t.Stop()
	var latest *Lease
	for waited := false; !waited || latest == nil; {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			waited = true
		case latest = <-w.resume:
			if latest == nil {
				return nil
			}
		}
	}
	return latest
}

// listed records l (nil: there is no lease) as the lease's version a list read, and reports it.
func (w *leaseWatch) listed(l *Lease, notify func(*Lease)) {
	w.listedAt.Store(w.clock.Now().UnixNano())
	w.synced.Store(true)
	notify(l)
}

// follow opens one watch and reads its events, keeping *resourceVersion at the last version seen, until
// the stream ends. A streamed list's (streamedList) first events are the version of the lease it lists,
// which counts as listed once the bookmark that ends them comes; a stream cut before that leaves
// *resourceVersion as it was, empty, to list again, and one that brings a change before that end is a
// plain watch from a server or proxy that dropped sendInitialEvents, whose end would never come
// (errStreamingListIgnored). It reports whether any event came, and why the watch ended: nil when the
// server ended it normally, the error opening it, the server's error, or errShortWatch for a watch that
// ended at once without an event (a proxy that closes it, say), which client-go's reflector counts as
// failed too: resumed at once, it would be asked again in a tight loop.
func (w *leaseWatch) follow(ctx context.Context, open func(context.Context) (<-chan Event, error), streamedList bool, resourceVersion *string, notify func(*Lease)) (progressed bool, err error) {
	// Its own context, so that a stream left before the server ends it (errStreamingListIgnored) is closed.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := open(ctx)
	if err != nil {
		return false, err
	}
	defer w.watching.Store(false)
	initial := streamedList
	var first *Lease // the lease's version among a streamed list's initial events
	if !initial {
		w.watching.Store(true)
	}
	started := w.clock.Now()
	for event := range events {
		if event.Type == Error {
			return progressed, event.Err // the last event: the stream ends with it
		}
		if initial {
			// Neither progress nor a version to resume from (*resourceVersion stays empty): a stream cut
			// here has not told the lease's version.
			switch {
			case event.InitialEventsEnd:
				initial, progressed = false, true
				*resourceVersion = event.Lease.ResourceVersion
				w.listed(first, notify)
				w.watching.Store(true)
			case event.Type == Added:
				first = event.Lease
			case event.Type == Modified || event.Type == Deleted:
				return false, errStreamingListIgnored
			}
			continue
		}
		*resourceVersion = event.Lease.ResourceVersion
		progressed = true
		switch event.Type {
		case Added, Modified:
			notify(event.Lease)
		case Deleted:
			w.deleted.Store(event.Lease)
			notify(nil)
		}
	}
	if initial {
		return progressed, errInitialEventsCut
	}
	if !progressed && w.clock.Since(started) < minWatchDuration {
		return false, errShortWatch
	}
	return progressed, nil
}

// minWatchDuration is how long a watch that delivered nothing must have lasted not to count as failed.
const minWatchDuration = time.Second

var (
	errShortWatch       = errors.New("the watch ended at once without an event")
	errInitialEventsCut = errors.New("the streamed list ended before the lease's version did")
	// errStreamingListIgnored is a streamed list answered as a plain watch: a change came before the end
	// of the initial events.
	errStreamingListIgnored = errors.New("the API server answered a streamed list with a plain watch (a change before the end of the list)")
)
