package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
	"github.com/leasegate/leasegate/test/framework/certs"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/observe"
	"github.com/leasegate/leasegate/test/framework/process"
)

const chartNamespace = "leasegate-system"

// chartObjects renders the chart and decodes every object in it.
func chartObjects(tools *checkout.Tools, valuesFiles ...string) []*unstructured.Unstructured {
	rendered, err := tools.RenderChart(chartNamespace, valuesFiles...)
	Expect(err).NotTo(HaveOccurred())
	var objects []*unstructured.Unstructured
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil || len(obj.Object) == 0 {
			Expect(err).NotTo(HaveOccurred(), doc)
			continue
		}
		objects = append(objects, obj)
	}
	return objects
}

// applier server-side applies unstructured objects, for real or as a dry run.
type applier struct {
	client dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(cp *process.ControlPlane) *applier {
	dc := discovery.NewDiscoveryClientForConfigOrDie(cp.Config)
	return &applier{
		client: dynamic.NewForConfigOrDie(cp.Config),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "helm", Force: ptr.To(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	resource := a.client.Resource(mapping.Resource)
	if obj.GetNamespace() != "" {
		_, err = resource.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	} else {
		_, err = resource.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	}
	return err
}

var _ = Describe("The Helm chart", Ordered, func() {
	var (
		cp    *process.ControlPlane
		tools *checkout.Tools
	)
	BeforeAll(func() {
		var err error
		tools, err = checkout.FindTools()
		Expect(err).NotTo(HaveOccurred())
		By("starting a control plane of its own, with cert-manager's and the Prometheus Operator's CRDs: the chart's objects are cluster-wide")
		cp, err = process.StartControlPlane(tools.CertManagerCRDs, tools.PrometheusOperatorCRDs, filepath.Join(checkout.RepoRoot(), "charts", "leasegate", "crds"))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		_, err = cp.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: chartNamespace},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	})

	It("renders only objects a v1.36 API server and cert-manager's and the Prometheus Operator's schemas accept, for every values file", func(ctx SpecContext) {
		a := newApplier(cp)
		files, err := filepath.Glob(filepath.Join(checkout.RepoRoot(), "test", "chart", "testdata", "values", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		for _, values := range append([]string{""}, files...) {
			var valuesFiles []string
			if values != "" {
				valuesFiles = []string{values}
			}
			kinds, names := map[string]bool{}, map[string]bool{}
			for _, obj := range chartObjects(tools, valuesFiles...) {
				kinds[obj.GetKind()] = true
				names[obj.GetKind()+" "+obj.GetName()] = true
				Expect(a.apply(ctx, obj, true)).To(Succeed(), "%s %s with values %s", obj.GetKind(), obj.GetName(), filepath.Base(values))
			}
			switch filepath.Base(values) {
			case ".":
				Expect(kinds).To(HaveKey("Certificate"))
				Expect(kinds).To(HaveKey("ValidatingWebhookConfiguration"))
			case "monitoring.yaml":
				Expect(kinds).To(And(HaveKey("ServiceMonitor"), HaveKey("PodMonitor"), HaveKey("PrometheusRule")))
				Expect(names).To(HaveKey("ConfigMap leasegate-dashboard"), "the Grafana dashboard")
			}
		}
	})

	It("gets its serving certificate from the real cert-manager, which injects the CA into both webhook configurations", func(ctx SpecContext) {
		a := newApplier(cp)
		// Installed with guards, which the next spec needs: the config webhook cannot be reached here to
		// admit an edit later.
		// And the priority level of the agents' lease writes, which the flow control spec checks.
		largeClusters := filepath.Join(checkout.RepoRoot(), "test", "chart", "testdata", "values", "large-clusters.yaml")
		for _, obj := range chartObjects(tools, strictFenceValues(), largeClusters) {
			Expect(a.apply(ctx, obj, false)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		}
		dir := GinkgoT().TempDir()
		kubeconfig := filepath.Join(dir, "admin.kubeconfig")
		Expect(cp.AdminKubeconfig(kubeconfig)).To(Succeed())
		for _, component := range []struct {
			binary string
			args   []string
		}{
			{tools.CertManagerController, []string{"--cluster-resource-namespace=" + chartNamespace, "--metrics-listen-address=127.0.0.1:0"}},
			{tools.CertManagerCAInjector, nil},
		} {
			p, err := process.StartProcess(exec.Command(component.binary,
				append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false"}, component.args...)...))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func() {
				p.Terminate(5 * time.Second)
				if CurrentSpecReport().Failed() {
					AddReportEntry(filepath.Base(component.binary)+" logs", p.Logs())
				}
			})
		}

		certificates := a.client.Resource(certificatesResource).Namespace(chartNamespace)
		for _, name := range []string{"leasegate-ca", "leasegate-webhook"} {
			Eventually(func() (string, error) {
				cert, err := certificates.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return "", err
				}
				return readyCondition(cert), nil
			}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Equal("True"), "Certificate %s Ready", name)
		}

		secret, err := cp.Client.CoreV1().Secrets(chartNamespace).Get(ctx, "leasegate-webhook-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		serving := parseCertificate(secret.Data["tls.crt"])
		Expect(serving.DNSNames).To(ContainElements("leasegate-webhook.leasegate-system.svc", "leasegate-webhook.leasegate-system.svc.cluster.local"))
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(secret.Data["ca.crt"])).To(BeTrue())
		_, err = serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "leasegate-webhook.leasegate-system.svc"})
		Expect(err).NotTo(HaveOccurred(), "the serving certificate is signed by the CA in the chain")
		Expect(parseCertificate(secret.Data["ca.crt"]).Subject.CommonName).To(Equal("leasegate-ca"))

		admission := cp.Client.AdmissionregistrationV1()
		Eventually(func(g Gomega) {
			mutating, err := admission.MutatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for _, w := range mutating.Webhooks {
				g.Expect(w.ClientConfig.CABundle).To(Equal(secret.Data["ca.crt"]), "caBundle of %s", w.Name)
			}
			validating, err := admission.ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for _, w := range validating.Webhooks {
				g.Expect(w.ClientConfig.CABundle).To(Equal(secret.Data["ca.crt"]), "caBundle of %s", w.Name)
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("runs leasegate-webhook with exactly the RBAC the chart grants: caches, leader election, provisioning, guard rules", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		kubeconfig, err := cp.UnboundToken(ctx, chartNamespace, "leasegate-webhook", dir)
		Expect(err).NotTo(HaveOccurred())
		secret, err := cp.Client.CoreV1().Secrets(chartNamespace).Get(ctx, "leasegate-webhook-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		certDir := filepath.Join(dir, "certs")
		Expect(os.MkdirAll(certDir, 0o700)).To(Succeed())
		for _, key := range []string{"tls.crt", "tls.key"} {
			Expect(os.WriteFile(filepath.Join(certDir, key), secret.Data[key], 0o600)).To(Succeed())
		}
		binary, err := checkout.BuildWebhook(dir)
		Expect(err).NotTo(HaveOccurred())
		ports := make([]int, 3)
		for i := range ports {
			ports[i], err = process.FreePort()
			Expect(err).NotTo(HaveOccurred())
		}
		p, err := process.StartProcess(exec.Command(binary, "--kubeconfig="+kubeconfig, "--namespace="+chartNamespace,
			"--cert-dir="+certDir, fmt.Sprintf("--webhook-port=%d", ports[0]),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]), fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[2])))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			p.Terminate(10 * time.Second)
			if CurrentSpecReport().Failed() {
				AddReportEntry("leasegate-webhook logs", p.Logs())
			}
		})

		By("becoming ready: every cache listed, the guarded leases included (one in kube-system, which leasegate only reads)")
		Eventually(func() (int, error) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(http.StatusOK))

		By("keeping the guarded webhook's rules in step with the guards")
		Eventually(func(g Gomega) {
			vwc, err := cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vwc.Webhooks[0].Rules).To(ContainElements(
				HaveField("Resources", ContainElement("deployments")), HaveField("Resources", ContainElement("jobs"))))
			g.Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal(secret.Data["ca.crt"]), "cert-manager's caBundle untouched")
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("provisioning the Lease and RBAC of an injected pod")
		_, err = cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = cp.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "orders-0", Labels: map[string]string{"leasegate.io/injected": "true"},
				Annotations: map[string]string{"leasegate.io/status": `{"lease":"orders","sidecar":"native","port":9440}`},
			},
			Spec: corev1.PodSpec{ServiceAccountName: "orders", InitContainers: []corev1.Container{agentContainer("LEASEGATE_LEASE", "orders")},
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/orders:1"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			role, err := cp.Client.RbacV1().Roles("shop").Get(ctx, "leasegate-orders", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(role.Rules[0].ResourceNames).To(Equal([]string{"orders"}))
			_, err = cp.Client.RbacV1().RoleBindings("shop").Get(ctx, "leasegate-orders", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			lease, err := cp.Client.CoordinationV1().Leases("shop").Get(ctx, "orders", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lease.Labels).To(HaveKeyWithValue("leasegate.io/managed", "true"))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("provisioning the MultiClusterLease and RBAC of a pod that elects across clusters: the chart lets leasegate grant its spec")
		_, err = cp.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "payouts-0", Labels: map[string]string{"leasegate.io/injected": "true"},
				Annotations: map[string]string{"leasegate.io/status": `{"lease":"payouts","sidecar":"native","port":9440,"leaseKind":"MultiClusterLease"}`},
			},
			Spec: corev1.PodSpec{ServiceAccountName: "payouts", InitContainers: []corev1.Container{agentContainer("LEASEGATE_LEASE", "payouts", "LEASEGATE_LEASE_KIND", "MultiClusterLease")},
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/payouts:1"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		mcls := dynamic.NewForConfigOrDie(cp.Config).Resource(v1alpha1.GroupVersion.WithResource(v1alpha1.Resource)).Namespace("shop")
		Eventually(func(g Gomega) {
			role, err := cp.Client.RbacV1().Roles("shop").Get(ctx, "leasegate-multiclusterlease:payouts", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(role.Rules[0].Resources).To(Equal([]string{v1alpha1.Resource}))
			g.Expect(role.Rules[0].ResourceNames).To(Equal([]string{"payouts"}))
			_, err = cp.Client.RbacV1().RoleBindings("shop").Get(ctx, "leasegate-multiclusterlease:payouts", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			m, err := mcls.Get(ctx, "payouts", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m.GetLabels()).To(HaveKeyWithValue("leasegate.io/managed", "true"))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		By("serving /metrics over TLS, only to callers allowed GET /metrics (leasegate-metrics-reader)")
		token := func(sa string) string {
			_, err := cp.Client.CoreV1().ServiceAccounts(chartNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			t, err := cp.Client.CoreV1().ServiceAccounts(chartNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return t.Status.Token
		}
		prometheus, stranger := token("prometheus"), token("stranger")
		_, err = cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-leasegate"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "leasegate-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: chartNamespace}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		client, err := observe.WebhookClient(secret.Data["ca.crt"], chartNamespace)
		Expect(err).NotTo(HaveOccurred())
		scrape := func(token string) (int, string) {
			code, body, err := observe.GetWithToken(ctx, client, fmt.Sprintf("https://127.0.0.1:%d/metrics", ports[2]), token)
			Expect(err).NotTo(HaveOccurred(), "metrics over TLS with the webhook's certificate, checked against cert-manager's CA")
			return code, string(body)
		}
		code, _ := scrape("")
		Expect(code).To(Equal(http.StatusUnauthorized), "no token")
		code, _ = scrape(stranger)
		Expect(code).To(Equal(http.StatusForbidden), "a service account not bound to leasegate-metrics-reader")
		// The binding reaches the API server's authorizer through its informer, and the webhook caches a
		// denial for a while: the first scrape may come too soon.
		var body string
		Eventually(func() int { code, body = scrape(prometheus); return code }).WithTimeout(45*time.Second).WithPolling(time.Second).
			Should(Equal(http.StatusOK), "a service account bound to leasegate-metrics-reader")
		Expect(body).To(ContainSubstring("leasegate_config_last_reload_successful 1"))

		Expect(p.Logs()).NotTo(ContainSubstring("forbidden"), "the chart's RBAC must cover everything leasegate-webhook does")
	})

	It("puts leasegate-webhook's own API requests at flowControl.priorityLevel, and the agents' lease writes at a level of their own, apart from their reads in workload-low", func(ctx SpecContext) {
		flowcontrol := cp.Client.FlowcontrolV1()
		schema, err := flowcontrol.FlowSchemas().Get(ctx, "leasegate-webhook", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "installed with the chart")
		leaseWrites, err := flowcontrol.FlowSchemas().Get(ctx, "leasegate-lease-writes", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "installed with the chart")
		// The API server keeps its suggested configuration in place; a fresh one may still be creating it.
		var serviceAccounts *flowcontrolv1.FlowSchema
		Eventually(func() error {
			serviceAccounts, err = flowcontrol.FlowSchemas().Get(ctx, "service-accounts", metav1.GetOptions{})
			return err
		}).WithTimeout(30 * time.Second).Should(Succeed())
		levels := map[string]string{}
		for _, name := range []string{"workload-high", "workload-low", "leasegate-lease-writes"} {
			level, err := flowcontrol.PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			levels[name] = string(level.UID)
		}
		// servedBy is the FlowSchema and priority level the API server says served a request of the
		// service account (a read of a lease, or a write: method): the X-Kubernetes-PF-* headers, set
		// whatever the authorizer then decides.
		servedBy := func(serviceAccount, method string) (flowSchemaUID, priorityLevelUID string) {
			if _, err := cp.Client.CoreV1().ServiceAccounts(chartNamespace).Get(ctx, serviceAccount, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				_, err = cp.Client.CoreV1().ServiceAccounts(chartNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
				Expect(err).NotTo(HaveOccurred())
			}
			token, err := cp.Client.CoreV1().ServiceAccounts(chartNamespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			config := rest.AnonymousClientConfig(cp.Config)
			config.BearerToken = token.Status.Token
			client, err := rest.HTTPClientFor(config)
			Expect(err).NotTo(HaveOccurred())
			var body io.Reader
			if method != http.MethodGet {
				body = strings.NewReader("{}")
			}
			path := "/apis/coordination.k8s.io/v1/namespaces/" + chartNamespace + "/leases"
			if method != http.MethodPost {
				path += "/leasegate-webhook"
			}
			req, err := http.NewRequestWithContext(ctx, method, config.Host+path, body)
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			Expect(err).NotTo(HaveOccurred())
			resp.Body.Close()
			return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
		}
		Eventually(func(g Gomega) {
			flowSchemaUID, priorityLevelUID := servedBy("leasegate-webhook", http.MethodPut)
			g.Expect(flowSchemaUID).To(Equal(string(schema.UID)), "leasegate-webhook's requests, its lease writes too, match its FlowSchema")
			g.Expect(priorityLevelUID).To(Equal(levels["workload-high"]))
			flowSchemaUID, priorityLevelUID = servedBy("an-app", http.MethodPut)
			g.Expect(flowSchemaUID).To(Equal(string(leaseWrites.UID)), "an agent's renewal matches the lease writes' FlowSchema")
			g.Expect(priorityLevelUID).To(Equal(levels["leasegate-lease-writes"]))
		}).WithTimeout(30*time.Second).Should(Succeed(), "the API server's flow control picks up a new FlowSchema asynchronously")
		flowSchemaUID, priorityLevelUID := servedBy("leasegate-webhook", http.MethodGet)
		Expect(flowSchemaUID).To(Equal(string(schema.UID)))
		Expect(priorityLevelUID).To(Equal(levels["workload-high"]))
		flowSchemaUID, priorityLevelUID = servedBy("an-app", http.MethodPost)
		Expect(flowSchemaUID).To(Equal(string(leaseWrites.UID)), "an agent's create of its lease is a lease write too")
		Expect(priorityLevelUID).To(Equal(levels["leasegate-lease-writes"]))
		flowSchemaUID, priorityLevelUID = servedBy("an-app", http.MethodGet)
		Expect(flowSchemaUID).To(Equal(string(serviceAccounts.UID)), "an agent's reads stay with every other service account's")
		Expect(priorityLevelUID).To(Equal(levels["workload-low"]))
	})
})

// strictFenceValues is the chart test's values file with guards.
func strictFenceValues() string {
	return filepath.Join(checkout.RepoRoot(), "test", "chart", "testdata", "values", "strict-fence.yaml")
}

var certificatesResource = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

func readyCondition(obj *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

func parseCertificate(data []byte) *x509.Certificate {
	cert, err := certs.ParseCertificate(data)
	Expect(err).NotTo(HaveOccurred())
	return cert
}

// agentContainer is the agent as injection adds it (a native sidecar) with a 15 s lease and the given
// variables as name, value pairs: what provisioning reads a pod's leases from.
func agentContainer(env ...string) corev1.Container {
	c := corev1.Container{Name: "leasegate-agent", Image: "leasegate-agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: []corev1.EnvVar{{Name: "LEASEGATE_LEASE_DURATION", Value: "15s"}}}
	for i := 0; i+1 < len(env); i += 2 {
		c.Env = append(c.Env, corev1.EnvVar{Name: env[i], Value: env[i+1]})
	}
	return c
}
