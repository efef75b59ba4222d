package realcluster

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/leasegate/leasegate/internal/cli"
	"github.com/leasegate/leasegate/internal/lease"
)

// injectionSpecs installs the agent and asks kubectl leasegate about it.
func injectionSpecs() {
	It("injects the agent into every replica as a native sidecar, and exactly one leads, as <pod>_<uid>", func() {
		pods := ensureOrders(ctx, node)
		identities := map[string]bool{}
		for _, p := range pods {
			Expect(p.Spec.InitContainers).NotTo(BeEmpty())
			sidecar := p.Spec.InitContainers[0]
			Expect(sidecar.Name).To(Equal(agentContainer))
			Expect(sidecar.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)), "a native sidecar")
			identities[lease.Identity(p.Name, string(p.UID))] = true
		}
		Eventually(func() string { return holder(ctx, node, "orders") }).WithTimeout(30 * time.Second).Should(BeKeyOf(identities))

		By("kubectl leasegate status: every agent answers through the API server's pod proxy and agrees with the Lease")
		Eventually(func(g Gomega) {
			list, err := cli.GatherStatus(ctx, node.Client, cli.StatusOptions{
				Namespace: app, Lease: "orders", LeasegateNamespace: leasegateNamespace, ConfigName: "leasegate-config",
				Ask: cli.AgentViaProxy(node.Client), Now: time.Now(),
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(HaveLen(1))
			s := list.Items[0]
			g.Expect(s.Holder).To(BeKeyOf(identities))
			g.Expect(s.Candidates).To(HaveLen(3))
			for _, c := range s.Candidates {
				g.Expect(c.AgentError).To(BeEmpty(), "the agent of %s", c.Pod)
				g.Expect(c.Ready).To(BeTrue())
			}
			g.Expect(s.Verdict).To(Equal(cli.VerdictAgrees))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		By("kubectl leasegate check: the install as helm made it has no error")
		report, err := cli.Check(ctx, node.Client, app, cli.CheckOptions{
			LeasegateNamespace: leasegateNamespace, ConfigName: "leasegate-config", WebhookConfiguration: "leasegate", Now: time.Now(),
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(report.Errors).To(BeZero(), "%+v", report.Findings)
	})
}
