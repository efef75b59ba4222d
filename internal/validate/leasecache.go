package validate

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// LeaseCache holds the guarded leases, and only those: one informer per lease the guards name, filtered by
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
	stop     context.CancelFunc
	informer cache.SharedIndexInformer
}

// NewLeaseCache returns an empty cache; Start begins watching.
func NewLeaseCache(client kubernetes.Interface, log logr.Logger) *LeaseCache {
	return &LeaseCache{client: client, log: log, leases: map[namespacedName]*coordinationv1.Lease{}, watching: map[LeaseRef]*leaseWatch{}}
}

// syncWait bounds how long a lookup waits for a guard's informer that has not listed yet.
const syncWait = time.Second

// Get returns the cached lease. A miss right after a configuration change may only mean that the new
// guard's informer has not listed yet; then Get waits for it, briefly, rather than report a lease as
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

// waitSynced reports true when the informers covering the lease had already listed, and otherwise
// waits up to syncWait for them.
func (c *LeaseCache) waitSynced(namespace, name string) bool {
	c.mu.RLock()
	var pending []cache.InformerSynced
	for _, ref := range []LeaseRef{{namespace, name}, {"", name}} {
		if w := c.watching[ref]; w != nil && !w.informer.HasSynced() {
			pending = append(pending, w.informer.HasSynced)
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

// Start records the context informers run in; Watch before Start queues the refs.
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

// Watch makes the cache follow exactly refs: informers start for new ones and stop for dropped ones.
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

// Synced reports whether every informer has listed its leases: until then a missing lease may only be
// not yet seen, so the webhook is not ready.
func (c *LeaseCache) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, w := range c.watching {
		if w == nil || !w.informer.HasSynced() {
			return false
		}
	}
	return true
}

func (c *LeaseCache) startWatch(ref LeaseRef) *leaseWatch {
	byName := fields.OneTermEqualSelector("metadata.name", ref.Name).String()
	leases := c.client.CoordinationV1().Leases(ref.Namespace) // "" lists every namespace
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return leases.Watch(ctx, opts)
		},
	}, &coordinationv1.Lease{}, 0, cache.Indexers{})
	set := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			c.mu.Lock()
			c.leases[namespacedName{l.Namespace, l.Name}] = l
			c.mu.Unlock()
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				c.mu.Lock()
				delete(c.leases, namespacedName{l.Namespace, l.Name})
				c.mu.Unlock()
			}
		},
	})
	ctx, stop := context.WithCancel(c.ctx)
	go informer.RunWithContext(ctx)
	c.log.Info("Watching guarded lease", "namespace", ref.Namespace, "name", ref.Name)
	return &leaseWatch{stop: stop, informer: informer}
}

// NeedLeaderElection is false: every replica answers admission requests from its own cache.
func (c *LeaseCache) NeedLeaderElection() bool { return false }
