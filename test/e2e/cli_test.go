package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/cli"
	"github.com/leasegate/leasegate/internal/golden"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// updateGoldens rewrites this suite's golden files: go test ./test/e2e -update -ginkgo.focus=kubectl
var updateGoldens = flag.Bool("update", false, "rewrite test/e2e/testdata/*.golden from the current output")

// cliNow is the instant the plugin's goldens are judged at; the objects' times are set relative to it.
var cliNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func compareE2EGolden(name string, got []byte) {
	golden.Compare(GinkgoT(), filepath.Join("testdata", name), got, *updateGoldens, "go test ./test/e2e -update -ginkgo.focus=kubectl")
}

var _ = Describe("kubectl leasegate", Ordered, func() {
	var (
		cp         *process.ControlPlane
		plugin     string
		kubeconfig string
	)
	BeforeAll(func(ctx SpecContext) {
		var err error
		By("starting a control plane of its own: the goldens need objects no other spec touches")
		cp, err = process.StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		dir := GinkgoT().TempDir()
		kubeconfig = filepath.Join(dir, "admin.kubeconfig")
		Expect(cp.AdminKubeconfig(kubeconfig)).To(Succeed())
		plugin, err = checkout.BuildBinary(dir, "./cmd/kubectl-leasegate", "kubectl-leasegate")
		Expect(err).NotTo(HaveOccurred())
		plantElections(ctx, cp)
	})

	run := func(args ...string) (string, int) { return runPlugin(plugin, kubeconfig, args...) }

	It("reports every lease leasegate manages or guards, from real objects, as its golden files say", func(ctx SpecContext) {
		list, err := cli.GatherStatus(ctx, cp.Client, cli.StatusOptions{
			LeasegateNamespace: leasegateNamespace, ConfigName: "leasegate-config", Now: cliNow,
		})
		Expect(err).NotTo(HaveOccurred())
		for _, format := range []string{cli.OutputTable, cli.OutputWide, cli.OutputJSON} {
			var out bytes.Buffer
			Expect(cli.RenderStatus(&out, list, format)).To(Succeed())
			compareE2EGolden("status."+format+".golden", out.Bytes())
		}

		By("the binary, with kubectl's flags: one namespace, one lease, and every namespace")
		out, code := run("status", "-n", "shop")
		Expect(code).To(Equal(0), out)
		Expect(out).To(And(ContainSubstring("orders-0"), ContainSubstring("reports"), Not(ContainSubstring("cert-manager-controller")), Not(ContainSubstring("unrelated"))))
		out, code = run("status", "orders", "-n", "shop", "-o", "yaml")
		Expect(code).To(Equal(0), out)
		report := &cli.StatusList{}
		Expect(yaml.Unmarshal([]byte(out), report)).To(Succeed())
		Expect(report.Kind).To(Equal(cli.StatusKind))
		Expect(report.Items).To(HaveLen(1))
		Expect(report.Items[0].Candidates).To(HaveLen(2))
		out, code = run("status", "-A")
		Expect(code).To(Equal(0), out)
		Expect(out).To(ContainSubstring("cert-manager-controller"))
		_, code = run("status", "-o", "xml")
		Expect(code).To(Equal(cli.ExitUsage))
		out, code = run("status", "-n", "default")
		Expect(code).To(Equal(0), out)
		Expect(out).To(HavePrefix("No leases found"))
	})

	It("completes lease names and --to pods through the kubectl_complete-leasegate shim", func() {
		shim := filepath.Join(checkout.RepoRoot(), "cmd", "kubectl-leasegate", "kubectl_complete-leasegate")
		complete := func(args ...string) string {
			// kubectl runs the shim with the words after "kubectl leasegate"; the shim runs the plugin from PATH.
			cmd := exec.Command(shim, append([]string{"--kubeconfig", kubeconfig}, args...)...)
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(plugin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.Output()
			Expect(err).NotTo(HaveOccurred())
			return string(out)
		}
		// Each with its state (judged now: the planted renewals are in the past) and holder.
		Expect(complete("handover", "-n", "shop", "")).To(And(MatchRegexp(`(?m)^orders\t\w+ by orders-0$`), MatchRegexp(`(?m)^reports\t`),
			Not(ContainSubstring("cert-manager-controller")), Not(ContainSubstring("unrelated"))))
		Expect(complete("status", "-A", "")).To(ContainSubstring("cert-manager-controller"))
		// orders-1, its only other candidate, is not Ready: nothing to offer.
		Expect(complete("handover", "orders", "-n", "shop", "--to", "")).NotTo(ContainSubstring("orders-"))
	})

	It("prints a new row when the lease changes hands (--watch)", func(ctx SpecContext) {
		watch, err := process.StartProcess(exec.Command(plugin, "--kubeconfig", kubeconfig, "status", "orders", "-n", "shop", "--watch"))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(watch.Stop)
		Eventually(watch.Logs, 10*time.Second).Should(ContainSubstring("orders-0"))
		leases := cp.Client.CoordinationV1().Leases("shop")
		l, err := leases.Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("orders-1_5c2d"), ptr.To[int32](4)
		l.Spec.AcquireTime, l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}, &metav1.MicroTime{Time: time.Now()}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(watch.Logs, 10*time.Second).Should(MatchRegexp(`(?m)^shop\s+orders\s+orders-1\s+held`))
	})

	It("finds each planted misconfiguration, with a code and a fix, and exits 1", func(ctx SpecContext) {
		ca := newTestCA("leasegate-test-ca", cliNow.Add(-time.Hour), cliNow.Add(10*365*24*time.Hour))
		expired := newTestCA("leasegate-expired-ca", cliNow.Add(-48*time.Hour), cliNow.Add(-24*time.Hour))
		server := httptest.NewUnstartedServer(http.NotFoundHandler())
		server.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serving("127.0.0.1")}}
		server.StartTLS()
		DeferCleanup(server.Close)

		By("installing config/webhook pointed at a server that answers with a certificate the bundle trusts")
		installWebhookConfigurations(ctx, cp, server.URL, ca.pem)
		report, err := cli.Check(ctx, cp.Client, "shop", checkOptions())
		Expect(err).NotTo(HaveOccurred())
		Expect(report.Errors).To(BeZero(), "%+v", report.Findings)

		By("planting: an expired CA bundle, a hand-edited guarded rule, a PodDisruptionBudget that allows nothing, no mutating configuration")
		admission := cp.Client.AdmissionregistrationV1()
		validating, err := admission.ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		for i := range validating.Webhooks {
			switch validating.Webhooks[i].Name {
			case "evictions.leasegate.io":
				validating.Webhooks[i].ClientConfig.CABundle = expired.pem
			case "guarded.leasegate.io":
				validating.Webhooks[i].Rules = []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"*"}, Resources: []string{"configmaps"}},
				}}
			}
		}
		_, err = admission.ValidatingWebhookConfigurations().Update(ctx, validating, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(admission.MutatingWebhookConfigurations().Delete(ctx, "leasegate", metav1.DeleteOptions{})).To(Succeed())
		_, err = cp.Client.PolicyV1().PodDisruptionBudgets("shop").Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "orders"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "orders"}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		By("and the webhook gone")
		server.Close()

		report, err = cli.Check(ctx, cp.Client, "shop", checkOptions())
		Expect(err).NotTo(HaveOccurred())
		var codes []string
		for _, f := range report.Findings {
			codes = append(codes, f.Code)
		}
		Expect(codes).To(ContainElements(cli.CodeWebhookConfigurationMissing, cli.CodeCABundleInvalid, cli.CodeGuardedRulesStale,
			cli.CodeDisruptionBudgetBlocks, cli.CodeWebhookUnreachable))
		// The server's port is the only thing that changes from run to run.
		port := regexp.MustCompile(`127\.0\.0\.1:\d+`)
		for _, format := range []string{cli.OutputTable, cli.OutputJSON} {
			var out bytes.Buffer
			Expect(cli.RenderCheck(&out, report, format)).To(Succeed())
			compareE2EGolden("check."+format+".golden", port.ReplaceAll(out.Bytes(), []byte("127.0.0.1:PORT")))
		}

		By("the binary exits 1 and says why")
		out, code := run("check", "-n", "shop")
		Expect(code).To(Equal(cli.ExitFindings))
		Expect(out).To(And(ContainSubstring("LG001"), ContainSubstring("error(s) found")))
	})
})

// runPlugin runs the kubectl-leasegate binary as kubectl would, and returns what it printed and its exit
// code.
func runPlugin(plugin, kubeconfig string, args ...string) (string, int) {
	cmd := exec.Command(plugin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), exit.ExitCode()
	}
	Expect(err).NotTo(HaveOccurred())
	return out.String(), 0
}

func checkOptions() cli.CheckOptions {
	return cli.CheckOptions{LeasegateNamespace: leasegateNamespace, ConfigName: "leasegate-config", WebhookConfiguration: "leasegate", Now: cliNow}
}

// plantElections creates, on cp, what an install with three elections would have: leasegate-config with
// guards, a managed lease held by one of its two candidate pods (agents injected with the default
// timing), a released managed lease, cert-manager's lease (guarded, not managed), a lease leasegate has
// nothing to do with, and denial Events in and out of the last hour.
func plantElections(ctx context.Context, cp *process.ControlPlane) {
	for _, ns := range []string{"shop", leasegateNamespace} {
		_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	_, err := cp.Client.CoreV1().ConfigMaps(leasegateNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"},
		Data: map[string]string{"config.yaml": `apiVersion: config.leasegate.io/v1alpha1
kind: LeasegateConfiguration
guards:
- name: orders-controller
  lease: orders
  namespaces: [shop]
  resources: [{group: apps, resources: [deployments]}]
- name: certificates
  lease: kube-system/cert-manager-controller
  holderFormat: cert-manager
  resources: [{group: cert-manager.io, resources: [certificaterequests]}]
`},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	at := func(ago time.Duration) *metav1.MicroTime { return &metav1.MicroTime{Time: cliNow.Add(-ago)} }
	managed := map[string]string{"leasegate.io/managed": "true"}
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Labels: managed}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("orders-0_4b1c"), LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To[int32](3),
			AcquireTime: at(5 * time.Minute), RenewTime: at(2 * time.Second)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "reports", Labels: managed}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](6), LeaseTransitions: ptr.To[int32](9), RenewTime: at(40 * time.Second)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "unrelated"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone_1")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cert-manager-controller"}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("cm-0-external-cert-manager-controller"), LeaseDurationSeconds: ptr.To[int32](60),
			LeaseTransitions: ptr.To[int32](1), AcquireTime: at(26 * time.Hour), RenewTime: at(10 * time.Second)}},
	} {
		_, err := cp.Client.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	for i, ready := range []bool{true, false} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "shop", Name: []string{"orders-0", "orders-1"}[i],
				Labels:      map[string]string{"leasegate.io/injected": "true", "app.kubernetes.io/name": "orders"},
				Annotations: map[string]string{"leasegate.io/status": `{"lease":"orders","sidecar":"native","port":9440,"image":"leasegate-agent"}`},
			},
			Spec: corev1.PodSpec{
				NodeName: []string{"node-a", "node-b"}[i],
				InitContainers: []corev1.Container{{Name: "leasegate-agent", Image: "leasegate-agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					Env: []corev1.EnvVar{{Name: "LEASEGATE_LEASE", Value: "orders"}, {Name: "LEASEGATE_LEASE_DURATION", Value: "15s"},
						{Name: "LEASEGATE_RENEW_DEADLINE", Value: "10s"}, {Name: "LEASEGATE_RETRY_PERIOD", Value: "2s"}}}},
				Containers: []corev1.Container{{Name: "orders", Image: "registry.example/orders:1"}},
			},
		}
		created, err := cp.Client.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		_, err = cp.Client.CoreV1().Pods("shop").UpdateStatus(ctx, created, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	for i, ago := range []time.Duration{10 * time.Minute, 20 * time.Minute, 2 * time.Hour} {
		_, err := cp.Client.EventsV1().Events("shop").Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "denied-" + string(rune('a'+i))},
			EventTime:  metav1.MicroTime{Time: cliNow.Add(-ago)}, ReportingController: "leasegate-fence", ReportingInstance: "leasegate-webhook-0",
			Action: "Deny", Reason: "LeaderGateDenied", Type: corev1.EventTypeWarning,
			Regarding: corev1.ObjectReference{Kind: "Namespace", Name: "shop", Namespace: "shop"},
			Note:      "leasegate: pod shop/orders-1 may not update deployments shop/orders: lease shop/orders is held by orders-0_4b1c (guard \"orders-controller\"): held by another pod",
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
}

// installWebhookConfigurations installs config/webhook with every entry's clientConfig at url, trusting
// caBundle, as cert-manager's cainjector would leave it.
func installWebhookConfigurations(ctx context.Context, cp *process.ControlPlane, url string, caBundle []byte) {
	data, err := os.ReadFile(process.WebhookManifests())
	Expect(err).NotTo(HaveOccurred())
	admission := cp.Client.AdmissionregistrationV1()
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var kind struct{ Kind string }
		Expect(yaml.Unmarshal(doc, &kind)).To(Succeed())
		clientConfig := admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url + "/"), CABundle: caBundle}
		switch kind.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			Expect(yaml.Unmarshal(doc, m)).To(Succeed())
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig = clientConfig
			}
			_, err = admission.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{})
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			Expect(yaml.Unmarshal(doc, v)).To(Succeed())
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig = clientConfig
				if v.Webhooks[i].Name == "guarded.leasegate.io" {
					// What leasegate-webhook's RulesSyncer writes for the guards above.
					v.Webhooks[i].Rules = []admissionregistrationv1.RuleWithOperations{
						{Operations: []admissionregistrationv1.OperationType{"CREATE", "DELETE", "UPDATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"*"}, Resources: []string{"deployments"}}},
						{Operations: []admissionregistrationv1.OperationType{"CREATE", "DELETE", "UPDATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"cert-manager.io"}, APIVersions: []string{"*"}, Resources: []string{"certificaterequests"}}},
					}
				}
			}
			_, err = admission.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{})
		default:
			continue
		}
		Expect(err).NotTo(HaveOccurred())
	}
}

// testCA is a CA with a fixed validity, so that what `check` says of it is the same in every run.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(name string, notBefore, notAfter time.Time) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	Expect(err).NotTo(HaveOccurred())
	cert, err := x509.ParseCertificate(der)
	Expect(err).NotTo(HaveOccurred())
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serving is a certificate for ip signed by the CA, valid now.
func (ca *testCA) serving(ip string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip}, IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	Expect(err).NotTo(HaveOccurred())
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
