package e2e

import (
	"context"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leasegate/leasegate/test/framework/process"
)

// evict asks the Eviction API, as client, to evict pod.
func evict(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	return client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
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
})
