// Package globalelection is the election controller that runs in each cluster: it contends on a global
// backend on behalf of its cluster's live MultiClusterLease candidate and mirrors the global outcome into
// every local MultiClusterLease's status. It is the only part of leasegate that talks to the backend, and
// there is no central control plane: losing any one cluster leaves the others electing.
package globalelection

import (
	"context"
	"errors"
	"time"
)

// ErrLost says a term is over: its backend lease expired or was revoked, or its key now belongs to another
// term. The controller stops confirming at once.
var ErrLost = errors.New("the term is over in the global backend")

// Claim is what a term's key holds: who leads, and from which cluster.
type Claim struct {
	Cluster string `json:"cluster"`
	Holder  string `json:"holder"`
	// Session is the backend lease the key lives under, so that a restarted controller of the same
	// cluster can adopt its own term instead of churning the global leader.
	Session int64 `json:"session"`
}

// Term is one global leader's tenure on one key.
type Term struct {
	Key   string
	Claim Claim
	// Token is the key's create revision: unique per term and growing across terms, so it fences.
	Token int64
	// TTL is what the backend granted the term's lease for, and extends it by at each confirmation; 0 for
	// a term read rather than won, until it is confirmed. The term's validUntil counts from this, never
	// from the spec's leaseDurationSeconds, which may change mid-term while the backend lease keeps the
	// TTL it was granted.
	TTL time.Duration
}

// Backend is the global store the election controllers of every cluster agree through. Each call is a
// compare-and-swap or a linearizable read, so two controllers can never both win one key; expiry is the
// backend's TTL, never a timestamp written by another machine.
//
// etcd is the implementation (Etcd); the interface is small so that other engines with leases and
// conditional writes can follow.
type Backend interface {
	// Campaign claims key for claim under a new backend lease of ttl if nobody holds it. It returns the
	// term it won, with the TTL the backend granted, or won=false and the term that holds the key.
	Campaign(ctx context.Context, key string, claim Claim, ttl time.Duration) (term Term, won bool, err error)
	// Confirm extends term's backend lease by its full TTL and checks that the key still belongs to term.
	// The extension counts from the moment the request was sent or later: the caller takes that instant
	// as the start of the term's remaining validity, which lasts the TTL it returns: the one the backend
	// extended the lease by. It returns ErrLost when the term is over.
	Confirm(ctx context.Context, term Term) (ttl time.Duration, err error)
	// Resign ends term at once, so another cluster can win without waiting for the TTL.
	Resign(ctx context.Context, term Term) error
	// Get returns the term that holds key, ok=false when nobody does.
	Get(ctx context.Context, key string) (term Term, ok bool, err error)
	// Watch calls changed with each key that changed, until ctx ends.
	Watch(ctx context.Context, changed func(key string))
}
