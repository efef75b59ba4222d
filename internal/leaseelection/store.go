package leaseelection

import (
	"context"
)

// Store is what a Lock reads and writes: one lease-shaped object, read, written with a compare-and-swap
// on resourceVersion, and watched. Client implements it for Leases and for the spec of MultiClusterLeases.
type Store interface {
	Get(ctx context.Context, namespace, name string) (*Lease, error)
	Create(ctx context.Context, l *Lease) (*Lease, error)
	// Update writes l if its resourceVersion is still current; a stale one fails with a Conflict.
	Update(ctx context.Context, l *Lease) (*Lease, error)
	// List reads the lease of this name, nil when there is none, and the resourceVersion a watch of it
	// starts from.
	List(ctx context.Context, namespace, name string) (lease *Lease, resourceVersion string, err error)
	// Watch streams the changes to the lease of this name after resourceVersion, until ctx ends or the
	// server ends the watch (the channel closes). An expired resourceVersion arrives as an Error event.
	Watch(ctx context.Context, namespace, name, resourceVersion string) (<-chan Event, error)
}

// streamingLister is a Store that can also list the lease and watch it in one request (Client can).
type streamingLister interface {
	// StreamList streams the lease of this name as a watch that begins with a recent version (the API
	// server's watch cache's, which can be older than etcd's): an Added event (none when there is no
	// lease), then a Bookmark with InitialEventsEnd set, then its changes as Watch delivers them. It
	// returns errStreamingListRefused when the API server does not serve it.
	StreamList(ctx context.Context, namespace, name string) (<-chan Event, error)
}

// EventType is the type of a watch event, as the API server names it.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	// Bookmark carries only a newer resourceVersion to resume from.
	Bookmark EventType = "BOOKMARK"
	// Error ends a watch: Err says why (kubeclient.IsResourceExpired: list again).
	Error EventType = "ERROR"
)

// Event is one change a watch delivers.
type Event struct {
	Type EventType
	// Lease is the object after the change (before it, for Deleted); only its resourceVersion for a Bookmark.
	Lease *Lease
	// InitialEventsEnd marks the Bookmark that ends a streamed list's first version of the lease.
	InitialEventsEnd bool
	Err              error
}
