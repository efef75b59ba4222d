package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// injectedCandidates creates n injected pods of Deployment "orders" in a new opted-in namespace and runs
// the agents of the first running of them; the others only have their pod-bound tokens, so each write
// they make is the spec's own.
func injectedCandidates(ctx context.Context, n, running int) (ns string, pods []*corev1.Pod, agents []*process.Agent, clients []kubernetes.Interface) {
	return injectedCandidatesAnnotated(ctx, n, running, nil)
}

// injectedCandidatesAnnotated is injectedCandidates for pods with the given annotations.
func injectedCandidatesAnnotated(ctx context.Context, n, running int, annotations map[string]string) (ns string, pods []*corev1.Pod, agents []*process.Agent, clients []kubernetes.Interface) {
	ns = labelledNamespace(ctx, optedIn)
	dir := GinkgoT().TempDir()
	for i := range n {
		spec := deploymentPod(ns)
		spec.Annotations = annotations
		pod, err := createPod(ctx, spec, false)
		Expect(err).NotTo(HaveOccurred())
		pods = append(pods, pod)
		identity, err := controlPlane.PodIdentity(ctx, pod, dir, "")
		Expect(err).NotTo(HaveOccurred())
		c, _ := clientFor(identity.Kubeconfig)
		clients = append(clients, c)
		if i < running {
			agent, err := process.StartInjectedAgent(agentBinary, pod, identity)
			Expect(err).NotTo(HaveOccurred())
			stopAtCleanup(agent)
			agents = append(agents, agent)
		}
	}
	Eventually(func() string { return ptr.Deref(ordersLease(ctx, ns).Spec.HolderIdentity, "") }).
		WithTimeout(15 * time.Second).ShouldNot(BeEmpty())
	Expect(ordersLease(ctx, ns).Labels).To(HaveKeyWithValue(contract.Managed, "true"), "provisioned by leasegate")
	return ns, pods, agents, clients
}

func ordersLease(ctx context.Context, ns string) *coordinationv1.Lease {
	l, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return l
}

// identityOf is the holder identity the agent of pod writes.
func identityOf(pod *corev1.Pod) string { return pod.Name + "_" + string(pod.UID) }

// take writes the lease as the pod of c would take it (counting its term), with change applied last.
func take(ctx context.Context, c kubernetes.Interface, ns string, pod *corev1.Pod, change func(*coordinationv1.Lease)) error {
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.NowMicro()
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To(identityOf(pod)), &now, &now
	l.Spec.LeaseDurationSeconds = ptr.To[int32](15)
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	change(l)
	_, err = c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// releaseByLeader stops the only agent with SIGTERM, which releases the lease, and waits for that.
func releaseByLeader(ctx context.Context, ns string, leader *process.Agent) {
	Expect(leader.Signal(syscall.SIGTERM)).To(Succeed())
	Expect(leader.WaitExit(ctx, 5*time.Second)).To(BeTrue())
	Expect(ptr.Deref(ordersLease(ctx, ns).Spec.HolderIdentity, "")).To(BeEmpty(), "released")
}

var _ = Describe("The lease guard", func() {
	It("refuses a follower's write that unmarks the lease, and provisioning marks it again when someone else unmarks it", func(ctx SpecContext) {
		ns, pods, agents, clients := injectedCandidates(ctx, 2, 1)
		follower, followerClient := pods[1], clients[1]

		By("refusing to unmark a held lease, and a released one, also as the follower takes it")
		unmark := func(l *coordinationv1.Lease) { delete(l.Labels, contract.Managed) }
		err := take(ctx, followerClient, ns, follower, unmark)
		Expect(err).To(MatchError(ContainSubstring("only leasegate marks a lease as its own")))
		releaseByLeader(ctx, ns, agents[0])
		l := ordersLease(ctx, ns)
		unmark(l)
		_, err = followerClient.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		Expect(err).To(MatchError(ContainSubstring("only leasegate marks a lease as its own")))
		Expect(take(ctx, followerClient, ns, follower, unmark)).To(MatchError(ContainSubstring("only leasegate marks a lease as its own")))
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Labels[contract.Managed] = "no" })).
			To(MatchError(ContainSubstring("only leasegate marks a lease as its own")))

		By("marking it again after a person unmarked it")
		_, err = controlPlane.Client.CoordinationV1().Leases(ns).Patch(ctx, "orders", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+contract.Managed+`":null}}}`), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() map[string]string { return ordersLease(ctx, ns).Labels }).WithTimeout(5 * time.Second).
			Should(HaveKeyWithValue(contract.Managed, "true"))
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](86400) })).
			To(MatchError(ContainSubstring("admission webhook \"leases.leasegate.io\" denied the request")), "guarded again")
	})

	It("lets a namespace admin ask for a handover, and nothing else on a lease leasegate manages", func(ctx SpecContext) {
		ns, pods, _, _ := injectedCandidates(ctx, 2, 1)
		follower := pods[1]
		// A namespace admin, with every right on the namespace's Leases too (the built-in admin role has none).
		const admin = "dana"
		_, err := controlPlane.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "leases"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		for name, role := range map[string]rbacv1.RoleRef{
			"admin":  {APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			"leases": {APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leases"},
		} {
			_, err := controlPlane.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: admin + "-" + name},
				RoleRef:    role,
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: admin}},
			}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(process.WaitUntilAllowed(ctx, controlPlane.Client, admin, []string{"system:authenticated"},
			authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "coordination.k8s.io", Resource: "leases"})).To(Succeed())
		config := rest.CopyConfig(controlPlane.Config)
		config.Impersonate = rest.ImpersonationConfig{UserName: admin}
		dana := kubernetes.NewForConfigOrDie(config).CoordinationV1().Leases(ns)

		By("refusing the namespace admin's writes that would forge a term or its token")
		forgeries := map[string]func(*coordinationv1.Lease){
			"names the follower holder": func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To(identityOf(follower)) },
			"releases the lease":        func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil },
			"resets the fencing token":  func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](0) },
			"renews it for a day":       func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](86400) },
			"unmarks it":                func(l *coordinationv1.Lease) { delete(l.Labels, contract.Managed) },
		}
		for what, forge := range forgeries {
			l := ordersLease(ctx, ns)
			forge(l)
			_, err := dana.Update(ctx, l, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring("a person may only ask for a handover")), "the namespace admin %s", what)
		}
		Expect(dana.Delete(ctx, "orders", metav1.DeleteOptions{})).To(MatchError(ContainSubstring("a person may only ask for a handover")))

		By("admitting the handover the namespace admin asks for, which the leader carries out")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, contract.HandoverFrom, identityOf(pods[0]), contract.HandoverTo, identityOf(follower))
		_, err = dana.Patch(ctx, "orders", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return ptr.Deref(ordersLease(ctx, ns).Spec.HolderIdentity, "") }).WithTimeout(10*time.Second).
			Should(BeEmpty(), "the leader released for the handover")
	})

	It("refuses a pod that pins the lease with a renewTime ahead or a duration its injection did not give it", func(ctx SpecContext) {
		ns, pods, agents, clients := injectedCandidates(ctx, 2, 1)
		follower, followerClient := pods[1], clients[1]
		releaseByLeader(ctx, ns, agents[0])

		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) {
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().AddDate(1, 0, 0)}
		})).To(MatchError(ContainSubstring("a pod may not date renewTime or acquireTime ahead of the webhook's clock")))
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) {
			l.Spec.AcquireTime = &metav1.MicroTime{Time: time.Now().AddDate(1, 0, 0)}
		})).To(MatchError(ContainSubstring("a pod may not date renewTime or acquireTime ahead of the webhook's clock")))
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](86400) })).
			To(MatchError(ContainSubstring("a pod may claim a lease only for the lease duration its injection gave it")))
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](14) })).
			To(MatchError(ContainSubstring("a pod may claim a lease only for the lease duration its injection gave it")))
		Expect(take(ctx, followerClient, ns, follower, func(*coordinationv1.Lease) {})).To(Succeed(), "the terms its injection gave it: 15 s, now")
	})

	It("judges a pod by the lease duration its spec gives it: a follower that rewrites its leasegate.io/status annotation gains nothing", func(ctx SpecContext) {
		// 60 s, longer than the configured election.leaseDuration (15 s).
		ns, pods, agents, clients := injectedCandidatesAnnotated(ctx, 2, 1, map[string]string{contract.LeaseDuration: "60s"})
		leader, follower, followerClient := pods[0], pods[1], clients[1]

		By("letting the follower's service account (its app's, too) patch pods, as some apps may")
		_, err := controlPlane.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-patcher"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = controlPlane.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-patcher"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-patcher"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "orders"}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("routing a leader Service to the leader, which later shows that leasegate's pod cache has caught up")
		leader.Status.PodIP, leader.Status.PodIPs = "10.244.0.10", []corev1.PodIP{{IP: "10.244.0.10"}}
		markReady(ctx, leader)
		_, err = controlPlane.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "orders", Labels: map[string]string{contract.LeaderLease: "orders"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": "orders"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		routed := func(g Gomega) []discoveryv1.Endpoint {
			slice, err := controlPlane.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "orders-leader", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			return slice.Endpoints
		}
		Eventually(routed).WithTimeout(10 * time.Second).Should(ConsistOf(HaveField("TargetRef.Name", leader.Name)))

		By("the follower rewriting its own status annotation to a 24 h lease duration")
		status := `{"lease":"orders","leaseSeconds":{"orders":86400}}`
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.Status: status}}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { // RBAC's grant reaches the API server's authorizer through its informer
			_, err := followerClient.CoreV1().Pods(ns).Patch(ctx, follower.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}).WithTimeout(5 * time.Second).Should(Succeed())
		// The pod cache sees one watch of pods in order: once it shows the leader's later change (out of
		// the Service's selector, so unrouted), it holds the follower's rewritten annotation too.
		_, err = controlPlane.Client.CoreV1().Pods(ns).Patch(ctx, leader.Name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"app.kubernetes.io/name":"orders-unrouted"}}}`), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(routed).WithTimeout(10 * time.Second).Should(BeEmpty())

		By("refusing the 24 h claim after the leader's graceful release, and admitting the 60 s its spec gives")
		releaseByLeader(ctx, ns, agents[0])
		Expect(ordersLease(ctx, ns).Spec.LeaseDurationSeconds).To(HaveValue(BeEquivalentTo(1)), "a graceful release leaves one second")
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](86400) })).
			To(MatchError(ContainSubstring("a pod may claim a lease only for the lease duration its injection gave it")))
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](60) })).
			To(Succeed(), "the 60 s its spec gives, longer than the configured default")
	})

	It("refuses a follower's take that reuses, lowers or runs up the term count, the lease's fencing token", func(ctx SpecContext) {
		ns, pods, agents, clients := injectedCandidates(ctx, 2, 1)
		follower, followerClient := pods[1], clients[1]
		releaseByLeader(ctx, ns, agents[0])
		last := ptr.Deref(ordersLease(ctx, ns).Spec.LeaseTransitions, 0)

		const refused = "spec.leaseTransitions is the fencing token of each term"
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(last) })).
			To(MatchError(ContainSubstring(refused)), "the last term's token, reused")
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](0) })).
			To(MatchError(ContainSubstring(refused)), "a lower token")
		Expect(take(ctx, followerClient, ns, follower, func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](math.MaxInt32) })).
			To(MatchError(ContainSubstring(refused)), "the count run up to the int32 limit")
		Expect(take(ctx, followerClient, ns, follower, func(*coordinationv1.Lease) {})).To(Succeed(), "the term counted: one more")
		Expect(ordersLease(ctx, ns).Spec.LeaseTransitions).To(HaveValue(Equal(last + 1)))

		By("the holder may not lower it either")
		l := ordersLease(ctx, ns)
		l.Spec.LeaseTransitions = ptr.To(last)
		_, err := followerClient.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		Expect(err).To(MatchError(ContainSubstring(refused)))
	})

	It("lets only the handover's target take the released lease while the released term runs", func(ctx SpecContext) {
		ns, pods, agents, clients := injectedCandidates(ctx, 3, 1)
		leader, target, bystander := pods[0], pods[1], pods[2]
		l := ordersLease(ctx, ns)
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverFrom, identityOf(leader))
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverTo, target.Name)
		_, err := controlPlane.Client.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return ptr.Deref(ordersLease(ctx, ns).Spec.HolderIdentity, "") }).
			WithTimeout(5*time.Second).Should(BeEmpty(), "the leader hands over")
		Expect(agents[0].IsLeader()).To(BeFalse())

		clearHandover := func(l *coordinationv1.Lease) {
			delete(l.Annotations, contract.HandoverFrom)
			delete(l.Annotations, contract.HandoverTo)
		}
		Expect(take(ctx, clients[2], ns, bystander, clearHandover)).To(MatchError(ContainSubstring(
			"until the released term ends only the pod it names may take it")))
		// Nor can it lift the bar in one write and take the lease in the next: a pod writes a released
		// lease only to take it.
		for name, lift := range map[string]func(*coordinationv1.Lease){
			"clears the request":           clearHandover,
			"dates the released term back": func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-time.Hour)} },
			"shortens the released term":   func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](1) },
		} {
			l := ordersLease(ctx, ns)
			lift(l)
			_, err := clients[2].CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring("a pod writes a released lease only to take it")), "a bystander that %s", name)
		}
		Expect(take(ctx, clients[0], ns, leader, clearHandover)).To(MatchError(ContainSubstring(
			"the pod that released it may not take it back")))
		Expect(take(ctx, clients[1], ns, target, clearHandover)).To(Succeed(), "the target")
	})

	It("guards a MultiClusterLease's spec like a Lease's, and leaves its status to leasegate's controller", func(ctx SpecContext) {
		_, err := envtest.InstallCRDs(controlPlane.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(checkout.RepoRoot(), "config", "crd")}})
		Expect(err).NotTo(HaveOccurred())
		ns := newNamespace(ctx)
		_, err = controlPlane.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "multiclusterleases"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{v1alpha1.Resource, v1alpha1.Resource + "/status"},
				Verbs: []string{"get", "update"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = controlPlane.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "multiclusterleases"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "multiclusterleases"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: process.ServiceAccountName}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		holder, err := controlPlane.CreatePod(ctx, ns, "orders-0", dir, "")
		Expect(err).NotTo(HaveOccurred())
		follower, err := controlPlane.CreatePod(ctx, ns, "orders-1", dir, "")
		Expect(err).NotTo(HaveOccurred())

		scheme := runtime.NewScheme()
		Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
		admin, err := client.New(controlPlane.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		now := metav1.NowMicro()
		mcl := &v1alpha1.MultiClusterLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders", Labels: map[string]string{contract.Managed: "true"}},
			Spec: v1alpha1.MultiClusterLeaseSpec{
				HolderIdentity: ptr.To(holder.Identity()), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &now, AcquireTime: &now,
			},
		}
		Expect(admin.Create(ctx, mcl)).To(Succeed())

		followerConfig, err := follower.RESTConfig()
		Expect(err).NotTo(HaveOccurred())
		followerClient, err := client.New(rest.CopyConfig(followerConfig), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		write := func(change func(*v1alpha1.MultiClusterLease)) error {
			m := &v1alpha1.MultiClusterLease{}
			if err := followerClient.Get(ctx, client.ObjectKeyFromObject(mcl), m); err != nil {
				return err
			}
			change(m)
			return followerClient.Update(ctx, m)
		}
		Eventually(func() error {
			return write(func(m *v1alpha1.MultiClusterLease) { m.Spec.HolderIdentity = ptr.To(follower.Identity()) })
		}).WithTimeout(5 * time.Second).Should(MatchError(ContainSubstring("the lease is held by another pod and has not expired")))
		Expect(write(func(m *v1alpha1.MultiClusterLease) { m.Spec.HolderIdentity = ptr.To(holder.Identity()) })).
			To(MatchError(ContainSubstring("a pod may write only its own identity as the holder")))
		Expect(write(func(m *v1alpha1.MultiClusterLease) { delete(m.Labels, contract.Managed) })).
			To(MatchError(ContainSubstring("only leasegate marks a lease as its own")))

		m := &v1alpha1.MultiClusterLease{}
		Expect(followerClient.Get(ctx, client.ObjectKeyFromObject(mcl), m)).To(Succeed())
		m.Status.GlobalHolder = follower.Identity()
		Expect(followerClient.Status().Update(ctx, m)).To(MatchError(ContainSubstring(
			"only leasegate's election controller writes a MultiClusterLease's status")))
	})
})

var _ = Describe("The injector and another controller's lease", Serial, func() {
	It("refuses a pod naming a lease leasegate does not manage, naming the lease and its holder, unless adoptLeases lists it", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		now := metav1.NowMicro()
		_, err := controlPlane.Client.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "cert-manager-controller"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To("cert-manager-7d9f_0c1e2f3a"), LeaseDurationSeconds: ptr.To[int32](60), RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		pod := deploymentPod(ns)
		pod.Annotations = map[string]string{contract.Lease: "cert-manager-controller"}
		Eventually(func() error { _, err := createPod(ctx, pod, false); return err }).WithTimeout(5 * time.Second).Should(MatchError(ContainSubstring(
			fmt.Sprintf(`Lease %s/cert-manager-controller is not leasegate's (held by cert-manager-7d9f_0c1e2f3a)`, ns))))
		Expect(canUpdateLease(ctx, ns, "orders", "cert-manager-controller")).To(BeFalse(), "no rights provisioned")

		setConfig(ctx, fmt.Sprintf("adoptLeases: [%s/cert-manager-controller]\n", ns))
		Eventually(func() error { _, err := createPod(ctx, pod, false); return err }).WithTimeout(5 * time.Second).Should(Succeed())
	})
})
