package leaderservice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

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

// SliceMetadata is the object of the cache that finds forged slices: every EndpointSlice of the cluster,
// metadata only, slimmed by SlimSlice. A label selector cannot pick the slices that name a "*-leader"
// Service, and a forged slice may carry any labels (managed-by the endpoint controller's name, which
// nothing then cleans up on a Service without a selector), so none can be left out.
func SliceMetadata() *metav1.PartialObjectMetadata {
	slice := &metav1.PartialObjectMetadata{}
	slice.SetGroupVersionKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"))
	return slice
}

// SlimSlice is the transform of that cache: what finding and removing a forged slice needs (its name,
// UID and version, its Service and manager), and nothing else.
func SlimSlice(in any) (any, error) {
	slice, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	labels := slice.Labels
	slice.ObjectMeta = metav1.ObjectMeta{
		Namespace: slice.Namespace, Name: slice.Name, UID: slice.UID, ResourceVersion: slice.ResourceVersion,
		Labels: map[string]string{discoveryv1.LabelServiceName: labels[discoveryv1.LabelServiceName]},
	}
	if managedBy, ok := labels[discoveryv1.LabelManagedBy]; ok {
		slice.Labels[discoveryv1.LabelManagedBy] = managedBy
	}
	return slice, nil
}

// Reconciler keeps each opted-in Service's companion and its EndpointSlice on the lease holder. It reads
// Services, Leases, injected pods and slices from the manager's caches and writes only what differs.
type Reconciler struct {
	Client client.Client
	// Slices is the cache of every EndpointSlice's metadata (SliceMetadata), where forged slices of a
	// companion are found.
	Slices   cache.Cache
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
	// A slice anyone else writes for a "<service>-leader" Service maps to <service>, which removes it if
	// that is a companion leasegate keeps. leasegate's own slices come through the typed watch above.
	forged := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
		service := o.Labels[discoveryv1.LabelServiceName]
		followed, ok := strings.CutSuffix(service, Suffix)
		if !ok || followed == "" || IsOwnSlice(service, o) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: followed}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("leader-service").
		Watches(&corev1.Service{}, toFollowed).
		Watches(&discoveryv1.EndpointSlice{}, toFollowed).
		WatchesRawSource(source.Kind(r.Slices, SliceMetadata(), forged)).
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

	if err := r.removeForged(ctx, companion.Namespace, companion.Name); err != nil {
		return reconcile.Result{}, err
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
		samePorts(current.Spec.Ports, want.Spec.Ports) && RoutesAsCompanion(current) {
		return current, nil
	}
	next := current.DeepCopy()
	next.Labels, next.OwnerReferences, next.Spec.Ports = want.Labels, want.OwnerReferences, want.Spec.Ports
	if !RoutesAsCompanion(current) {
		// A Service someone made with leasegate's labels before the opt-in must route only through
		// leasegate's slice: its spec is the companion's, keeping only the address it was given.
		next.Spec = corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, Ports: want.Spec.Ports, ClusterIP: current.Spec.ClusterIP, ClusterIPs: current.Spec.ClusterIPs,
			IPFamilies: current.Spec.IPFamilies, IPFamilyPolicy: current.Spec.IPFamilyPolicy,
		}
	}
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

// removeForged deletes every slice of the companion but leasegate's own, whoever wrote it and whenever:
// before the Service opted in, or past endpointslices.leasegate.io while it was down. Each is deleted
// as the cache saw it (UID and resourceVersion), so a slice rewritten since is judged again.
func (r *Reconciler) removeForged(ctx context.Context, namespace, companion string) error {
	slices := &metav1.PartialObjectMetadataList{}
	slices.SetGroupVersionKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"))
	if err := r.Slices.List(ctx, slices, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: companion}); err != nil {
		return err
	}
	for i := range slices.Items {
		slice := &slices.Items[i]
		if IsOwnSlice(companion, slice) {
			continue
		}
		err := r.Client.Delete(ctx, slice, client.Preconditions{UID: ptr.To(slice.UID), ResourceVersion: ptr.To(slice.ResourceVersion)})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing EndpointSlice %s/%s, which routes Service %s but is not leasegate's: %w", namespace, slice.Name, companion, err)
		}
		if err == nil {
			log.FromContext(ctx).Info("Removed an EndpointSlice of a leader Service that leasegate did not write",
				"endpointSlice", namespace+"/"+slice.Name, "service", companion, "managedBy", slice.Labels[discoveryv1.LabelManagedBy])
		}
	}
	return nil
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
