package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// breakGlassBlock is the shell block of docs/break-glass.md whose first line is the comment "# <name>:".
func breakGlassBlock(name string) string {
	page, err := os.ReadFile(filepath.Join(checkout.RepoRoot(), "docs", "break-glass.md"))
	Expect(err).NotTo(HaveOccurred())
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(page), -1) {
		if strings.HasPrefix(block[1], "# "+name+":") {
			return block[1]
		}
	}
	Fail("docs/break-glass.md has no sh block beginning with # " + name + ":")
	return ""
}

// runAsDocumented runs a block of shell commands from the docs with kubectl, as the cluster's admin.
func runAsDocumented(ctx context.Context, plane *process.ControlPlane, dir, script string) {
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		Fail("no kubectl beside kube-apiserver in KUBEBUILDER_ASSETS (make controlplane builds it): " + err.Error())
	}
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	Expect(plane.AdminKubeconfig(kubeconfig)).To(Succeed())
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s\n%s", script, out)
}

// failurePolicies are the failure policies of both configurations' entries, by name.
func failurePolicies(ctx context.Context, plane *process.ControlPlane) map[string]admissionregistrationv1.FailurePolicyType {
	policies := map[string]admissionregistrationv1.FailurePolicyType{}
	admission := plane.Client.AdmissionregistrationV1()
	validating, err := admission.ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, w := range validating.Webhooks {
		policies[w.Name] = *w.FailurePolicy
	}
	mutating, err := admission.MutatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, w := range mutating.Webhooks {
		policies[w.Name] = *w.FailurePolicy
	}
	return policies
}

var _ = Describe("Break glass", Ordered, func() {
	It("lets writes through with every leasegate-webhook replica stopped, by the commands docs/break-glass.md gives, and its return commands make the install enforce again", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		By("a control plane of its own, whose one webhook is then stopped")
		plane, err := process.StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(plane.Stop)
		binary, err := checkout.BuildWebhook(dir)
		Expect(err).NotTo(HaveOccurred())
		wh, err := plane.StartWebhook(ctx, binary, dir, leasegateNamespace)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { wh.Stop() })
		defaults := failurePolicies(ctx, plane)

		ns := "breakglass"
		Expect(plane.CreateNamespace(ctx, ns)).To(Succeed())
		_, err = plane.Client.CoreV1().ConfigMaps(leasegateNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: map[string]string{"config.yaml": guardConfig(ns, "deny", "deny")},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		pod, err := plane.CreatePod(ctx, ns, "worker-0", dir, "")
		Expect(err).NotTo(HaveOccurred())
		client, _ := clientFor(pod.Kubeconfig)
		Eventually(func() error { return writeConfigMap(ctx, client, ns, "state", pod.Name) }).WithTimeout(10*time.Second).
			Should(MatchError(ContainSubstring("leasegate: pod %s/%s", ns, pod.Name)), "fenced: nobody holds the lease")
		wh.Stop()
		Eventually(func() error { return writeConfigMap(ctx, client, ns, "state", pod.Name) }).WithTimeout(10*time.Second).
			Should(MatchError(ContainSubstring(`failed calling webhook "guarded.leasegate.io"`)), "refused: nothing answers")
		editConfig := func() error {
			cm, err := plane.Client.CoreV1().ConfigMaps(leasegateNamespace).Get(ctx, "leasegate-config", metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data["config.yaml"] = guardConfig(ns, "deny", "deny") + "# repaired at " + time.Now().Format(time.RFC3339Nano) + "\n"
			_, err = plane.Client.CoreV1().ConfigMaps(leasegateNamespace).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}
		Expect(editConfig()).To(MatchError(ContainSubstring(`failed calling webhook "config.leasegate.io"`)), "an edit of the guards is refused too")

		By("breaking the glass as docs/break-glass.md says")
		runAsDocumented(ctx, plane, dir, breakGlassBlock("break glass"))
		Expect(writeConfigMap(ctx, client, ns, "state", pod.Name)).To(Succeed(), "a guarded write, admitted unjudged")
		Expect(editConfig()).To(Succeed(), "leasegate-config can be repaired")
		for name, policy := range failurePolicies(ctx, plane) {
			Expect(policy).To(Equal(admissionregistrationv1.Ignore), name)
		}

		By("going back to normal as docs/break-glass.md says: the chart's failure policies, closed again while nothing answers")
		runAsDocumented(ctx, plane, dir, breakGlassBlock("back to normal"))
		Expect(failurePolicies(ctx, plane)).To(Equal(defaults), "the chart's failure policies")
		Eventually(func() error { return writeConfigMap(ctx, client, ns, "state", pod.Name) }).WithTimeout(10*time.Second).
			Should(MatchError(ContainSubstring(`failed calling webhook "guarded.leasegate.io"`)), "fails closed again")

		By("the webhook back: the follower's write fenced again, by leasegate")
		wh, err = plane.StartWebhook(ctx, binary, dir, leasegateNamespace)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { return writeConfigMap(ctx, client, ns, "state", pod.Name) }).WithTimeout(10 * time.Second).
			Should(MatchError(ContainSubstring("leasegate: pod %s/%s", ns, pod.Name)))
	})
})
