package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/framework/checkout"
)

var _ = Describe("kubectl leasegate handover", Ordered, func() {
	var plugin, kubeconfig string
	BeforeAll(func() {
		dir := GinkgoT().TempDir()
		kubeconfig = filepath.Join(dir, "admin.kubeconfig")
		Expect(controlPlane.AdminKubeconfig(kubeconfig)).To(Succeed())
		var err error
		plugin, err = checkout.BuildBinary(dir, "./cmd/kubectl-leasegate", "kubectl-leasegate")
		Expect(err).NotTo(HaveOccurred())
	})
	handover := func(args ...string) (string, int) {
		return runPlugin(plugin, kubeconfig, append([]string{"handover"}, args...)...)
	}

	It("moves the lease to the named Ready candidate with no two leaders at any sample, and a follower cannot ask", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		var pods []*corev1.Pod
		for range 3 {
			pod, err := createPod(ctx, deploymentPod(ns), false)
			Expect(err).NotTo(HaveOccurred())
			markReady(ctx, pod)
			pods = append(pods, pod)
		}
		agents := startInjectedAgents(ctx, pods)
		leader := soleLeader(agents)
		followers := others(agents, leader)
		target, bystander := followers[0], followers[1]
		claims, _ := sampleAgentClaims(agents)

		By("refusing a follower's request at the lease guard: replicas share the right to update the lease")
		bystanderClient, _ := clientFor(bystander.Pod.Kubeconfig)
		l, err := bystanderClient.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverFrom, leader.Pod.Identity())
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverTo, bystander.Pod.Name)
		_, err = bystanderClient.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		Expect(err).To(MatchError(ContainSubstring("a pod may not ask for a handover")))

		By("refusing a target that is not a candidate, or is the holder")
		out, code := handover("orders", "-n", ns, "--to", "orders-elsewhere")
		Expect(code).To(Equal(1), out)
		Expect(out).To(ContainSubstring("--to orders-elsewhere: that pod is not a candidate for lease " + ns + "/orders"))
		out, code = handover("orders", "-n", ns, "--to", leader.Pod.Name)
		Expect(code).To(Equal(1), out)
		Expect(out).To(ContainSubstring("that pod already holds lease"))

		By("handing over to the named pod, and waiting for it")
		out, code = handover("orders", "-n", ns, "--to", target.Pod.Name, "--wait")
		Expect(code).To(Equal(0), out)
		took := regexp.MustCompile(`lease \S+/orders: (\S+) leads now \(handover took (\S+)\)`).FindStringSubmatch(out)
		Expect(took).NotTo(BeNil(), out)
		Expect(took[1]).To(Equal(target.Pod.Name))
		GinkgoWriter.Printf("handover to a named pod took %s\n", took[2])
		Eventually(target.IsLeader).WithTimeout(5 * time.Second).Should(BeTrue())
		Expect(leader.IsLeader()).To(BeFalse())
		Expect(leader.Logs()).To(ContainSubstring("handing over to " + target.Pod.Name + " as asked"))
		l, err = controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal(target.Pod.Identity()))
		Expect(l.Annotations).NotTo(HaveKey(contract.HandoverFrom), "taking the lease clears the request")

		By("handing over to any other candidate")
		out, code = handover("orders", "-n", ns, "--wait")
		Expect(code).To(Equal(0), out)
		Expect(out).To(MatchRegexp(`leads now \(handover took \S+\)`))
		next := soleLeader(agents)
		Expect(next).NotTo(Equal(target))

		rounds, violations := claims.Stop()
		Expect(violations).To(BeEmpty(), "two agents claimed at once")
		GinkgoWriter.Printf("%d samples, no two leaders\n", rounds)
	})
})

// markReady sets pod's Ready condition, as a kubelet would: envtest runs none.
func markReady(ctx context.Context, pod *corev1.Pod) {
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	updated, err := controlPlane.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	Expect(err).NotTo(HaveOccurred())
	*pod = *updated
}
