package validate

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
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// LeaseCache holds the guarded leases from two watches, however many guards there are, so that the API
// server's cost of serving the fence does not grow with them: one of every Lease leasegate provisions
// (labelled leasegate.io/managed=true), and one of every other Lease outside kube-node-lease, of which it
// keeps those the guards name (controllers' own, such as cert-manager's, and those agents created
// themselves). Node heartbeats never reach leasegate. Lookups take a read lock and a map access, no API
// call and no allocation.
type LeaseCache struct {
	client kubernetes.Interface
	log    logr.Logger
	// MultiClusterLeases reads the MultiClusterLeases guards name: the manager's cache, whose informer
	// starts with the first such guard's first request. Nil: no MultiClusterLease is ever found.
	MultiClusterLeases client.Reader

	mu     sync.RWMutex
	leases map[namespacedName]*coordinationv1.Lease
	// guarded is what the guards name: the leases kept from the others' watch.
	guarded map[LeaseRef]bool
	// provisioned and others are the two watches; nil until Start.
	provisioned, others *leaseWatch
	ctx                 context.Context
}

type leaseWatch struct {
	stop  context.CancelFunc
	store *leaseStore
}

// HasSynced reports whether the watch has listed its leases.
func (w *leaseWatch) HasSynced() bool { return w.store.synced.Load() }

// relistBackoff is how a lease watch retries after losing the API server. client-go's default doubles
// from 800 ms to a 30 s cap (with as much jitter again), so after an outage of a few seconds the fence
// went on judging from the leases as they were before it for up to a minute: measured on the real
// cluster, a kube-apiserver killed for 6 s left the new leader fenced for 13 s after it had taken over
// (0.2 s with this backoff). Nobody is admitted on a stale lease meanwhile (it has expired), but nobody
// is admitted at all. Retrying every second at most costs two failed requests per second while the
// server is away.
var relistBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 10, Cap: time.Second}

// The two watches' selectors. Leases in kube-node-lease are nodes' heartbeats, one per node renewed
// every 10 s: never guarded, and the bulk of a large cluster's lease traffic.
const (
	provisionedLeases   = contract.Managed + "=true"
	unprovisionedLeases = contract.Managed + "!=true"
	notHeartbeats       = "metadata.namespace!=" + corev1.NamespaceNodeLease
)

// NewLeaseCache returns an empty cache; Start begins watching.
func NewLeaseCache(client kubernetes.Interface, log logr.Logger) *LeaseCache {
	return &LeaseCache{client: client, log: log, leases: map[namespacedName]*coordinationv1.Lease{}, guarded: map[LeaseRef]bool{}}
}

// syncWait bounds how long a lookup waits for a watch that has not listed yet.
const syncWait = time.Second

// Get returns the cached lease. A miss right after a configuration change may only mean that the
// watch has not listed the new guard's lease yet; then Get waits for it, briefly, rather than report a
// lease as missing (which would deny its holder).
func (c *LeaseCache) Get(namespace, name string) (*coordinationv1.Lease, bool) {
	c.mu.RLock()
	l, ok := c.leases[namespacedName{namespace, name}]
	c.mu.RUnlock()
	if ok || c.waitSynced() {
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

// waitSynced reports true when both watches had already listed, and otherwise waits up to syncWait for
// them.
func (c *LeaseCache) waitSynced() bool {
	c.mu.RLock()
	var pending []cache.InformerSynced
	for _, w := range []*leaseWatch{c.provisioned, c.others} {
		if w != nil && !w.HasSynced() {
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

// Start begins both watches and runs until ctx ends.
func (c *LeaseCache) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.provisioned = c.startWatch("leasegate's leases", metav1.ListOptions{LabelSelector: provisionedLeases}, true)
	c.others = c.startWatch("other guarded leases", metav1.ListOptions{LabelSelector: unprovisionedLeases, FieldSelector: notHeartbeats}, false)
	c.mu.Unlock()
	<-ctx.Done()
	return nil
}

// Watch makes the cache keep exactly the leases refs name. A ref it did not have before restarts the
// others' watch, whose list finds that lease (the watch kept only the leases guarded until then):
// guards change seldom, and that list is of a few leases per controller in the cluster.
func (c *LeaseCache) Watch(refs []LeaseRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	guarded := make(map[LeaseRef]bool, len(refs))
	added := false
	for _, ref := range refs {
		guarded[ref] = true
		added = added || !c.guarded[ref]
	}
	c.guarded = guarded
	for key, l := range c.leases {
		if !isProvisioned(l) && !c.guardedLocked(key) {
			delete(c.leases, key)
		}
	}
	if added && c.others != nil {
		c.others.stop()
		c.others.store.retired = true
		c.others = c.startWatch("other guarded leases", metav1.ListOptions{LabelSelector: unprovisionedLeases, FieldSelector: notHeartbeats}, false)
	}
}

// guardedLocked reports whether a guard names the lease at key.
func (c *LeaseCache) guardedLocked(key namespacedName) bool {
	return c.guarded[LeaseRef{Namespace: key.namespace, Name: key.name}] || c.guarded[LeaseRef{Name: key.name}]
}

func isProvisioned(l *coordinationv1.Lease) bool {
	return l.Labels[contract.Managed] == "true"
}

// Synced reports whether both watches have listed their leases: until then a missing lease may only be
// not yet seen, so the webhook is not ready.
func (c *LeaseCache) Synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.provisioned != nil && c.provisioned.HasSynced() && c.others.HasSynced()
}

// startWatch runs a reflector of the Leases in every namespace that opts select, mirroring them into
// the cache: all of them for the provisioned leases' watch, the guarded ones for the others'.
func (c *LeaseCache) startWatch(what string, opts metav1.ListOptions, provisioned bool) *leaseWatch {
	leases := c.client.CoordinationV1().Leases(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector, o.LabelSelector = opts.FieldSelector, opts.LabelSelector
			return leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector, o.LabelSelector = opts.FieldSelector, opts.LabelSelector
			return leases.Watch(ctx, o)
		},
	}
	store := &leaseStore{cache: c, provisioned: provisioned}
	// A bare reflector, not an informer: an informer cannot be given a backoff.
	backoff := relistBackoff
	reflector := cache.NewReflectorWithOptions(lw, &coordinationv1.Lease{}, store, cache.ReflectorOptions{Name: what, Backoff: &backoff})
	ctx, stop := context.WithCancel(c.ctx)
	go reflector.RunWithContext(ctx)
	c.log.Info("Watching "+what, "labelSelector", opts.LabelSelector, "fieldSelector", opts.FieldSelector)
	return &leaseWatch{stop: stop, store: store}
}

// leaseStore is what a watch's reflector writes to: it mirrors the leases the cache keeps into the
// cache's map, where lookups find them without a key function or a copy, and holds nothing itself. Three
// rules keep the map right while two streams write to it:
//   - The two watches see disjoint leases, but a lease that gains or loses the label moves from one to the
//     other, and the two streams may tell it in either order: each store removes only a lease of its own
//     kind.
//   - For the same reason, a version older than the one in the map never replaces it, nor removes it.
//   - A restarted watch's old reflector may still deliver what it had in hand after its successor listed:
//     once retired, its store writes nothing.
type leaseStore struct {
	cache       *LeaseCache
	provisioned bool
	retired     bool // guarded by cache.mu
	synced      atomic.Bool
}

var _ cache.ReflectorStore = (*leaseStore)(nil)

func (s *leaseStore) Add(obj any) error    { s.set(obj); return nil }
func (s *leaseStore) Update(obj any) error { s.set(obj); return nil }
func (s *leaseStore) Resync() error        { return nil }

func (s *leaseStore) Delete(obj any) error {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil
	}
	key := namespacedName{l.Namespace, l.Name}
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if current, ok := s.cache.leases[key]; ok && !s.retired && isProvisioned(current) == s.provisioned && !older(l.ResourceVersion, current) {
		delete(s.cache.leases, key)
	}
	return nil
}

// Replace is a list: leases of this store's kind that it does not have, and that did not change after
// it, are gone (also those a previous watch of the same kind, restarted, had put in the map).
func (s *leaseStore) Replace(list []any, resourceVersion string) error {
	listed := make(map[namespacedName]bool, len(list))
	for _, obj := range list {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			listed[namespacedName{l.Namespace, l.Name}] = true
		}
		s.set(obj)
	}
	s.cache.mu.Lock()
	if !s.retired {
		for key, l := range s.cache.leases {
			if isProvisioned(l) == s.provisioned && !listed[key] && !older(resourceVersion, l) {
				delete(s.cache.leases, key)
			}
		}
	}
	s.cache.mu.Unlock()
	s.synced.Store(true)
	return nil
}

// set puts a lease into the map: any of leasegate's, and another only when a guard names it.
func (s *leaseStore) set(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	key := namespacedName{l.Namespace, l.Name}
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if s.retired || !(s.provisioned || s.cache.guardedLocked(key)) {
		return
	}
	if current, ok := s.cache.leases[key]; !ok || !older(l.ResourceVersion, current) {
		s.cache.leases[key] = l
	}
}

// older reports whether resourceVersion is older than current's. Versions that do not compare (not
// etcd's numbers) are not older: the newest delivery wins, as a single watch would have it.
func older(resourceVersion string, current *coordinationv1.Lease) bool {
	c, err := resourceversion.CompareResourceVersion(resourceVersion, current.ResourceVersion)
	return err == nil && c < 0
}

// NeedLeaderElection is false: every replica answers admission requests from its own cache.
func (c *LeaseCache) NeedLeaderElection() bool { return false }
