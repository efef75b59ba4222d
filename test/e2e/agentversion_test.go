package e2e

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/leasegate/leasegate/internal/cli"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/version"
)

var _ = Describe("Agent versions", func() {
	It("records the release that injected each pod, and kubectl leasegate check reports agents older than the webhook (LG013)", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		pod, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred())
		var status inject.Status
		Expect(json.Unmarshal([]byte(pod.Annotations[contract.Status]), &status)).To(Succeed())
		Expect(status.Version).To(Equal(version.Version), "the injector records its own release in leasegate.io/status")

		By("the elected webhook replica writes its release on the validating configuration")
		Eventually(func(g Gomega) {
			validating, err := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(validating.Annotations).To(HaveKeyWithValue(contract.WebhookVersion, version.Version))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		options := cli.CheckOptions{LeasegateNamespace: leasegateNamespace, ConfigName: "leasegate-config", WebhookConfiguration: "leasegate", Now: time.Now()}
		olderAgents := func() []cli.Finding {
			report, err := cli.Check(ctx, controlPlane.Client, ns, options)
			Expect(err).NotTo(HaveOccurred())
			var found []cli.Finding
			for _, f := range report.Findings {
				if f.Code == cli.CodeAgentOlderThanWebhook {
					found = append(found, f)
				}
			}
			return found
		}
		Expect(olderAgents()).To(BeEmpty(), "a pod injected by this webhook's release is current")

		By("a pod injected by an earlier release (its status rewritten to say so), and one from before releases recorded it")
		status.Version = "v0.0.1"
		older, err := json.Marshal(status)
		Expect(err).NotTo(HaveOccurred())
		annotate := func(name string, status []byte) {
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.Status: string(status)}}})
			Expect(err).NotTo(HaveOccurred())
			_, err = controlPlane.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		annotate(pod.Name, older)
		Expect(olderAgents()).To(ConsistOf(And(
			HaveField("Severity", cli.SeverityWarning),
			HaveField("Object", "Deployment/"+ns+"/orders"),
			HaveField("Message", ContainSubstring("injected by leasegate v0.0.1 (oldest: "+pod.Name+"), older than the webhook's "+version.Version)),
			HaveField("Fix", "roll the workload so its pods are injected anew: kubectl rollout restart -n "+ns+" deployment/orders"),
		)))

		unrecorded, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred())
		status.Version = ""
		before, err := json.Marshal(status)
		Expect(err).NotTo(HaveOccurred())
		annotate(unrecorded.Name, before)
		Expect(olderAgents()).To(ConsistOf(HaveField("Message", And(
			HavePrefix("2 pod(s) run an agent injected by a leasegate release that did not record its version (oldest: "+unrecorded.Name+")"),
		))))
	})
})
