// Package e2e is leasegate's end-to-end suite: the built binaries against a real kube-apiserver and etcd,
// authenticating with real pod-bound service account tokens. The whole single-node cluster has its own
// suite, test/realcluster.
package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// leasegateNamespace is where the webhook runs and its ConfigMap lives.
const leasegateNamespace = "leasegate-system"

var (
	controlPlane *process.ControlPlane
	agentBinary  string
	webhook      *process.Webhook
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "leasegate e2e")
}

var _ = BeforeSuite(func() {
	var err error
	By("starting kube-apiserver and etcd")
	controlPlane, err = process.StartControlPlane()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(controlPlane.Stop)

	By("building leasegate-agent and leasegate-webhook")
	dir := GinkgoT().TempDir()
	agentBinary, err = checkout.BuildAgent(dir)
	Expect(err).NotTo(HaveOccurred())
	webhookBinary, err := checkout.BuildWebhook(dir)
	Expect(err).NotTo(HaveOccurred())

	By("starting leasegate-webhook and installing config/webhook, with a real TLS certificate")
	webhook, err = controlPlane.StartWebhook(context.Background(), webhookBinary, dir, leasegateNamespace)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		webhook.Stop()
		if CurrentSpecReport().Failed() {
			AddReportEntry("leasegate-webhook logs", webhook.Logs())
		}
	})
})

var namespaces atomic.Int32

// newNamespace gives a spec a namespace of its own, with the service account and lease RBAC, so specs
// never share a lease.
func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("e2e-%d-%d", GinkgoParallelProcess(), namespaces.Add(1))
	Expect(controlPlane.CreateNamespace(ctx, name)).To(Succeed())
	return name
}
