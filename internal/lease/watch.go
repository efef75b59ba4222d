package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

// The backoff between failed attempts to list or watch the lease: from watchBackoffMin, doubling, up to
// watchBackoffMax, each with up to as much again of jitter so that thousands of agents cut off by an API
// server restart do not come back in step. client-go's reflector backs off from 0.8 s to 30 s; the cap
// is lower here because one watch per election is all an agent has, and a follower whose watch is down
// falls back to reading the lease before each attempt (see tryAcquire).
const (
	watchBackoffMin = 200 * time.Millisecond
	watchBackoffMax = 10 * time.Second
)

// watch keeps e.observed current and signals changed after each change, until ctx ends: it lists the
// lease by name, then watches it from the list's resourceVersion, resuming from the last version seen
// (bookmarks included) when the server ends a watch, and listing again when that version has expired.
// It replaces client-go's informer, whose reflector this needs a small part of.
func (e *Elector) watch(ctx context.Context, changed chan<- struct{}) {
	notify := func(lease *Lease) {
		e.observed.Store(lease)
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	backoff := watchBackoffMin
	wait := func(err error) {
		// Expiry is routine (the server compacted past the version this watch had); anything else, such
		// as an API server restart or missing rights, is shown, each time it happens, at most every
		// watchBackoffMax once it persists.
		if kubeclient.IsResourceExpired(err) {
			e.cfg.Log.V(1).Info("The lease's watch expired; listing it again", "lease", e.name)
		} else {
			e.cfg.Log.Error(err, "Watching the lease failed; retrying", "lease", e.name, "in", backoff)
		}
		t := e.clock.NewTimer(backoff + rand.N(backoff))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		backoff = min(2*backoff, watchBackoffMax)
	}

	var resourceVersion string // "" lists first
	for ctx.Err() == nil {
		if resourceVersion == "" {
			l, rv, err := e.cfg.Client.List(ctx, e.cfg.Namespace, e.cfg.Name)
			if err != nil {
				if ctx.Err() == nil {
					wait(err)
				}
				continue
			}
			resourceVersion = rv
			e.synced.Store(true)
			notify(l)
		}
		events, err := e.cfg.Client.Watch(ctx, e.cfg.Namespace, e.cfg.Name, resourceVersion)
		if err != nil {
			if kubeclient.IsResourceExpired(err) {
				resourceVersion = ""
			}
			if ctx.Err() == nil {
				wait(err)
			}
			continue
		}
		e.watching.Store(true)
		started, delivered := e.clock.Now(), false
		for event := range events {
			delivered = true
			switch event.Type {
			case Added, Modified:
				resourceVersion = event.Lease.ResourceVersion
				notify(event.Lease)
			case Deleted:
				resourceVersion = event.Lease.ResourceVersion
				notify(nil)
			case Bookmark:
				resourceVersion = event.Lease.ResourceVersion
			case Error:
				// Even an expired resourceVersion waits a little before the list: a server that keeps
				// expiring watches must not be listed in a tight loop.
				e.watching.Store(false)
				if kubeclient.IsResourceExpired(event.Err) {
					resourceVersion = ""
				}
				if ctx.Err() == nil {
					wait(event.Err)
				}
				continue
			}
			backoff = watchBackoffMin
		}
		e.watching.Store(false)
		// A watch that ends at once without an event (a proxy that closes it, say) is a failure too, as
		// client-go's reflector counts it: resumed at once, it would be asked again in a tight loop.
		if !delivered && e.clock.Since(started) < minWatchDuration && ctx.Err() == nil {
			wait(errShortWatch)
		}
	}
}

// minWatchDuration is how long a watch that delivered nothing must have lasted not to count as failed.
const minWatchDuration = time.Second

var errShortWatch = errors.New("the watch ended at once without an event")
