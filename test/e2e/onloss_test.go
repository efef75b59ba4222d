package e2e

import (
	"context"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leasegate/leasegate/test/framework/process"
)

// evict asks the Eviction API, as client, to evict pod.
func evict(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	return client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
}

// evictDryRun asks for an eviction that changes nothing: the dry run is asked for in the Eviction's own
// deleteOptions, as kubectl drain --dry-run=server does.
func evictDryRun(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	return client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
	})
}

// drainTool is a pod of a tool that drains nodes, running as its own service account in its own
// namespace, which a ClusterRole lets evict any pod; it authenticates with a token bound to that pod, as
// the tool would in its cluster.
func drainTool(ctx context.Context, namespace, name string) kubernetes.Interface {
	admin := controlPlane.Client
	if _, err := admin.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		Expect(controlPlane.CreateNamespace(ctx, namespace)).To(Succeed())
	}
	_, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-drain-" + namespace + "-" + name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-drain-" + namespace + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-drain-" + namespace + "-" + name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, "e2e-drain-"+namespace+"-"+name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(ctx, "e2e-drain-"+namespace+"-"+name, metav1.DeleteOptions{})
	})
	pod, err := admin.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		// A tool beside the workload (a CI runner) is not one of its replicas.
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Labels: map[string]string{"leasegate.io/inject": "disabled"}},
		Spec:       corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{{Name: name, Image: "example.invalid/" + name}}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	identity, err := controlPlane.PodIdentity(ctx, pod, GinkgoT().TempDir(), "")
	Expect(err).NotTo(HaveOccurred())
	Expect(process.WaitUntilAllowed(ctx, admin, "system:serviceaccount:"+namespace+":"+name, nil,
		authorizationv1.ResourceAttributes{Namespace: "any", Verb: "create", Resource: "pods", Subresource: "eviction"})).To(Succeed())
	client, _ := clientFor(identity.Kubeconfig)
	return client
}

var _ = Describe("on-loss: restart", Serial, func() {
	It("lets a pod evict itself, and only itself, once it lost its lease: a thawed leader's agent evicts its own pod", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		var pods []*corev1.Pod
		for range 2 {
			spec := deploymentPod(ns)
			spec.Annotations = map[string]string{"leasegate.io/on-loss": "restart", "leasegate.io/takeover": "4s"}
			pod, err := createPod(ctx, spec, false)
			Expect(err).NotTo(HaveOccurred())
			Expect(pod.Spec.InitContainers[0].StartupProbe).NotTo(BeNil(), "restart implies start: leader")
			pods = append(pods, pod)
		}
		agents := startInjectedAgents(ctx, pods)
		leader := soleLeader(agents)
		follower := others(agents, leader)[0]
		podOf := func(a *process.Agent) *corev1.Pod {
			for _, p := range pods {
				if p.Name == a.Pod.Name {
					return p
				}
			}
			return nil
		}

		By("provisioning the right to evict exactly these pods, by name")
		Eventually(func(g Gomega) {
			role, err := controlPlane.Client.RbacV1().Roles(ns).Get(ctx, "leasegate-orders", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(role.Rules).To(ContainElement(And(HaveField("Resources", ConsistOf("pods/eviction")),
				HaveField("ResourceNames", ConsistOf(pods[0].Name, pods[1].Name)), HaveField("Verbs", ConsistOf("create")))))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("refusing a replica's eviction of another, and the leader's of itself while it leads")
		followerClient, _ := clientFor(follower.Pod.Kubeconfig)
		err := evict(ctx, followerClient, podOf(leader))
		Expect(err).To(MatchError(ContainSubstring(`admission webhook "evictions.leasegate.io" denied the request`)))
		Expect(err).To(MatchError(ContainSubstring("a pod may evict only itself")))
		leaderClient, _ := clientFor(leader.Pod.Kubeconfig)
		Expect(evict(ctx, leaderClient, podOf(leader))).To(MatchError(ContainSubstring("the pod still holds its lease")))

		By("freezing the leader until the other pod leads; thawed, its agent evicts its own pod")
		Expect(leader.Signal(syscall.SIGSTOP)).To(Succeed())
		timeUntilOneLeads([]*process.Agent{follower}, time.Now(), 10*time.Second)
		Expect(leader.Signal(syscall.SIGCONT)).To(Succeed())
		thawed := time.Now()
		Eventually(func() bool {
			_, err := controlPlane.Client.CoreV1().Pods(ns).Get(ctx, leader.Pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).Should(BeTrue(), "the old leader's pod is evicted")
		GinkgoWriter.Printf("the thawed leader's pod was evicted %s after the thaw\n", time.Since(thawed))
		Expect(leader.Logs()).To(ContainSubstring("Lost the lease; evicting this pod"))
		_, err = controlPlane.Client.CoreV1().Pods(ns).Get(ctx, follower.Pod.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the new leader's pod stays")
		Expect(follower.IsLeader()).To(BeTrue())
	})

	It("admits node drains by the tools that evict from pods of their own, and still refuses a replica's eviction of its neighbour, a dry run leaving no Event", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		var pods []*corev1.Pod
		for range 3 {
			spec := deploymentPod(ns)
			spec.Annotations = map[string]string{"leasegate.io/on-loss": "restart"}
			pod, err := createPod(ctx, spec, false)
			Expect(err).NotTo(HaveOccurred())
			pods = append(pods, pod)
		}
		Eventually(func(g Gomega) {
			role, err := controlPlane.Client.RbacV1().Roles(ns).Get(ctx, "leasegate-orders", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(role.Rules).To(ContainElement(HaveField("ResourceNames", ConsistOf(pods[0].Name, pods[1].Name, pods[2].Name))))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		target := pods[0]

		By("evicting, dry, as cluster-autoscaler, Karpenter, the descheduler, kured and a CI runner in the pods' own namespace")
		tools := []struct{ namespace, name string }{
			{"kube-system", "cluster-autoscaler"}, {"karpenter", "karpenter"}, {"kube-system", "descheduler"},
			{"kube-system", "kured"}, {ns, "ci-runner"},
		}
		var last kubernetes.Interface
		for _, tool := range tools {
			last = drainTool(ctx, tool.namespace, tool.name)
			Expect(evictDryRun(ctx, last, target)).To(Succeed(), "%s/%s's eviction", tool.namespace, tool.name)
		}

		By("refusing a replica's eviction of its neighbour, dry or not; only the real one is recorded")
		dry, err := controlPlane.PodIdentity(ctx, pods[1], GinkgoT().TempDir(), "")
		Expect(err).NotTo(HaveOccurred())
		dryClient, _ := clientFor(dry.Kubeconfig)
		Expect(evictDryRun(ctx, dryClient, target)).To(MatchError(ContainSubstring("a pod may evict only itself")))
		replica, err := controlPlane.PodIdentity(ctx, pods[2], GinkgoT().TempDir(), "")
		Expect(err).NotTo(HaveOccurred())
		replicaClient, _ := clientFor(replica.Kubeconfig)
		Expect(evict(ctx, replicaClient, target)).To(MatchError(ContainSubstring("a pod may evict only itself")))
		deniedEventsBy := func(pod string) func() int {
			return func() int {
				events, err := controlPlane.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
				Expect(err).NotTo(HaveOccurred())
				n := 0
				for _, e := range events.Items {
					if e.Reason == "LeaderGateDenied" && e.Related != nil && e.Related.Name == pod {
						n++
					}
				}
				return n
			}
		}
		Eventually(deniedEventsBy(pods[2].Name)).WithTimeout(10 * time.Second).Should(Equal(1))
		Expect(deniedEventsBy(pods[1].Name)()).To(BeZero(), "the dry-run eviction left an Event")

		By("evicting for real, as the last drain tool")
		Expect(evict(ctx, last, target)).To(Succeed())
		Eventually(func() bool {
			_, err := controlPlane.Client.CoreV1().Pods(ns).Get(ctx, target.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(10 * time.Second).Should(BeTrue())
	})
})
