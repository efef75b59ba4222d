package lease

import (
	"context"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// The status of a MultiClusterLease rides on the Lease a MultiClusterStore hands the Elector as these
// annotations: in memory only, never written.
const (
	globalHolderAnnotation       = "leasegate.io/global-holder"
	observedGenerationAnnotation = "leasegate.io/observed-generation"
)

// MultiClusterStore is a Store over MultiClusterLeases: the Elector runs the local election on the spec
// exactly as on a Lease, and reads the election controller's answers (status) to know whether it leads
// globally (Config.MultiCluster).
type MultiClusterStore struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

var _ Store = (*MultiClusterStore)(nil)

// NewMultiClusterStore builds a MultiClusterLease client from config, with a scheme that knows only that
// API, as NewClient does for Leases.
func NewMultiClusterStore(config *rest.Config) (*MultiClusterStore, error) {
	client, params, err := restClientFor(config, v1alpha1.GroupVersion, v1alpha1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &MultiClusterStore{rest: client, params: params}, nil
}

// Get implements Store.
func (s *MultiClusterStore) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	m := &v1alpha1.MultiClusterLease{}
	err := s.rest.Get().Namespace(namespace).Resource(v1alpha1.Resource).Name(name).Do(ctx).Into(m)
	return asLease(m), err
}

// Create implements Store.
func (s *MultiClusterStore) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	m := &v1alpha1.MultiClusterLease{}
	err := s.rest.Post().Namespace(lease.Namespace).Resource(v1alpha1.Resource).Body(asMultiClusterLease(lease)).Do(ctx).Into(m)
	return asLease(m), err
}

// Update implements Store: the spec, with a compare-and-swap on resourceVersion.
func (s *MultiClusterStore) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	m := &v1alpha1.MultiClusterLease{}
	err := s.rest.Put().Namespace(lease.Namespace).Resource(v1alpha1.Resource).Name(lease.Name).Body(asMultiClusterLease(lease)).Do(ctx).Into(m)
	return asLease(m), err
}

// List implements Store.
func (s *MultiClusterStore) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	list := &v1alpha1.MultiClusterLeaseList{}
	if err := s.rest.Get().Namespace(namespace).Resource(v1alpha1.Resource).VersionedParams(&opts, s.params).Do(ctx).Into(list); err != nil {
		return nil, err
	}
	leases := &coordinationv1.LeaseList{ListMeta: list.ListMeta, Items: make([]coordinationv1.Lease, len(list.Items))}
	for i := range list.Items {
		leases.Items[i] = *asLease(&list.Items[i])
	}
	return leases, nil
}

// Watch implements Store.
func (s *MultiClusterStore) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	w, err := s.rest.Get().Namespace(namespace).Resource(v1alpha1.Resource).VersionedParams(&opts, s.params).Watch(ctx)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if m, ok := ev.Object.(*v1alpha1.MultiClusterLease); ok {
			ev.Object = asLease(m)
		}
		return ev, true
	}), nil
}

// asLease is the MultiClusterLease as the Elector sees it: its spec as a Lease's, its status in
// annotations.
func asLease(m *v1alpha1.MultiClusterLease) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: *m.ObjectMeta.DeepCopy(), Spec: coordinationv1.LeaseSpec{
		HolderIdentity: m.Spec.HolderIdentity, LeaseDurationSeconds: m.Spec.LeaseDurationSeconds,
		AcquireTime: m.Spec.AcquireTime, RenewTime: m.Spec.RenewTime, LeaseTransitions: m.Spec.LeaseTransitions,
	}}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[globalHolderAnnotation] = m.Status.GlobalHolder
	l.Annotations[observedGenerationAnnotation] = strconv.FormatInt(m.Status.ObservedGeneration, 10)
	return l
}

// asMultiClusterLease is what the Elector writes: the spec, without the status it was shown.
func asMultiClusterLease(l *coordinationv1.Lease) *v1alpha1.MultiClusterLease {
	m := &v1alpha1.MultiClusterLease{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: *l.ObjectMeta.DeepCopy(),
		Spec: v1alpha1.MultiClusterLeaseSpec{
			HolderIdentity: l.Spec.HolderIdentity, LeaseDurationSeconds: l.Spec.LeaseDurationSeconds,
			AcquireTime: l.Spec.AcquireTime, RenewTime: l.Spec.RenewTime, LeaseTransitions: l.Spec.LeaseTransitions,
		},
	}
	delete(m.Annotations, globalHolderAnnotation)
	delete(m.Annotations, observedGenerationAnnotation)
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	return m
}

// globalAnswer is the election controller's latest answer as a MultiClusterStore carries it.
func globalAnswer(l *coordinationv1.Lease) (holder string, observedGeneration int64, ok bool) {
	holder, ok = l.Annotations[globalHolderAnnotation]
	if !ok {
		return "", 0, false
	}
	observedGeneration, _ = strconv.ParseInt(l.Annotations[observedGenerationAnnotation], 10, 64)
	return holder, observedGeneration, true
}

// heartbeat is one of this elector's writes: its generation, and when the write started.
type heartbeat struct {
	generation int64
	started    time.Time
}

// confirmedUntil is until when the controller's answer on l lets identity act: the latest of our writes
// that the answer covers, plus ConfirmedFor (the backend renewal that confirmed it was sent after that
// write). Zero when the answer names someone else or covers none of our writes.
func confirmedUntil(l *coordinationv1.Lease, identity string, writes []heartbeat) time.Time {
	holder, observed, ok := globalAnswer(l)
	if !ok || holder != identity || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}
	}
	var latest time.Time
	for _, w := range writes {
		if w.generation <= observed && w.started.After(latest) {
			latest = w.started
		}
	}
	if latest.IsZero() {
		return time.Time{}
	}
	return latest.Add(v1alpha1.ConfirmedFor(*l.Spec.LeaseDurationSeconds))
}
