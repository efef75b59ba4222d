// Package leasecache is the fence's view of the Leases (and MultiClusterLeases) it judges writes by: one
// watch, lookups without API calls or allocations.
package leasecache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// key is a map key that needs no string concatenation, so lookups do not allocate.
type key struct{ namespace, name string }

// LeaseCache holds every Lease outside kube-node-lease from one watch, however many guards there are, so
// that the API server's cost of serving the fence does not grow with them, and a guard's lease is known
// the moment the guard is added. One stream keeps every change in order: a lease can never be seen
// twice, nor missed as it moves between two. Nodes' heartbeats (kube-node-lease, one per node renewed
// every 10 s, the bulk of a large cluster's lease traffic) never reach leasegate; what remains is
// leasegate's own leases and each controller's election. Lookups take a read lock and a map access, no
// API call and no allocation.
type LeaseCache struct {
	client kubernetes.Interface
	log    logr.Logger
	// MultiClusterLeases reads the MultiClusterLeases guards and injected pods name: the manager's
	// cache, whose informer starts with the first lookup. Nil: no MultiClusterLease is ever found.
	MultiClusterLeases client.Reader

	mu     sync.RWMutex
	leases map[key]*leaseapi.Kept
	synced atomic.Bool
}

// relistBackoff is how the watch retries after losing the API server. client-go's default doubles from
// 800 ms to a 30 s cap (with as much jitter again), so after an outage of a few seconds the fence would go
// on judging from the leases as they were before it for up to a minute, fencing a leader that took over
// meanwhile (docs/performance.md, the real cluster's kube-apiserver restart). Nobody is admitted on a
// stale lease meanwhile (it has expired), but nobody is admitted at all. Retrying every second at most costs one failed request a second while the server is away.
var relistBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 10, Cap: time.Second}

// notHeartbeats selects every Lease but nodes' heartbeats.
const notHeartbeats = "metadata.namespace!=" + corev1.NamespaceNodeLease

// NewLeaseCache returns an empty cache; Start begins watching.
func NewLeaseCache(client kubernetes.Interface, log logr.Logger) *LeaseCache {
	return &LeaseCache{client: client, log: log, leases: map[key]*leaseapi.Kept{}}
}

// syncWait bounds how long a lookup waits for the watch's first list.
const syncWait = time.Second

// Get returns the cached lease, read for judging (leaseapi.Kept). A miss before the watch has listed only means the lease is not seen yet;
// then Get waits for the list, briefly, rather than report a lease as missing (which would deny its
// holder).
func (c *LeaseCache) Get(namespace, name string) (*leaseapi.Kept, bool) {
	c.mu.RLock()
	l, ok := c.leases[key{namespace, name}]
	c.mu.RUnlock()
	if ok || c.synced.Load() {
		return l, ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), syncWait)
	defer cancel()
	cache.WaitForCacheSync(ctx.Done(), c.Synced)
	c.mu.RLock()
	l, ok = c.leases[key{namespace, name}]
	c.mu.RUnlock()
	return l, ok
}

// MultiClusterLease returns the cached MultiClusterLease. A lookup copies the object (the manager's
// cache hands out copies); unlike a Lease guard's, a MultiClusterLease guard's decision allocates.
func (c *LeaseCache) MultiClusterLease(namespace, name string) (*v1alpha1.MultiClusterLease, bool) {
	if c.MultiClusterLeases == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), syncWait)
	defer cancel()
	m := &v1alpha1.MultiClusterLease{}
	if err := c.MultiClusterLeases.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m); err != nil {
		if !apierrors.IsNotFound(err) {
			c.log.Error(err, "Reading a guarded MultiClusterLease failed; is its CRD installed?", "namespace", namespace, "name", name)
		}
		return nil, false
	}
	return m, true
}

// Synced reports whether the watch has listed the leases: until then a missing lease may only be not yet
// seen, so the webhook is not ready.
func (c *LeaseCache) Synced() bool { return c.synced.Load() }

// Start runs the watch until ctx ends.
func (c *LeaseCache) Start(ctx context.Context) error {
	leases := c.client.CoordinationV1().Leases(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = notHeartbeats
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = notHeartbeats
			return leases.Watch(ctx, opts)
		},
	}
	// A bare reflector, not an informer: an informer cannot be given a backoff.
	backoff := relistBackoff
	reflector := cache.NewReflectorWithOptions(lw, &coordinationv1.Lease{}, (*leaseStore)(c), cache.ReflectorOptions{
		Name: "leases", Backoff: &backoff,
	})
	c.log.Info("Watching every Lease outside " + corev1.NamespaceNodeLease)
	reflector.RunWithContext(ctx)
	return nil
}

// leaseStore is what the watch's reflector writes to: the cache's map itself, where lookups find each
// lease without a key function or a copy.
type leaseStore LeaseCache

var _ cache.ReflectorStore = (*leaseStore)(nil)

func (s *leaseStore) Add(obj any) error    { s.set(obj); return nil }
func (s *leaseStore) Update(obj any) error { s.set(obj); return nil }
func (s *leaseStore) Resync() error        { return nil }

func (s *leaseStore) Delete(obj any) error {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		s.mu.Lock()
		delete(s.leases, key{l.Namespace, l.Name})
		s.mu.Unlock()
	}
	return nil
}

// Replace is a list: it is every lease there is.
func (s *leaseStore) Replace(list []any, _ string) error {
	leases := make(map[key]*leaseapi.Kept, len(list))
	for _, obj := range list {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			leases[key{l.Namespace, l.Name}] = kept(l)
		}
	}
	s.mu.Lock()
	s.leases = leases
	s.mu.Unlock()
	s.synced.Store(true)
	return nil
}

func (s *leaseStore) set(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		k := kept(l)
		s.mu.Lock()
		s.leases[key{l.Namespace, l.Name}] = k
		s.mu.Unlock()
	}
}

// kept is the lease as the cache holds it: read for judging, and without managedFields, which no
// judgement reads and which are most of a renewed lease's size (an entry per writer, each with its fields
// as JSON). The reflector hands over a freshly decoded object, so it is changed in place.
func kept(l *coordinationv1.Lease) *leaseapi.Kept {
	l.ManagedFields = nil
	return leaseapi.Keep(l)
}

// NeedLeaderElection is false: every replica answers admission requests from its own cache.
func (c *LeaseCache) NeedLeaderElection() bool { return false }
