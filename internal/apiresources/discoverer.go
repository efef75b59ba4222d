package apiresources

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Discoverer keeps an Index of what the API server serves: read at start, whenever a
// CustomResourceDefinition changes, and whenever a caller asks (the rules syncer, before it applies).
type Discoverer struct {
	Client discovery.DiscoveryInterface

	current atomic.Pointer[Index]

	mu        sync.Mutex
	listeners []func()
}

// Current is the last snapshot; nil (which knows no resource) before the first Refresh.
func (d *Discoverer) Current() *Index { return d.current.Load() }

// OnChange calls fn after every Refresh that found the APIs changed.
func (d *Discoverer) OnChange(fn func()) {
	d.mu.Lock()
	d.listeners = append(d.listeners, fn)
	d.mu.Unlock()
}

// Refresh reads discovery. A group whose discovery failed (an aggregated API that is down) is left out
// and reported in the error; the rest is kept, so one broken APIService does not blind the fence.
func (d *Discoverer) Refresh(context.Context) (*Index, error) {
	_, lists, err := d.Client.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return d.Current(), fmt.Errorf("discovering the API server's resources: %w", err)
	}
	idx := NewIndex(lists)
	if prev := d.current.Swap(idx); !prev.Equal(idx) {
		d.mu.Lock()
		listeners := slices.Clone(d.listeners)
		d.mu.Unlock()
		for _, fn := range listeners {
			fn()
		}
	}
	if err != nil {
		return idx, fmt.Errorf("discovering the API server's resources (the rest is in use): %w", err)
	}
	return idx, nil
}

// SetupWithManager refreshes whenever a CustomResourceDefinition is created, changed (established, given a
// subresource) or deleted. Every event maps to one key, so a burst (all CRDs listed at start) costs one
// discovery. It runs on every replica, each of which checks configurations against its own snapshot, and
// watches metadata only.
func (d *Discoverer) SetupWithManager(mgr ctrl.Manager) error {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: "apis"}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("api-discovery").
		WatchesMetadata(crd, one).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
			_, err := d.Refresh(ctx)
			return reconcile.Result{}, err
		}))
}
