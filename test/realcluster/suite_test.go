// Package realcluster is leasegate's real-cluster suite: a whole single-node cluster started on this
// machine (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet and
// kube-proxy), cert-manager in it, leasegate installed with Helm as docs/install.md says, and workloads whose
// replicas elect, fail over, write through the fence and route traffic, with the figures `make bench`
// reports. It needs root and Linux, and runs with -cluster (`make e2e-cluster`); without it, it skips.
package realcluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/cluster"
	"github.com/leasegate/leasegate/test/framework/report"
)

var (
	realCluster   = flag.Bool("cluster", false, "run the real single-node cluster specs (root, Linux; `make e2e-cluster`)")
	clusterRuns   = flag.Int("cluster.runs", 5, "failovers per measured figure (`make bench`: 20)")
	clusterReport = flag.String("cluster.report", "", "also write the figures as a Markdown table to this file")
)

// The workloads' election timing: short, so that failovers are quick to measure; the failover math is
// the same at any scale (docs/timing.md).
var fastElection = map[string]string{
	"leasegate.io/lease-duration": "3s",
	"leasegate.io/renew-deadline": "2s",
	"leasegate.io/retry-period":   "500ms",
}

const (
	agentContainer     = "leasegate-agent"
	agentPort          = 9440
	app                = "shop"             // the labelled namespace the workloads run in
	leasegateNamespace = "leasegate-system" // where helm installs leasegate
)

// What every spec shares: the node, started once, with leasegate installed on it.
var (
	ctx     = context.Background()
	node    *cluster.Node
	tools   *checkout.Tools
	dir     string
	figures = &report.FigureTable{}
)

func TestRealCluster(t *testing.T) {
	if !*realCluster {
		t.Skip("needs -cluster: root, and the Debian packages and cluster binaries `make e2e-cluster` installs and builds")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "leasegate on a real single-node cluster")
}

// One node serves every spec: starting it and installing leasegate takes about a minute. Each spec sets up
// the workloads and guards it relies on (ensureOrders, guardOrders), so any one can run alone with
// -ginkgo.focus; the container is Ordered for the figures, which are taken on the load the specs before
// left, and for the crash specs, which must come last.
var _ = Describe("leasegate on a real single-node cluster", Ordered, func() {
	BeforeAll(startNodeWithLeasegate)
	AfterEach(func() {
		if CurrentSpecReport().Failed() && node != nil {
			AddReportEntry("node logs", node.Logs())
		}
	})
	AfterAll(func() {
		if figures.Empty() {
			return
		}
		table := figures.Markdown(fmt.Sprintf("Real single-node cluster, %d runs per failover figure", *clusterRuns))
		AddReportEntry("real-cluster figures", table)
		if *clusterReport != "" {
			Expect(os.WriteFile(*clusterReport, []byte(table), 0o644)).To(Succeed())
		}
	})

	Describe("injection", injectionSpecs)
	Describe("guards and the fence", fenceSpecs)
	Describe("failover", failoverSpecs)
	Describe("the app's readiness, start and restarts", appWiringSpecs)
	Describe("traffic that follows the holder", trafficSpecs)
	// Before the webhook's specs: their helm upgrade replaces the serving Secret Prometheus checks against.
	Describe("monitoring", monitoringSpecs)
	Describe("the webhook", webhookSpecs)
	// After the webhook's specs, whose helm upgrade it replaces: it installs an earlier commit's chart,
	// upgrades, rolls back and leaves this tree's chart installed with the suite's values.
	Describe("upgrades", Ordered, upgradeSpecs)
	// Last: every component loses the API server for a while, and the specs after would measure that.
	Describe("control-plane crashes", crashSpecs)
})

// startNodeWithLeasegate starts the node, imports the images, runs cert-manager, times pod creations
// without leasegate, then installs it with helm and makes the workloads' labelled namespace.
func startNodeWithLeasegate() {
	var err error
	tools, err = checkout.FindTools()
	Expect(err).NotTo(HaveOccurred())
	versions, err := checkout.PinnedVersions()
	Expect(err).NotTo(HaveOccurred())
	dir = GinkgoT().TempDir()

	By("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet and kube-proxy")
	started := time.Now()
	node, err = cluster.StartNode(ctx, filepath.Join(checkout.RepoRoot(), "bin", "controlplane", versions["KUBERNETES_VERSION"]+"-"+versions["ETCD_VERSION"]))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		node.Stop()
		Expect(node.Leftovers()).To(BeEmpty(), "the node's teardown left these behind")
	})
	figures.Value("node Ready after start", time.Since(started).Round(100*time.Millisecond).String())

	By("building leasegate's images and the test workload's, and importing them into containerd")
	agent, err := checkout.BuildAgent(dir)
	Expect(err).NotTo(HaveOccurred())
	webhookBinary, err := checkout.BuildWebhook(dir)
	Expect(err).NotTo(HaveOccurred())
	workload, err := checkout.BuildBinary(dir, "./test/fixtures/workload", "workload")
	Expect(err).NotTo(HaveOccurred())
	appVersion := chartAppVersion()
	Expect(node.Import(
		cluster.Image{Ref: "ghcr.io/leasegate/leasegate-agent:" + appVersion, Binary: agent},
		cluster.Image{Ref: "ghcr.io/leasegate/leasegate-webhook:" + appVersion, Binary: webhookBinary},
		cluster.Image{Ref: "leasegate.local/workload:test", Binary: workload},
	)).To(Succeed())

	By("running cert-manager's controller and cainjector as pods")
	Expect(node.InstallCertManager(ctx, cluster.CertManager{
		Controller: tools.CertManagerController, CAInjector: tools.CertManagerCAInjector, CRDs: tools.CertManagerCRDs,
		Version: versions["CERT_MANAGER_BINARIES_VERSION"],
	})).To(Succeed())

	By("timing 200 pod creations before leasegate is installed")
	latencies, failures := createPods(ctx, node, newBurstNamespace(ctx, node, "before"), 200)
	Expect(failures).To(BeEmpty())
	figures.Latencies("pod create, 200 at 10 in parallel, without leasegate", latencies)

	By("helm install leasegate, as docs/install.md says: the certificate from cert-manager")
	values := filepath.Join(dir, "values.yaml")
	Expect(os.WriteFile(values, []byte("image:\n  webhook: {pullPolicy: Never}\n  agent: {pullPolicy: Never}\n"), 0o644)).To(Succeed())
	out, err := tools.InstallChart(filepath.Join(node.Dir, "admin.kubeconfig"), leasegateNamespace, values)
	Expect(err).NotTo(HaveOccurred(), string(out))
	awaitWebhookReplicas(ctx, node, 2)
	By("waiting for cainjector to give both webhook configurations cert-manager's CA")
	Eventually(func() error { return webhookCABundles(ctx, node, nil) }).WithTimeout(60 * time.Second).Should(Succeed())

	Expect(createLabelledNamespace(ctx, node, app)).To(Succeed())
}
