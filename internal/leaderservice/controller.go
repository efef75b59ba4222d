package leaderservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
)

// fieldOwner is the field manager of leasegate's writes.
const fieldOwner = "leasegate"

// OptedIn selects the Services the manager caches: those opted in, and their companions (which carry the
// same label, so that one cache holds both).
func OptedIn() k8slabels.Selector {
	r, _ := k8slabels.NewRequirement(contract.LeaderLease, selection.Exists, nil)
	return k8slabels.NewSelector().Add(*r)
}

// Slices selects the EndpointSlices the manager caches: leasegate's own.
func Slices() k8slabels.Selector {
	return k8slabels.SelectorFromSet(k8slabels.Set{discoveryv1.LabelManagedBy: ManagedBy})
}

// Reconciler keeps each opted-in Service's companion and its EndpointSlice on the lease holder. It reads
// Services, Leases, injected pods and slices from the manager's caches and writes only what differs.
type Reconciler struct {
	Client   client.Client
	Config   *config.Store
	Recorder events.EventRecorder
}

// SetupWithManager registers the controller; it runs on the elected leader only. Requests name the
// opted-in Service.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// A Service maps to itself, a companion or slice to the Service it follows.
	toFollowed := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[contract.LeaderOf]
		if name == "" {
			name = o.GetName()
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	// A Lease, or an injected pod (its address, readiness, deletion), maps to the opted-in Services of its
	// namespace that follow it; a namespace has few.
	toFollowers := func(byLease bool) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			services := &corev1.ServiceList{}
			match := client.MatchingLabelsSelector{Selector: OptedIn()}
			if byLease {
				match = client.MatchingLabelsSelector{Selector: k8slabels.SelectorFromSet(k8slabels.Set{contract.LeaderLease: o.GetName()})}
			}
			if err := r.Client.List(ctx, services, client.InNamespace(o.GetNamespace()), match); err != nil {
				log.FromContext(ctx).Error(err, "Listing leader Services")
				return nil
			}
			var requests []reconcile.Request
			for i := range services.Items {
				if !IsCompanion(&services.Items[i]) {
					requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&services.Items[i])})
				}
			}
			return requests
		})
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("leader-service").
		Watches(&corev1.Service{}, toFollowed).
		Watches(&discoveryv1.EndpointSlice{}, toFollowed).
		Watches(&coordinationv1.Lease{}, toFollowers(true)).
		Watches(&corev1.Pod{}, toFollowers(false)).
		Complete(r)
}

// Reconcile brings one opted-in Service's companion and slice in line with its lease's holder.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	svc := &corev1.Service{}
	switch err := r.Client.Get(ctx, req.NamespacedName, svc); {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, r.removeCompanion(ctx, req.NamespacedName)
	case err != nil:
		return reconcile.Result{}, err
	case IsCompanion(svc):
		return reconcile.Result{}, nil
	}
	companion, err := Companion(svc)
	if err != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, "LeaderServiceInvalid", "Reconcile", "%v", err)
		return reconcile.Result{}, r.removeCompanion(ctx, req.NamespacedName)
	}
	switch stored, err := r.applyCompanion(ctx, companion); {
	case errors.Is(err, errNotOurs):
		// Nothing to retry until someone renames one of the two Services.
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, "LeaderServiceInvalid", "Reconcile",
			"Service %s/%s: %v", companion.Namespace, companion.Name, err)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("writing Service %s/%s: %w", companion.Namespace, companion.Name, err)
	default:
		companion = stored
	}

	now := time.Now()
	var l *coordinationv1.Lease
	if found := (&coordinationv1.Lease{}); r.Client.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: svc.Labels[contract.LeaderLease]}, found) == nil {
		l = found
	}
	holder, recheck, why := Holder(l, func(name string) *corev1.Pod {
		pod := &corev1.Pod{}
		if r.Client.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: name}, pod) != nil {
			return nil
		}
		return pod
	}, svc, now, r.Config.Current().Election.ClockSkewMargin.Duration)
	if err := r.applySlice(ctx, Slice(svc, companion, holder)); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing EndpointSlice %s/%s: %w", companion.Namespace, companion.Name, err)
	}
	if holder == nil {
		log.FromContext(ctx).V(1).Info("No leader endpoint", "service", req.String(), "why", why)
	}
	if recheck.IsZero() {
		return reconcile.Result{}, nil
	}
	// The endpoint goes the instant the lease expires unrenewed, as the fence stops admitting its holder.
	return reconcile.Result{RequeueAfter: max(recheck.Sub(now), time.Millisecond)}, nil
}

// errNotOurs is a Service of the companion's name that leasegate did not make.
var errNotOurs = errors.New("a Service of that name exists and is not leasegate's: rename it or the opted-in Service")

// applyCompanion creates the companion or updates what differs, and returns it as stored (its UID owns
// the slice).
func (r *Reconciler) applyCompanion(ctx context.Context, want *corev1.Service) (*corev1.Service, error) {
	current := &corev1.Service{}
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), current); {
	case apierrors.IsNotFound(err):
		return want, r.Client.Create(ctx, want, client.FieldOwner(fieldOwner))
	case err != nil:
		return nil, err
	case !IsCompanion(current) || current.Labels[contract.LeaderOf] != want.Labels[contract.LeaderOf]:
		return nil, errNotOurs
	}
	if apiequality.Semantic.DeepEqual(current.Labels, want.Labels) && apiequality.Semantic.DeepEqual(current.OwnerReferences, want.OwnerReferences) &&
		samePorts(current.Spec.Ports, want.Spec.Ports) {
		return current, nil
	}
	next := current.DeepCopy()
	next.Labels, next.OwnerReferences, next.Spec.Ports = want.Labels, want.OwnerReferences, want.Spec.Ports
	return next, r.Client.Update(ctx, next, client.FieldOwner(fieldOwner))
}

// samePorts compares the fields of the ports a companion copies (the API server fills in the rest).
func samePorts(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Protocol != b[i].Protocol || a[i].Port != b[i].Port || a[i].TargetPort != b[i].TargetPort ||
			!apiequality.Semantic.DeepEqual(a[i].AppProtocol, b[i].AppProtocol) {
			return false
		}
	}
	return true
}

// applySlice creates the slice or updates its endpoints and ports when they differ. An address type never
// changes in place (the API forbids it): such a slice is replaced.
func (r *Reconciler) applySlice(ctx context.Context, want *discoveryv1.EndpointSlice) error {
	current := &discoveryv1.EndpointSlice{}
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), current); {
	case apierrors.IsNotFound(err):
		return r.Client.Create(ctx, want, client.FieldOwner(fieldOwner))
	case err != nil:
		return err
	case current.AddressType != want.AddressType:
		if err := r.Client.Delete(ctx, current); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return r.Client.Create(ctx, want, client.FieldOwner(fieldOwner))
	}
	if apiequality.Semantic.DeepEqual(current.Endpoints, want.Endpoints) && apiequality.Semantic.DeepEqual(current.Ports, want.Ports) &&
		apiequality.Semantic.DeepEqual(current.Labels, want.Labels) && apiequality.Semantic.DeepEqual(current.OwnerReferences, want.OwnerReferences) {
		return nil
	}
	next := current.DeepCopy()
	next.Labels, next.OwnerReferences, next.Endpoints, next.Ports = want.Labels, want.OwnerReferences, want.Endpoints, want.Ports
	return r.Client.Update(ctx, next, client.FieldOwner(fieldOwner))
}

// removeCompanion deletes the companion of a Service that is gone or no longer opted in (garbage
// collection would get there for a deleted Service too, but not for a removed label), and its slice.
func (r *Reconciler) removeCompanion(ctx context.Context, followed types.NamespacedName) error {
	companion := &corev1.Service{}
	key := types.NamespacedName{Namespace: followed.Namespace, Name: CompanionName(followed.Name)}
	if err := r.Client.Get(ctx, key, companion); err != nil {
		return client.IgnoreNotFound(err)
	}
	if companion.Labels[contract.LeaderOf] != followed.Name {
		return nil
	}
	if err := r.Client.Delete(ctx, companion); client.IgnoreNotFound(err) != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{}
	if err := r.Client.Get(ctx, key, slice); err != nil {
		return client.IgnoreNotFound(err)
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, slice))
}
