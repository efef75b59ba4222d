package validate

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// LeaseCache holds the guarded leases, and only those: one watch per lease the guards name, filtered by
// name (and by namespace when the guard gives one), so node heartbeats and unrelated controllers' leases
// never reach leasegate. Lookups take a read lock and a map access, no API call and no allocation.
type LeaseCache struct {
	client kubernetes.Interface
	log    logr.Logger
	// MultiClusterLeases reads the MultiClusterLeases guards name: the manager's cache, whose informer
	// starts with the first such guard's first request. Nil: no MultiClusterLease is ever found.
	MultiClusterLeases client.Reader

	mu       sync.RWMutex
	leases   map[namespacedName]*coordinationv1.Lease
	watching map[LeaseRef]*leaseWatch
	ctx      context.Context
}

type leaseWatch struct {
	stop  context.CancelFunc
	store *leaseStore
}

// HasSynced reports whether the watch has listed its leases.
func (w *leaseWatch) HasSynced() bool { return w.store.synced.Load() }

// relistBackoff is how a guarded lease's watch retries after losing the API server. client-go's default
// doubles from 800 ms to a 30 s cap (with as much jitter again), so after an outage of a few seconds the
// fence went on judging from the leases as they were before it for up to a minute: measured on the real
// cluster, a kube-apiserver killed for 6 s left the new leader fenced for 13 s after it had taken over
// (0.2 s with this backoff). Nobody is admitted on a stale lease meanwhile (it has expired), but nobody
// is admitted at all. Retrying every second at most costs one failed request per guarded lease per
// second while the server is away.
var relistBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 10, Cap: time.Second}

// NewLeaseCache returns an empty cache; Start begins watching.
func NewLeaseCache(client kubernetes.Interface, log logr.Logger) *LeaseCache {
	return &LeaseCache{client: client, log: log, leases: map[namespacedName]*coordinationv1.Lease{}, watching: map[LeaseRef]*leaseWatch{}}
}

// syncWait bounds how long a lookup waits for a guard's watch that has not listed yet.
const syncWait = time.Second

// Get returns the cached lease. A miss right after a configuration change may only mean that the new
// guard's watch has not listed yet; then Get waits for it, briefly, rather than report a lease as
// missing (which would deny its holder).
func (c *LeaseCache) Get(namespace, name string) (*coordinationv1.Lease, bool) {
	c.mu.RLock()
	l, ok := c.leases[namespacedName{namespace, name}]
	c.mu.RUnlock()
	if ok || c.waitSynced(namespace, name) {
		return l, ok
	}
	c.mu.RLock()
	l, ok = c.leases[namespacedName{namespace, name}]
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

// waitSynced reports true when the watches covering the lease had already listed, and otherwise
// waits up to syncWait for them.
func (c *LeaseCache) waitSynced(namespace, name string) bool {
	c.mu.RLock()
	var pending []cache.InformerSynced
	for _, ref := range []LeaseRef{{namespace, name}, {"", name}} {
		if w := c.watching[ref]; w != nil && !w.HasSynced() {
			pending = append(pending, w.HasSynced)
		}
	}
	c.mu.RUnlock()
	if len(pending) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), syncWait)
	defer cancel()
	cache.WaitForCacheSync(ctx.Done(), pending...)
	return false
}

// Start records the context watches run in; Watch before Start queues the refs.
func (c *LeaseCache) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	pending := make([]LeaseRef, 0, len(c.watching))
	for ref := range c.watching {
		pending = append(pending, ref)
	}
	c.watching = map[LeaseRef]*leaseWatch{}
	c.mu.Unlock()
	c.Watch(pending)
	<-ctx.Done()
	return nil
}

// Watch makes the cache follow exactly refs: watches start for new ones and stop for dropped ones.
func (c *LeaseCache) Watch(refs []LeaseRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[LeaseRef]bool{}
	for _, ref := range refs {
		want[ref] = true
		if _, ok := c.watching[ref]; ok {
			continue
		}
		if c.ctx == nil {
			c.watching[ref] = nil // started by Start
			continue
		}
		c.watching[ref] = c.startWatch(ref)
	}
	for ref, w := range c.watching {
		if want[ref] {
			continue
		}
		if w != nil {
			w.stop()
		}
		delete(c.watching, ref)
		for key := range c.leases {
			if key.name == ref.Name && (ref.Namespace == "" || key.namespace == ref.Namespace) && !c.wantedLocked(key, want) {
				delete(c.leases, key)
			}
		}
	}
}

// wantedLocked reports whether another watched ref still covers key.
func (c *LeaseCache) wantedLocked(key namespacedName, want map[LeaseRef]bool) bool {
	return want[LeaseRef{Namespace: key.namespace, Name: key.name}] || want[LeaseRef{Name: key.name}]
}

// Synced reports whether every watch has listed its leases: until then a missing lease may only be
// not yet seen, so the webhook is not ready.
func (c *LeaseCache) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, w := range c.watching {
		if w == nil || !w.HasSynced() {
			return false
		}
	}
	return true
}

func (c *LeaseCache) startWatch(ref LeaseRef) *leaseWatch {
	byName := fields.OneTermEqualSelector("metadata.name", ref.Name).String()
	leases := c.client.CoordinationV1().Leases(ref.Namespace) // "" lists every namespace
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return leases.Watch(ctx, opts)
		},
	}
	store := &leaseStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), cache: c}
	// A bare reflector, not an informer: an informer cannot be given a backoff.
	backoff := relistBackoff
	reflector := cache.NewReflectorWithOptions(lw, &coordinationv1.Lease{}, store, cache.ReflectorOptions{
		Name: "guarded lease " + ref.Namespace + "/" + ref.Name, Backoff: &backoff,
	})
	ctx, stop := context.WithCancel(c.ctx)
	go reflector.RunWithContext(ctx)
	c.log.Info("Watching guarded lease", "namespace", ref.Namespace, "name", ref.Name)
	return &leaseWatch{stop: stop, store: store}
}

// leaseStore is a guarded lease watch's store: it mirrors every change into the cache's map, where
// lookups find it without a key function or a copy.
type leaseStore struct {
	cache.Store
	cache  *LeaseCache
	synced atomic.Bool
}

func (s *leaseStore) Add(obj any) error {
	s.set(obj)
	return s.Store.Add(obj)
}

func (s *leaseStore) Update(obj any) error {
	s.set(obj)
	return s.Store.Update(obj)
}

func (s *leaseStore) Delete(obj any) error {
	s.unset(obj)
	return s.Store.Delete(obj)
}

// Replace is a list: leases it no longer has are gone.
func (s *leaseStore) Replace(list []any, resourceVersion string) error {
	kept := map[string]bool{}
	for _, obj := range list {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			kept[key] = true
		}
		s.set(obj)
	}
	for _, obj := range s.Store.List() {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil && !kept[key] {
			s.unset(obj)
		}
	}
	err := s.Store.Replace(list, resourceVersion)
	s.synced.Store(true)
	return err
}

func (s *leaseStore) set(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		s.cache.mu.Lock()
		s.cache.leases[namespacedName{l.Namespace, l.Name}] = l
		s.cache.mu.Unlock()
	}
}

func (s *leaseStore) unset(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		s.cache.mu.Lock()
		delete(s.cache.leases, namespacedName{l.Namespace, l.Name})
		s.cache.mu.Unlock()
	}
}

// NeedLeaderElection is false: every replica answers admission requests from its own cache.
func (c *LeaseCache) NeedLeaderElection() bool { return false }
