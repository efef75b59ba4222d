package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/framework/certs"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// forgedReview is an AdmissionReview a pod makes up and POSTs to the webhook itself: a ConfigMap update
// in namespace by made-up pod ghost of service account worker.
func forgedReview(namespace, object, ghost string) []byte {
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("forged-" + object), Operation: admissionv1.Update, Namespace: namespace, Name: object,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			UserInfo: authenticationv1.UserInfo{
				Username: "system:serviceaccount:" + namespace + ":" + process.ServiceAccountName,
				Extra: map[string]authenticationv1.ExtraValue{
					"authentication.kubernetes.io/pod-name": {ghost}, "authentication.kubernetes.io/pod-uid": {"uid-" + ghost},
				},
			},
		},
	}
	data, err := json.Marshal(review)
	Expect(err).NotTo(HaveOccurred())
	return data
}

// postReview POSTs a review to the webhook's guarded path as a pod would, trusting its CA, presenting
// certs.
func postReview(w *process.Webhook, review []byte, certs ...tls.Certificate) (*admissionv1.AdmissionReview, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.CA)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(w.URL+"/validate-guarded", "application/json", bytes.NewReader(review))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer := &admissionv1.AdmissionReview{}
	return answer, json.NewDecoder(resp.Body).Decode(answer)
}

// webhookCounter sums the samples of a counter in w's metrics whose labels contain labels.
func webhookCounter(w *process.Webhook, name, labels string) float64 {
	resp, err := http.Get(w.MetricsURL)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+name+`\{([^}]*)\} (\S+)$`).FindAllStringSubmatch(body.String(), -1) {
		if regexp.MustCompile(regexp.QuoteMeta(labels)).MatchString(m[1]) {
			v, err := strconv.ParseFloat(m[2], 64)
			Expect(err).NotTo(HaveOccurred())
			sum += v
		}
	}
	return sum
}

// eventsIn lists the LeaderGateDenied Events in namespace by the name of what they regard.
func eventsIn(ctx context.Context, client kubernetes.Interface, namespace string) []string {
	events, err := client.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	var regarding []string
	for _, e := range events.Items {
		if e.Reason == "LeaderGateDenied" {
			regarding = append(regarding, e.Regarding.Name)
		}
	}
	return regarding
}

var _ = Describe("Made-up AdmissionReviews POSTed to the webhook", Serial, func() {
	It("write at most the namespace's Event budget, and leave an injected pod's first denial", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		setConfig(ctx, guardConfig(ns, "deny", "deny"))
		const forged, budget = 300, 100 // budget: the fence's per-source burst
		suppressed := webhookCounter(webhook, "leasegate_fence_events_suppressed_total", `reason="budget"`)

		By("POSTing reviews by made-up pods on made-up objects, as any pod can")
		for i := range forged {
			answer, err := postReview(webhook, forgedReview(ns, fmt.Sprintf("made-up-%d", i), fmt.Sprintf("ghost-%d", i)))
			Expect(err).NotTo(HaveOccurred())
			Expect(answer.Response.Allowed).To(BeFalse(), "the guard denies each: it is what would have written an Event")
		}
		Expect(webhookCounter(webhook, "leasegate_fence_events_suppressed_total", `reason="budget"`) - suppressed).To(BeNumerically("==", forged-budget))
		Eventually(func() []string { return eventsIn(ctx, controlPlane.Client, ns) }).Should(HaveLen(budget))

		By("a pod leasegate injected is denied for the first time: its own budget, so its Event is written")
		pod, err := controlPlane.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "follower", Labels: map[string]string{contract.Injected: "true"}},
			Spec: corev1.PodSpec{
				ServiceAccountName: process.ServiceAccountName,
				Containers:         []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		identity, err := controlPlane.PodIdentity(ctx, pod, GinkgoT().TempDir(), "")
		Expect(err).NotTo(HaveOccurred())
		followerClient, _ := clientFor(identity.Kubeconfig)
		_, err = controlPlane.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "state"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { return writeConfigMap(ctx, followerClient, ns, "state", "follower") }).
			Should(MatchError(ContainSubstring("pod %s/follower", ns)), "the pod's cache entry may lag its creation")
		Eventually(func() []string { return eventsIn(ctx, controlPlane.Client, ns) }).Should(ContainElement("state"))
		Expect(eventsIn(ctx, controlPlane.Client, ns)).To(HaveLen(budget + 1))
	})

	It("write no Event in a namespace that does not exist", func(ctx SpecContext) {
		missing := fmt.Sprintf("e2e-%d-missing", GinkgoParallelProcess())
		setConfig(ctx, guardConfig(missing, "deny", "deny"))
		unknown := webhookCounter(webhook, "leasegate_fence_events_suppressed_total", `reason="unknown_namespace"`)
		for i := range 10 {
			answer, err := postReview(webhook, forgedReview(missing, fmt.Sprintf("made-up-%d", i), "ghost"))
			Expect(err).NotTo(HaveOccurred())
			Expect(answer.Response.Allowed).To(BeFalse(), "the guard of that namespace denies each")
		}
		Expect(webhookCounter(webhook, "leasegate_fence_events_suppressed_total", `reason="unknown_namespace"`) - unknown).To(BeNumerically("==", 10))
	})
})

var _ = Describe("A webhook that verifies the API server's client certificate", Ordered, func() {
	const subject = "kube-apiserver-webhook-client"
	var (
		plane    *process.ControlPlane
		verified *process.Webhook
		apiCert  *certs.ClientCertificate
		dir      string
	)
	BeforeAll(func(ctx SpecContext) {
		dir = GinkgoT().TempDir()
		var err error
		apiCert, err = certs.WriteClientCertificate(dir, "apiserver", subject)
		Expect(err).NotTo(HaveOccurred())
		admissionConfig, err := certs.WriteWebhookAdmissionConfig(dir, apiCert)
		Expect(err).NotTo(HaveOccurred())
		By("starting a kube-apiserver whose AdmissionConfiguration gives its webhook calls a client certificate")
		plane, err = process.StartControlPlaneWithFlags(map[string]string{"admission-control-config-file": admissionConfig})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(plane.Stop)
		binary, err := checkout.BuildWebhook(dir)
		Expect(err).NotTo(HaveOccurred())
		By("starting leasegate-webhook with client verification; it is ready once the API server's calls get through")
		verified, err = plane.StartWebhook(ctx, binary, dir, leasegateNamespace,
			"--enable-client-verification", "--client-ca-path="+apiCert.CAFile, "--client-subject-names="+subject)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			verified.Stop()
			if CurrentSpecReport().Failed() {
				AddReportEntry("verifying leasegate-webhook logs", verified.Logs())
			}
		})
	})

	It("admits the API server's calls and refuses a pod's POST at the TLS handshake, writing no Event", func(ctx SpecContext) {
		ns := "verified"
		Expect(plane.CreateNamespace(ctx, ns)).To(Succeed())
		By("a guard, saved through the config webhook: an API server call")
		_, err := plane.Client.CoreV1().ConfigMaps(leasegateNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: map[string]string{"config.yaml": guardConfig(ns, "deny", "deny")},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("a follower's write, denied by the fence the API server called with its certificate")
		follower, err := plane.CreatePod(ctx, ns, "follower", dir, "")
		Expect(err).NotTo(HaveOccurred())
		followerClient, _ := clientFor(follower.Kubeconfig)
		Eventually(func() error { return writeConfigMap(ctx, followerClient, ns, "state", "follower") }).
			Should(MatchError(ContainSubstring("leasegate: pod %s/follower", ns)))
		Eventually(func() []string { return eventsIn(ctx, plane.Client, ns) }).ShouldNot(BeEmpty())
		decisions := webhookCounter(verified, "leasegate_fence_decisions_total", `webhook="guarded"`)

		By("a pod's own POSTs: without a certificate, and with one another CA signed")
		otherCert, err := certs.WriteClientCertificate(dir, "other", subject)
		Expect(err).NotTo(HaveOccurred())
		other, err := tls.LoadX509KeyPair(otherCert.CertFile, otherCert.KeyFile)
		Expect(err).NotTo(HaveOccurred())
		for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "another CA's certificate": {other}} {
			_, err := postReview(verified, forgedReview(ns, "forged-"+name, "ghost"), certs...)
			Expect(err).To(MatchError(Or(ContainSubstring("tls: certificate required"), ContainSubstring("tls: bad certificate"))), name)
		}
		Expect(webhookCounter(verified, "leasegate_fence_decisions_total", `webhook="guarded"`)).To(Equal(decisions),
			"no forged review reached the fence")

		By("the API server's own certificate, for contrast: answered")
		apiServer, err := tls.LoadX509KeyPair(apiCert.CertFile, apiCert.KeyFile)
		Expect(err).NotTo(HaveOccurred())
		answer, err := postReview(verified, forgedReview(ns, "with-the-api-servers-certificate", "ghost"), apiServer)
		Expect(err).NotTo(HaveOccurred())
		Expect(answer.Response.Allowed).To(BeFalse())
		Eventually(func() []string { return eventsIn(ctx, plane.Client, ns) }).Should(ContainElement("with-the-api-servers-certificate"))
		Expect(eventsIn(ctx, plane.Client, ns)).NotTo(ContainElement(HavePrefix("forged-")))
	})
})
