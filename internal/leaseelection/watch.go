package leaseelection

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

// leaseWatch keeps the latest version of one lease and says when it changed. It replaces client-go's
// informer, whose reflector this needs a small part of. It reports what it saw and nothing more: the
// elector reads it and decides.
type leaseWatch struct {
	store Store
	// streamer, when set, lists and watches in one request (the store's StreamList).
	streamer        streamingLister
	namespace, name string
	// retryPeriod is the election's: the window over which expired watches spread their new lists.
	retryPeriod time.Duration
	clock       clock.Clock
	log         logr.Logger

	// observed is the latest version of the lease the watch delivered (nil before the first, and after a
	// delete); synced is set once it has listed the lease, watching while a watch stream is open, listedAt
	// (Unix nanoseconds) when it last listed it.
	observed atomic.Pointer[Lease]
	synced   atomic.Bool
	watching atomic.Bool
	listedAt atomic.Int64
}

// latest is the latest version of the lease seen, nil before the first and after a delete.
func (w *leaseWatch) latest() *Lease { return w.observed.Load() }

// fresh reports whether latest is current enough to write on: a watch stream is open, or the lease was
// listed within the last window.
func (w *leaseWatch) fresh(window time.Duration) bool {
	return w.watching.Load() || w.clock.Since(time.Unix(0, w.listedAt.Load())) < window
}

// The backoff between failed attempts to list or watch the lease: from watchBackoffMin, doubling, up to
// watchBackoffMax, each with up to as much again of jitter so that thousands of agents cut off by an API
// server restart do not come back in step, and never shorter than the server's Retry-After. These are
// client-go's reflector's: an API server restarting under thousands of watchers meets every one of them
// again at the rate the cap allows: under 15,000 of them, a restarted API server took four times as
// long to answer ready with 0.2 s to 10 s here (and the follower backoff before followerBackoff's
// present form) as with these (docs/scale.md, runs 19-22). A follower whose watch is
// down loses no takeover to the longer wait: it judges the lease from the last copy it saw, and reads
// it before it takes it (see tryAcquire).
const (
	watchBackoffMin = 800 * time.Millisecond
	watchBackoffMax = 30 * time.Second
)

// watchRetryDelay is the wait after a failed list or watch: the backoff, or the server's Retry-After if
// longer, plus jitter (drawn from [0, backoff)). It never undercuts the Retry-After.
func watchRetryDelay(backoff, retryAfter, jitter time.Duration) time.Duration {
	return max(backoff, retryAfter) + jitter
}

// relistWindow is the span over which the elections whose watches expired together (an API server
// restarted, its watch cache too new for the versions they had) spread their new lists: the retry
// period, or the backoff once it has grown past it. A late list costs no safety: a leader renews on its
// own copy, and a follower without a watch reads the lease before it takes it.
func relistWindow(retryPeriod, backoff time.Duration) time.Duration {
	return max(retryPeriod, backoff)
}

// run keeps latest current and signals changed after each change, until ctx ends: it lists the lease by
// name, then watches it from the list's resourceVersion, resuming from the last version seen (bookmarks
// included) when the server ends a watch, and listing again when that version has expired. Where the
// store and the API server can, the list and its watch are one request (StreamList); otherwise two.
func (w *leaseWatch) run(ctx context.Context, changed chan<- struct{}) {
	label := w.namespace + "/" + w.name
	notify := func(l *Lease) {
		w.observed.Store(l)
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	backoff := watchBackoffMin
	wait := func(err error) {
		if ctx.Err() != nil {
			return // shutting down: the failure is the cancellation
		}
		retryAfter, _ := kubeclient.RetryAfterOf(err)
		// Expiry is routine (the server compacted past the version this watch had), but it comes to every
		// agent at once after an API server restart: its list waits for a point drawn over the relist
		// window, so that they do not all list in the same instant. Anything else, such as an API server
		// restart or missing rights, is shown, each time it happens, at most every watchBackoffMax once
		// it persists. Even an expiry waits the backoff: a server that keeps expiring watches must not be
		// listed in a tight loop.
		var delay time.Duration
		if kubeclient.IsResourceExpired(err) {
			delay = watchRetryDelay(backoff, retryAfter, rand.N(relistWindow(w.retryPeriod, backoff)))
			w.log.V(1).Info("The lease's watch expired; listing it again", "lease", label, "in", delay)
		} else {
			delay = watchRetryDelay(backoff, retryAfter, rand.N(backoff))
			w.log.Error(err, "Watching the lease failed; retrying", "lease", label, "in", delay)
		}
		t := w.clock.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		backoff = min(2*backoff, watchBackoffMax)
	}

	// streaming: the store can stream a list and the server has not refused it.
	streaming := w.streamer != nil
	var resourceVersion string // "" lists first
	for ctx.Err() == nil {
		listing := resourceVersion == ""
		if listing && !streaming {
			l, rv, err := w.store.List(ctx, w.namespace, w.name)
			if err != nil {
				wait(err)
				continue
			}
			resourceVersion = rv
			w.listed(l, notify)
			continue
		}
		open := func(ctx context.Context) (<-chan Event, error) {
			if listing {
				return w.streamer.StreamList(ctx, w.namespace, w.name)
			}
			return w.store.Watch(ctx, w.namespace, w.name, resourceVersion)
		}
		progressed, err := w.follow(ctx, open, listing, &resourceVersion, notify)
		if progressed {
			backoff = watchBackoffMin
		}
		switch {
		case errors.Is(err, errStreamingListRefused), errors.Is(err, errStreamingListIgnored):
			w.log.V(1).Info("The API server does not stream lists; listing and watching the lease instead", "lease", label, "reason", err.Error())
			streaming = false
		case err != nil:
			if kubeclient.IsResourceExpired(err) {
				resourceVersion = ""
			}
			wait(err)
		}
	}
}

// listed records l (nil: there is no lease) as the lease's version a list read, and reports it.
func (w *leaseWatch) listed(l *Lease, notify func(*Lease)) {
	w.listedAt.Store(w.clock.Now().UnixNano())
	w.synced.Store(true)
	notify(l)
}

// follow opens one watch and reads its events, keeping *resourceVersion at the last version seen, until
// the stream ends. A streamed list's (streamedList) first events are the lease's current version, which
// counts as listed once the bookmark that ends them comes; a stream cut before that leaves
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
