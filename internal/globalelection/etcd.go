package globalelection

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeyPrefix is where the election keys live in etcd: <prefix><namespace>/<name>. Keep it leasegate's:
// a key deleted by anyone else while its etcd lease lives lets another cluster win early.
const KeyPrefix = "/leasegate/multiclusterleases/"

// Etcd is the etcd v3 backend: a term is a key created under an etcd lease with a transaction that
// requires the key not to exist, its fencing token the key's create revision.
//
// It avoids the traps of etcd's concurrency package. Campaign there waits without watching its session,
// so a candidate whose lease lapsed while it waited can return as leader; here a claim is only ever the
// outcome of one transaction that writes under a live lease (a lapsed lease fails the put), and every
// confirmation re-checks the key's create revision. An etcd leader change renews every lease to its full
// TTL: that only delays another cluster's win, so it costs failover time, never safety.
type Etcd struct {
	Client *clientv3.Client
	Log    logr.Logger
}

var _ Backend = (*Etcd)(nil)

// Campaign implements Backend.
func (e *Etcd) Campaign(ctx context.Context, key string, claim Claim, ttl time.Duration) (Term, bool, error) {
	grant, err := e.Client.Grant(ctx, int64(math.Ceil(ttl.Seconds())))
	if err != nil {
		return Term{}, false, fmt.Errorf("granting an etcd lease: %w", err)
	}
	claim.Session = int64(grant.ID)
	value, err := json.Marshal(claim)
	if err != nil {
		return Term{}, false, err
	}
	resp, err := e.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value), clientv3.WithLease(grant.ID)), clientv3.OpGet(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil || !resp.Succeeded {
		e.revoke(grant.ID)
	}
	if err != nil {
		return Term{}, false, fmt.Errorf("claiming %s: %w", key, err)
	}
	kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Held a moment ago, gone when read in the same transaction: cannot happen; try again.
		return Term{}, false, fmt.Errorf("claiming %s: the key vanished inside the transaction", key)
	}
	term, err := termOf(key, kvs[0].Value, kvs[0].CreateRevision)
	if resp.Succeeded {
		term.TTL = time.Duration(grant.TTL) * time.Second
	}
	return term, resp.Succeeded, err
}

// Confirm implements Backend.
func (e *Etcd) Confirm(ctx context.Context, term Term) (time.Duration, error) {
	renewed, err := e.Client.KeepAliveOnce(ctx, clientv3.LeaseID(term.Claim.Session))
	if err != nil {
		if isLeaseNotFound(err) {
			return 0, ErrLost
		}
		return 0, fmt.Errorf("renewing the etcd lease of %s: %w", term.Key, err)
	}
	resp, err := e.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(term.Key), "=", term.Token)).Commit()
	if err != nil {
		return 0, fmt.Errorf("checking %s: %w", term.Key, err)
	}
	if !resp.Succeeded {
		return 0, ErrLost
	}
	return time.Duration(renewed.TTL) * time.Second, nil
}

// Resign implements Backend: revoking the lease deletes the key with it, and cannot touch a later term's
// key, which lives under another lease.
func (e *Etcd) Resign(ctx context.Context, term Term) error {
	if _, err := e.Client.Revoke(ctx, clientv3.LeaseID(term.Claim.Session)); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("revoking the etcd lease of %s: %w", term.Key, err)
	}
	return nil
}

// Get implements Backend with a linearizable read.
func (e *Etcd) Get(ctx context.Context, key string) (Term, bool, error) {
	resp, err := e.Client.Get(ctx, key)
	if err != nil {
		return Term{}, false, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Term{}, false, nil
	}
	term, err := termOf(key, resp.Kvs[0].Value, resp.Kvs[0].CreateRevision)
	return term, err == nil, err
}

// Watch implements Backend. It re-watches after any failure (a compaction, a member that lost quorum:
// WithRequireLeader ends a watch served by a partitioned member instead of leaving it silent).
func (e *Etcd) Watch(ctx context.Context, changed func(key string)) {
	for ctx.Err() == nil {
		watchCtx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range e.Client.Watch(watchCtx, KeyPrefix, clientv3.WithPrefix()) {
			if err := resp.Err(); err != nil {
				e.Log.V(1).Info("Watch of the global backend ended; watching again", "error", err.Error())
				break
			}
			for _, ev := range resp.Events {
				changed(string(ev.Kv.Key))
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *Etcd) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.Client.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
		e.Log.V(1).Info("Could not revoke an unused etcd lease; it expires by its TTL", "error", err.Error())
	}
}

func termOf(key string, value []byte, createRevision int64) (Term, error) {
	var claim Claim
	if err := json.Unmarshal(value, &claim); err != nil {
		return Term{}, fmt.Errorf("%s holds %q, not a leasegate claim: %w", key, value, err)
	}
	return Term{Key: key, Claim: claim, Token: createRevision}, nil
}

func isLeaseNotFound(err error) bool {
	return err == rpctypes.ErrLeaseNotFound || strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())
}

// Key is the etcd key of the MultiClusterLease namespace/name: the same in every cluster, which is what
// makes the MultiClusterLeases of one namespace and name one election.
func Key(namespace, name string) string { return KeyPrefix + namespace + "/" + name }

// ParseKey is the namespace and name of a MultiClusterLease's key.
func ParseKey(key string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(key, KeyPrefix)
	if !found {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, "/")
	if !ok || namespace == "" || name == "" {
		return "", "", false
	}
	return namespace, name, true
}
