package inject

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

const (
	// fieldOwner is leasegate's server-side apply field manager.
	fieldOwner = "leasegate"
	// podLeaseIndex indexes cached injected pods by "<namespace>/<lock key>".
	podLeaseIndex = "leasegate.io/lease"
	// rbacPrefix names the Role and RoleBinding of the lock with key K "leasegate-K".
	rbacPrefix = "leasegate-"
	// multiClusterKeyPrefix starts the key of a MultiClusterLease: "multiclusterlease:<name>". No Lease
	// name has a colon, so a Lease and a MultiClusterLease of one name never share a key, a Role or a
	// RoleBinding, and RBAC names may have one ("system:controller:..." do).
	multiClusterKeyPrefix = "multiclusterlease:"
)

// lock is what one election of injected pods elects on: a Lease, or a MultiClusterLease. Its key names
// it in reconcile requests, in the pod index and, after rbacPrefix, in its Role and RoleBinding.
type lock struct {
	name         string
	multiCluster bool
}

func (l lock) key() string {
	if l.multiCluster {
		return multiClusterKeyPrefix + l.name
	}
	return l.name
}

func lockOf(key string) lock {
	name, multiCluster := strings.CutPrefix(key, multiClusterKeyPrefix)
	return lock{name: name, multiCluster: multiCluster}
}

// object is the lock's API object, labelled as leasegate's.
func (l lock) object(namespace string) client.Object {
	meta := metav1.ObjectMeta{Namespace: namespace, Name: l.name, Labels: map[string]string{contract.Managed: "true"}}
	if l.multiCluster {
		return &v1alpha1.MultiClusterLease{ObjectMeta: meta}
	}
	return &coordinationv1.Lease{ObjectMeta: meta}
}

// rule lets a candidate read, watch and renew this one lock: a MultiClusterLease's spec only, since its
// status is the election controller's (a /status subresource RBAC names apart).
func (l lock) rule() *rbacv1ac.PolicyRuleApplyConfiguration {
	group, resource := coordinationv1.GroupName, "leases"
	if l.multiCluster {
		group, resource = v1alpha1.GroupVersion.Group, v1alpha1.Resource
	}
	// The agent lists and watches with fieldSelector metadata.name=<lease>, which RBAC
	// matches against resourceNames, so even list and watch are limited to this one lock.
	return rbacv1ac.PolicyRule().WithAPIGroups(group).WithResources(resource).WithResourceNames(l.name).
		WithVerbs("get", "list", "watch", "update", "patch")
}

// Provisioner gives the pods of each lease exactly the rights their agents need, and takes them away
// when the last such pod is gone: the Lease (or MultiClusterLease) object, created once and never
// overwritten, a Role allowing get/list/watch/update/patch on that one name, and a RoleBinding for the
// service accounts of the pods that use it.
//
// It reconciles from an informer cache of injected pods rather than acting inside the admission request:
// admission stays free of side effects (so dry-run needs no special case), and a pod whose creation
// fails after admission never leaves rights behind.
type Provisioner struct {
	Client client.Client
	// APIReader reads a lock that lost its label, which the label-filtered cache no longer holds.
	APIReader client.Reader
	// MultiClusterLeases: the CRD is served, so deleted MultiClusterLeases are watched (and recreated).
	MultiClusterLeases bool
}

// SetupWithManager registers the provisioner; it runs on the elected leader only.
func (p *Provisioner) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podLeaseIndex, func(o client.Object) []string {
		var keys []string
		for _, l := range locksOf(o.(*corev1.Pod)) {
			keys = append(keys, o.GetNamespace()+"/"+l.key())
		}
		return keys
	}); err != nil {
		return err
	}
	// Requests are "<namespace>/<lock key>". Pods map by their status annotation (one request per lease
	// of a pod with several elections), provisioned objects by name.
	byPodLease := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		var requests []reconcile.Request
		for _, l := range locksOf(o.(*corev1.Pod)) {
			requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l.key()}})
		}
		return requests
	})
	byObjectName := func(prefix string) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := o.GetName()
			if prefix != "" {
				var ok bool
				if name, ok = strings.CutPrefix(name, prefix); !ok {
					return nil
				}
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})
	}
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[contract.Managed] == "true" })
	// A pod's lease and service account never change, and kubelet updates pod status often: only a
	// pod's arrival and departure matter. Agents renew leases every retry period: only a deleted
	// Lease matters. Roles and RoleBindings change only when someone edits them, which we undo.
	arrivalsAndDepartures := predicate.Funcs{
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	deletions := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("lease-provisioner").
		Watches(&corev1.Pod{}, byPodLease, builder.WithPredicates(arrivalsAndDepartures)).
		Watches(&rbacv1.Role{}, byObjectName(rbacPrefix), builder.WithPredicates(managed)).
		Watches(&rbacv1.RoleBinding{}, byObjectName(rbacPrefix), builder.WithPredicates(managed)).
		Watches(&coordinationv1.Lease{}, byObjectName(""), builder.WithPredicates(managed, deletions))
	if p.MultiClusterLeases {
		// The MultiClusterLease cache is not filtered by the label, so a lock losing it is an update.
		// (A Lease losing it leaves the filtered cache: a deletion.)
		unmarked := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetLabels()[contract.Managed] == "true" && e.ObjectNew.GetLabels()[contract.Managed] != "true"
		}, CreateFunc: func(event.CreateEvent) bool { return false }, DeleteFunc: func(event.DeleteEvent) bool { return false }, GenericFunc: func(event.GenericEvent) bool { return false }}
		b = b.Watches(&v1alpha1.MultiClusterLease{}, byObjectName(multiClusterKeyPrefix), builder.WithPredicates(predicate.Or(predicate.And(managed, deletions), unmarked)))
	}
	return b.Complete(p)
}

// Reconcile brings the lock, Role and RoleBinding of one lease in line with the pods that use it.
func (p *Provisioner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pods := &corev1.PodList{}
	if err := p.Client.List(ctx, pods, client.MatchingFields{podLeaseIndex: req.Namespace + "/" + req.Name}); err != nil {
		return reconcile.Result{}, err
	}
	// Terminating pods keep their rights: their agents release the lease on the way out.
	l := lockOf(req.Name)
	var accounts, evictable []string
	for i := range pods.Items {
		sa := pods.Items[i].Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		accounts = append(accounts, sa)
		if StatusOf(&pods.Items[i]).RestartOnLoss == l.name {
			evictable = append(evictable, pods.Items[i].Name)
		}
	}
	slices.Sort(evictable)
	slices.Sort(accounts)
	accounts = slices.Compact(accounts)

	var err error
	if len(accounts) == 0 {
		err = p.remove(ctx, req.Namespace, l)
		provisions.WithLabelValues(resultOf(err, "removed")).Inc()
	} else {
		err = p.provision(ctx, req.Namespace, l, accounts, evictable)
		provisions.WithLabelValues(resultOf(err, "provisioned")).Inc()
	}
	return reconcile.Result{}, err
}

func (p *Provisioner) provision(ctx context.Context, namespace string, l lock, accounts, evictable []string) error {
	managed := map[string]string{contract.Managed: "true"}
	if err := p.Client.Create(ctx, l.object(namespace)); apierrors.IsAlreadyExists(err) {
		if err := p.restoreMarker(ctx, namespace, l); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}

	name := rbacPrefix + l.key()
	role := rbacv1ac.Role(name, namespace).WithLabels(managed).WithRules(l.rule())
	if len(evictable) > 0 {
		// Pods with on-loss: restart evict themselves: create evictions of exactly these pods, by name.
		// The service account is shared by the replicas, so the webhook (evictions.leasegate.io) admits a
		// pod's eviction of itself only, and only once it has lost the lease.
		role.WithRules(rbacv1ac.PolicyRule().
			WithAPIGroups("").WithResources("pods/eviction").WithResourceNames(evictable...).WithVerbs("create"))
	}
	if err := p.Client.Apply(ctx, role, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return err
	}
	binding := rbacv1ac.RoleBinding(name, namespace).WithLabels(managed).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(name))
	for _, sa := range accounts {
		binding.WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithNamespace(namespace).WithName(sa))
	}
	return p.Client.Apply(ctx, binding, client.FieldOwner(fieldOwner), client.ForceOwnership)
}

// restoreMarker labels the lock as leasegate's again when it lost the label (the lease guard refuses that
// to service accounts, but it fails open, and people may edit the lock): without the label the lease
// guard no longer sees the lock's writes. A lock that holds another controller's election keeps its
// state: it is restored only while it is released or one of the pods that elect on it holds it.
func (p *Provisioner) restoreMarker(ctx context.Context, namespace string, l lock) error {
	obj := l.object(namespace)
	if err := p.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[contract.Managed] == "true" {
		return nil
	}
	var holder string
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		holder = ptr.Deref(o.Spec.HolderIdentity, "")
	case *v1alpha1.MultiClusterLease:
		holder = ptr.Deref(o.Spec.HolderIdentity, "")
	}
	if holder != "" {
		pods := &corev1.PodList{}
		if err := p.Client.List(ctx, pods, client.MatchingFields{podLeaseIndex: namespace + "/" + l.key()}); err != nil {
			return err
		}
		if !slices.ContainsFunc(pods.Items, func(pod corev1.Pod) bool { return lease.Identity(pod.Name, string(pod.UID)) == holder }) {
			return nil
		}
	}
	marked := []byte(`{"metadata":{"labels":{"` + contract.Managed + `":"true"}}}`)
	return p.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, marked))
}

// remove deletes what provision made, and only that: objects without the managed label are the user's.
func (p *Provisioner) remove(ctx context.Context, namespace string, l lock) error {
	name := rbacPrefix + l.key()
	for _, obj := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		l.object(namespace),
	} {
		if err := p.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		if obj.GetLabels()[contract.Managed] != "true" {
			continue
		}
		if err := p.Client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// locksOf are the locks an injected pod's status annotation records: its lease, or those of its
// elections, each a Lease or, with leaseKind MultiClusterLease, a MultiClusterLease.
func locksOf(pod *corev1.Pod) []lock {
	s := StatusOf(pod)
	names := s.LeaseNames()
	locks := make([]lock, len(names))
	for i, name := range names {
		locks[i] = lock{name: name, multiCluster: s.LeaseKind == config.LeaseKindMultiClusterLease}
	}
	return locks
}

// LeaseNames are the leases the pod elects on: its lease, or those of its elections.
func (s Status) LeaseNames() []string {
	if s.Lease != "" {
		return []string{s.Lease}
	}
	return s.Leases
}

// StatusOf reads an injected pod's status annotation; the zero Status for any other pod.
func StatusOf(pod *corev1.Pod) Status {
	var s Status
	_ = json.Unmarshal([]byte(pod.Annotations[contract.Status]), &s)
	return s
}

func resultOf(err error, success string) string {
	if err != nil {
		return "error"
	}
	return success
}
