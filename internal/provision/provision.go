// Package provision gives the pods of each lease the injector names the Lease (or MultiClusterLease), Role
// and RoleBinding their agents need, and takes them away when the last such pod is gone. It is a
// controller over the cache of injected pods, apart from internal/inject: the injection decision answers
// one admission request with no side effect, and this acts on the cluster afterwards, so a pod whose
// creation fails after admission never leaves rights behind.
package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
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
	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

const (
	// fieldOwner is leasegate's field manager; Provisioned reads it.
	fieldOwner = "leasegate"
	// podLeaseIndex indexes cached injected pods by "<namespace>/<lock key>".
	podLeaseIndex = "leasegate.io/lease"
	// rbacPrefix names the Role and RoleBinding of the lock with key K "leasegate-K".
	rbacPrefix = "leasegate-"
	// multiClusterKeyPrefix starts the key of a MultiClusterLease: "multiclusterlease:<name>". No Lease
	// name has a colon, so a Lease and a MultiClusterLease of one name never share a key, a Role or a
	// RoleBinding, and RBAC names may have one ("system:controller:..." do).
	multiClusterKeyPrefix = "multiclusterlease:"
	// conflictRecheck is how often a lease whose Role or RoleBinding name someone else holds is looked at
	// again, so that rights follow within this long once they delete or rename it.
	conflictRecheck = 30 * time.Second
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
func (l lock) rule() rbacv1.PolicyRule {
	group, resource := coordinationv1.GroupName, "leases"
	if l.multiCluster {
		group, resource = v1alpha1.GroupVersion.Group, v1alpha1.Resource
	}
	// The agent lists and watches with fieldSelector metadata.name=<lease>, which RBAC
	// matches against resourceNames, so even list and watch are limited to this one lock.
	return rbacv1.PolicyRule{
		APIGroups: []string{group}, Resources: []string{resource}, ResourceNames: []string{l.name},
		Verbs: []string{"get", "list", "watch", "update", "patch"},
	}
}

// Reconciler gives the pods of each lease exactly the rights their agents need, and takes them away
// when the last such pod is gone: the Lease (or MultiClusterLease) object, created once and never
// overwritten, a Role allowing get/list/watch/update/patch on that one name, and a RoleBinding for the
// service accounts of the pods that use it.
//
// It reconciles from an informer cache of injected pods rather than acting inside the admission request:
// admission stays free of side effects (so dry-run needs no special case), and a pod whose creation
// fails after admission never leaves rights behind.
//
// It never changes or deletes a Role or RoleBinding it did not create (Provisioned): a user's object of
// the name it would use is left alone, nothing is bound to a Role that is not leasegate's, and the pods
// of the lease get a ProvisioningConflict Event naming the object and the fix.
type Reconciler struct {
	// Client reads from the manager's caches, which hold only objects labelled leasegate.io/managed.
	Client client.Client
	// APIReader reads from the API server: a lock that lost its label, which the label-filtered cache no
	// longer holds, or a Role or RoleBinding of a name leasegate provisions that turned out to exist
	// without being in the cache (unlabelled, or made a moment ago and not cached yet).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// MultiClusterLeases: the CRD is served, so deleted MultiClusterLeases are watched (and recreated).
	MultiClusterLeases bool
	// Config holds adoptLeases: the other controllers' locks a cluster admin hands over to leasegate.
	Config *config.Store
}

// EventReasonConflict is the reason of the Event on a pod whose lease's Role or RoleBinding name is
// taken by an object leasegate did not create.
const EventReasonConflict = "ProvisioningConflict"

// Provisioned reports whether leasegate created obj, a Role or RoleBinding of a name it provisions: obj
// carries the managed label, and leasegate's field manager owns that label (managedFields records which
// client's write set each field).
//
// Why this is enough: anyone who can write Roles can copy the label onto one, or name their client
// "leasegate", or send forged managedFields; but such a writer already decides what that Role grants and
// to whom, so leasegate acting on it gives them nothing they did not have. Whoever only creates pods, the
// requester who names a lease and so a Role, cannot write Roles, and so cannot put the marker on anyone
// else's. The label alone is not enough: it is copied with a leasegate Role's YAML (kubectl get -o yaml,
// GitOps exports), which records another field manager; the managed label a user adds the same way.
func Provisioned(obj metav1.Object) bool {
	if obj.GetLabels()[contract.Managed] != "true" {
		return false
	}
	for _, entry := range obj.GetManagedFields() {
		if entry.Manager == fieldOwner && entry.FieldsV1 != nil && ownsManagedLabel(entry.FieldsV1.GetRawBytes()) {
			return true
		}
	}
	return false
}

// ownsManagedLabel reports whether a managedFields entry's field set holds the managed label.
func ownsManagedLabel(fieldsV1 []byte) bool {
	var fields struct {
		Metadata struct {
			Labels map[string]json.RawMessage `json:"f:labels"`
		} `json:"f:metadata"`
	}
	if json.Unmarshal(fieldsV1, &fields) != nil {
		return false
	}
	_, ok := fields.Metadata.Labels["f:"+contract.Managed]
	return ok
}

// KeepOwnManagedFields is the transform of the Role and RoleBinding caches: of their managedFields it
// keeps leasegate's own entries, which Provisioned reads, and drops the rest.
func KeepOwnManagedFields(obj any) (any, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	var own []metav1.ManagedFieldsEntry
	for _, entry := range o.GetManagedFields() {
		if entry.Manager == fieldOwner {
			own = append(own, entry)
		}
	}
	o.SetManagedFields(own)
	return obj, nil
}

// podLeaseKeys indexes an injected pod by "<namespace>/<lock key>" of each lock it elects on.
func podLeaseKeys(o client.Object) []string {
	var keys []string
	for _, l := range locksOf(o.(*corev1.Pod)) {
		keys = append(keys, o.GetNamespace()+"/"+l.key())
	}
	return keys
}

// SetupWithManager registers the provisioner; it runs on the elected leader only.
func (p *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podLeaseIndex, podLeaseKeys); err != nil {
		return err
	}
	// Requests are "<namespace>/<lock key>". Pods map by the leases their agent elects on (one request per lease
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
		// A MultiClusterLease is named plainly; its lock's key is "multiclusterlease:<name>".
		byMultiClusterLease := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			key := lock{name: o.GetName(), multiCluster: true}.key()
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: key}}}
		})
		b = b.Watches(&v1alpha1.MultiClusterLease{}, byMultiClusterLease, builder.WithPredicates(predicate.Or(predicate.And(managed, deletions), unmarked)))
	}
	return b.Complete(p)
}

// Reconcile brings the lock, Role and RoleBinding of one lease in line with the pods that use it.
func (p *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
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
		if injected, _ := inject.GivenTo(&pods.Items[i]); injected.RestartOnLoss == l.name {
			evictable = append(evictable, pods.Items[i].Name)
		}
	}
	slices.Sort(evictable)
	slices.Sort(accounts)
	accounts = slices.Compact(accounts)

	if len(accounts) == 0 {
		err := p.remove(ctx, req.Namespace, l)
		provisions.WithLabelValues(resultOf(err, "removed")).Inc()
		return reconcile.Result{}, err
	}
	clash, recheck, err := p.provision(ctx, req.Namespace, l, accounts, evictable)
	switch {
	case err != nil:
		provisions.WithLabelValues("error").Inc()
	case clash != nil:
		provisions.WithLabelValues("conflict").Inc()
		for i := range pods.Items {
			p.Recorder.Eventf(&pods.Items[i], clash, corev1.EventTypeWarning, EventReasonConflict, "Provision", "%s", conflictNote(clash, l))
		}
		// The user's object is not in the label-filtered caches, so its removal (the fix the Event asks
		// for) triggers nothing: look again.
		return reconcile.Result{RequeueAfter: conflictRecheck}, nil
	default:
		provisions.WithLabelValues("provisioned").Inc()
	}
	return reconcile.Result{RequeueAfter: recheck}, err
}

// conflictNote tells a pod's owner which object took the name of the lease's Role or RoleBinding, or that
// the lease itself is another controller's, what that costs the pod, and the fixes.
func conflictNote(clash client.Object, l lock) string {
	kind := "RoleBinding"
	switch clash.(type) {
	case *rbacv1.Role:
		kind = "Role"
	case *coordinationv1.Lease, *v1alpha1.MultiClusterLease:
		kind = contract.LeaseKindLease
		if l.multiCluster {
			kind = contract.LeaseKindMultiClusterLease
		}
		return fmt.Sprintf("%s %s/%s exists and is not leasegate's (no %s label, no Role of leasegate's for it): another controller elects on it, "+
			"so leasegate neither marks it nor gives the pod's agent rights on it. Elect on a lease of the pod's own (%s or %s), or add %q to adoptLeases in leasegate-config",
			kind, clash.GetNamespace(), clash.GetName(), contract.Managed, contract.Lease, contract.Elections, clash.GetNamespace()+"/"+clash.GetName())
	}
	return fmt.Sprintf("%s %s/%s exists and leasegate did not create it, so leasegate neither changes nor binds it: "+
		"the pod's agent gets no rights on lease %s from leasegate. Delete or rename that %s, or elect on another lease (%s or %s)",
		kind, clash.GetNamespace(), clash.GetName(), l.name, kind, contract.Lease, contract.Elections)
}

// provision creates the lock, and the Role and RoleBinding of its pods or brings leasegate's own in
// line with them. clash is the Role or RoleBinding of that name that leasegate did not create, if any:
// then it writes neither (a binding to someone else's Role would grant what that Role grants).
// recheck, when not 0, is when to look at an unlabelled lock again (restoreMarker).
func (p *Reconciler) provision(ctx context.Context, namespace string, l lock, accounts, evictable []string) (clash client.Object, recheck time.Duration, err error) {
	name := rbacPrefix + l.key()
	if err := p.Client.Create(ctx, l.object(namespace)); apierrors.IsAlreadyExists(err) {
		var foreign client.Object
		if foreign, recheck, err = p.restoreMarker(ctx, namespace, l, time.Now()); err != nil || foreign != nil {
			// Another controller's lock: its pods get no rights on it, and no binding of leasegate's
			// stays to a Role of that name.
			if err == nil {
				err = p.removeOwn(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
			}
			return foreign, recheck, err
		}
	} else if err != nil {
		return nil, 0, err
	}

	managed := metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{contract.Managed: "true"}}
	role := &rbacv1.Role{ObjectMeta: *managed.DeepCopy(), Rules: []rbacv1.PolicyRule{l.rule()}}
	if len(evictable) > 0 {
		// Pods with on-loss: restart evict themselves: create evictions of exactly these pods, by name.
		// The service account is shared by the replicas, so the webhook (evictions.leasegate.io) admits a
		// pod's eviction of itself only, and only once it has lost the lease.
		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"pods/eviction"}, ResourceNames: evictable, Verbs: []string{"create"},
		})
	}
	current := &rbacv1.Role{}
	switch mine, err := p.own(ctx, current, role); {
	case err != nil:
		return nil, recheck, err
	case !mine:
		// leasegate's RoleBinding of this name (left from before the Role was replaced) would now bind
		// the pods to what someone else's Role grants: remove it.
		return current, recheck, p.removeOwn(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
	case current.UID != "" && !apiequality.Semantic.DeepEqual(current.Rules, role.Rules):
		current.Rules = role.Rules
		if err := p.update(ctx, current); err != nil {
			return nil, recheck, err
		}
	}

	binding := &rbacv1.RoleBinding{
		ObjectMeta: *managed.DeepCopy(),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}
	for _, sa := range accounts {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: sa})
	}
	currentBinding := &rbacv1.RoleBinding{}
	switch mine, err := p.own(ctx, currentBinding, binding); {
	case err != nil:
		return nil, recheck, err
	case !mine:
		return currentBinding, recheck, nil
	case currentBinding.UID != "" && !apiequality.Semantic.DeepEqual(currentBinding.Subjects, binding.Subjects):
		currentBinding.Subjects = binding.Subjects
		return nil, recheck, p.update(ctx, currentBinding)
	}
	return nil, recheck, nil
}

// restoreMarker labels the lock as leasegate's again when it lost the label (the lease guard refuses that
// to service accounts, but it fails open, and people may edit the lock): without the label the lease
// guard no longer sees the lock's writes.
//
// Only a lock that was leasegate's is restored: its Role, which leasegate created (Provisioned) and
// removes only with the lock's last pod, still stands; or adoptLeases hands it over. Any other unlabelled
// lock is another controller's, returned as foreign: a pod that reached no injector entry (labelled
// leasegate.io/inject=disabled in an opted-in namespace, with an agent container of its own) must not
// get it marked, and so its rights, where the injector would have refused it (checkLocks).
//
// A lock that holds an election keeps its state: it is restored only while it is released or expired,
// or one of the pods that elect on it holds it. Held by anyone else (say a pod that has just left), it is
// looked at again when that term ends: nothing else would, since the lock is in no label-filtered cache
// and the injector refuses new pods of an unlabelled lease.
func (p *Reconciler) restoreMarker(ctx context.Context, namespace string, l lock, now time.Time) (foreign client.Object, recheck time.Duration, err error) {
	obj := l.object(namespace)
	if err := p.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, 0, client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[contract.Managed] == "true" {
		return nil, 0, nil
	}
	if adopted := p.Config != nil && p.Config.Current().Adopts(namespace, l.name); !adopted {
		// leasegate's own Roles carry the managed label, so the label-filtered cache holds them: no API
		// call. One missing from it is not leasegate's, or made a moment ago: foreign for now, and the
		// pods' conflict is looked at again (conflictRecheck).
		role := &rbacv1.Role{}
		switch err := p.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: rbacPrefix + l.key()}, role); {
		case apierrors.IsNotFound(err):
			return obj, 0, nil
		case err != nil:
			return nil, 0, err
		case !Provisioned(role):
			return obj, 0, nil
		}
	}
	var spec coordinationv1.LeaseSpec
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		spec = o.Spec
	case *v1alpha1.MultiClusterLease:
		spec = coordinationv1.LeaseSpec{HolderIdentity: o.Spec.HolderIdentity, LeaseDurationSeconds: o.Spec.LeaseDurationSeconds, RenewTime: o.Spec.RenewTime}
	}
	if j := leaseapi.Judge(&spec, now, lease.DefaultClockSkewMargin); j.State == lease.Held {
		pods := &corev1.PodList{}
		if err := p.Client.List(ctx, pods, client.MatchingFields{podLeaseIndex: namespace + "/" + l.key()}); err != nil {
			return nil, 0, err
		}
		if !slices.ContainsFunc(pods.Items, func(pod corev1.Pod) bool { return lease.Identity(pod.Name, string(pod.UID)) == j.Holder }) {
			return nil, j.ExpiresAt.Sub(now) + time.Second, nil
		}
	}
	marked := []byte(`{"metadata":{"labels":{"` + contract.Managed + `":"true"}}}`)
	return nil, 0, p.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, marked))
}

// own creates want unless an object of its name exists. When one does, current is that object as
// stored and mine says whether leasegate created it (Provisioned); when want was created, current is
// left empty and mine is true.
func (p *Reconciler) own(ctx context.Context, current, want client.Object) (mine bool, err error) {
	key := client.ObjectKeyFromObject(want)
	switch err := p.Client.Get(ctx, key, current); {
	case err == nil:
		return Provisioned(current), nil
	case !apierrors.IsNotFound(err):
		return false, err
	}
	switch err := p.Client.Create(ctx, want, client.FieldOwner(fieldOwner)); {
	case err == nil:
		return true, nil
	case !apierrors.IsAlreadyExists(err):
		return false, err
	}
	// Not in the cache, yet there: unlabelled, so someone else's, or created a moment ago by leasegate
	// and not cached yet. Only the API server can tell.
	if err := p.APIReader.Get(ctx, key, current); err != nil {
		return false, err
	}
	return Provisioned(current), nil
}

// update writes obj, one of leasegate's own, as judged: the resourceVersion it was read at makes the
// write fail if anyone changed it since (say, took the label off), and it is then judged again.
func (p *Reconciler) update(ctx context.Context, obj client.Object) error {
	obj.SetManagedFields(nil) // the API server keeps the stored ones; the cache holds leasegate's only
	return p.Client.Update(ctx, obj, client.FieldOwner(fieldOwner))
}

// remove deletes what provision made, and only that: a Role or RoleBinding leasegate did not create
// (Provisioned), or a lock without the managed label, is the user's. Each is deleted as judged (UID and
// resourceVersion), so one changed since is judged again.
func (p *Reconciler) remove(ctx context.Context, namespace string, l lock) error {
	name := rbacPrefix + l.key()
	for _, obj := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		l.object(namespace),
	} {
		if err := p.removeOwn(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// removeOwn deletes obj (its namespace and name set) when it is leasegate's: a Role or RoleBinding it
// created (Provisioned), a lock with the managed label. It is deleted as judged (UID and, for RBAC,
// resourceVersion), so one changed since is judged again.
func (p *Reconciler) removeOwn(ctx context.Context, obj client.Object) error {
	if err := p.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	preconditions := client.Preconditions{UID: ptr.To(obj.GetUID())}
	switch obj.(type) {
	case *rbacv1.Role, *rbacv1.RoleBinding:
		if !Provisioned(obj) {
			return nil
		}
		preconditions.ResourceVersion = ptr.To(obj.GetResourceVersion())
	default:
		if obj.GetLabels()[contract.Managed] != "true" {
			return nil
		}
	}
	return client.IgnoreNotFound(p.Client.Delete(ctx, obj, preconditions))
}

// locksOf are the locks an injected pod's agent elects on (GivenTo, from its spec): its lease, or those
// of its elections, each a Lease or, with LEASEGATE_LEASE_KIND MultiClusterLease, a MultiClusterLease.
// A pod whose agent container is not one injection made elects on none, and gets no rights.
func locksOf(pod *corev1.Pod) []lock {
	s, _ := inject.GivenTo(pod)
	names := s.LeaseNames()
	locks := make([]lock, len(names))
	for i, name := range names {
		locks[i] = lock{name: name, multiCluster: s.LeaseKind == contract.LeaseKindMultiClusterLease}
	}
	return locks
}

func resultOf(err error, success string) string {
	if err != nil {
		return "error"
	}
	return success
}
