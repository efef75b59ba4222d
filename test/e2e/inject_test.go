package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// labelledNamespace creates a namespace with the given labels and a service account "orders".
func labelledNamespace(ctx context.Context, labels map[string]string) string {
	name := fmt.Sprintf("inject-%d-%d", GinkgoParallelProcess(), namespaces.Add(1))
	_, err := controlPlane.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = controlPlane.Client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "orders"},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return name
}

var optedIn = map[string]string{"leasegate.io/inject": "enabled"}

// deploymentPod is a pod as the ReplicaSet of Deployment "orders" creates it, restricted-compliant.
func deploymentPod(namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "orders-5d8f7c9b4-",
			Namespace:    namespace,
			Labels:       map[string]string{"app.kubernetes.io/name": "orders", "pod-template-hash": "5d8f7c9b4"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "orders-5d8f7c9b4",
				UID: "0b6a4d1f-6c4f-4f8e-8f0e-3f1b9f2d6a10", Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "orders",
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "orders", Image: "registry.example/orders:1",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

func createPod(ctx context.Context, pod *corev1.Pod, dryRun bool) (*corev1.Pod, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return controlPlane.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, opts)
}

// startInjectedAgents runs each pod's agent from its injected spec, authenticated by a token bound to it.
func startInjectedAgents(ctx context.Context, pods []*corev1.Pod) []*process.Agent {
	dir := GinkgoT().TempDir()
	var agents []*process.Agent
	for _, pod := range pods {
		identity, err := controlPlane.PodIdentity(ctx, pod, dir, "")
		Expect(err).NotTo(HaveOccurred())
		agent, err := process.StartInjectedAgent(agentBinary, pod, identity)
		Expect(err).NotTo(HaveOccurred())
		stopAtCleanup(agent)
		agents = append(agents, agent)
	}
	return agents
}

func isInjected(pod *corev1.Pod) bool {
	return pod.Annotations["leasegate.io/status"] != ""
}

// canUpdateLease asks the API server whether the service account may update the named lease.
func canUpdateLease(ctx context.Context, namespace, serviceAccount, lease string) bool {
	return mayDo(ctx, controlPlane.Client, serviceAccount, authorizationv1.ResourceAttributes{
		Namespace: namespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: lease,
	})
}

// mayDo asks the API server of cs whether the service account of that name in attrs.Namespace may do
// what attrs say.
func mayDo(ctx context.Context, cs kubernetes.Interface, serviceAccount string, attrs authorizationv1.ResourceAttributes) bool {
	review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + attrs.Namespace + ":" + serviceAccount,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + attrs.Namespace, "system:authenticated"},
			ResourceAttributes: &attrs,
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return review.Status.Allowed
}

var _ = Describe("The injector", func() {
	It("injects a Deployment's pod in a labelled namespace: native sidecar, identity env, status annotation", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		pod, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred())

		Expect(isInjected(pod)).To(BeTrue())
		Expect(pod.Labels).To(HaveKeyWithValue("leasegate.io/injected", "true"))
		Expect(pod.Spec.InitContainers).To(HaveLen(1))
		agent := pod.Spec.InitContainers[0]
		Expect(agent.Name).To(Equal("leasegate-agent"))
		Expect(agent.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)), "a native sidecar, as on every supported Kubernetes")
		Expect(agent.Env).To(ContainElement(corev1.EnvVar{Name: "LEASEGATE_LEASE", Value: "orders"}), "the lease is named after the Deployment")
		Expect(pod.Spec.Containers[0].Env).To(ContainElements(
			corev1.EnvVar{Name: "LEASEGATE_AGENT_URL", Value: "http://127.0.0.1:9440"},
			HaveField("Name", "POD_UID"),
		))
	})

	It("leaves pods alone where nobody opted in, in kube-system even when labelled, and when the pod opts out", func(ctx SpecContext) {
		plain := labelledNamespace(ctx, nil)
		pod, err := createPod(ctx, deploymentPod(plain), false)
		Expect(err).NotTo(HaveOccurred())
		Expect(isInjected(pod)).To(BeFalse(), "an unlabelled namespace")

		system := deploymentPod("kube-system")
		system.Labels["leasegate.io/inject"] = "enabled"
		system.Spec.ServiceAccountName = ""
		pod, err = createPod(ctx, system, true)
		Expect(err).NotTo(HaveOccurred())
		Expect(isInjected(pod)).To(BeFalse(), "kube-system is never injected")

		optOut := deploymentPod(labelledNamespace(ctx, optedIn))
		optOut.Labels["leasegate.io/inject"] = "disabled"
		pod, err = createPod(ctx, optOut, false)
		Expect(err).NotTo(HaveOccurred())
		Expect(isInjected(pod)).To(BeFalse(), "the pod's opt-out wins over its namespace")

		optIn := deploymentPod(plain)
		optIn.Labels["leasegate.io/inject"] = "enabled"
		pod, err = createPod(ctx, optIn, false)
		Expect(err).NotTo(HaveOccurred())
		Expect(isInjected(pod)).To(BeTrue(), "a pod may opt in by itself in any namespace")
	})

	It("injects a dry-run create and provisions nothing for it", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		pod, err := createPod(ctx, deploymentPod(ns), true)
		Expect(err).NotTo(HaveOccurred())
		Expect(isInjected(pod)).To(BeTrue())
		Consistently(func() bool { return canUpdateLease(ctx, ns, "orders", "orders") }).
			WithTimeout(2 * time.Second).Should(BeFalse())
		_, err = controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Lease for a pod that was never created")
	})

	It("denies a bad timing annotation with the message kubectl shows, naming the annotation and the rule", func(ctx SpecContext) {
		pod := deploymentPod(labelledNamespace(ctx, optedIn))
		pod.Annotations = map[string]string{"leasegate.io/renew-deadline": "20s"}
		_, err := createPod(ctx, pod, false)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(`admission webhook "pods.leasegate.io" denied the request: leasegate cannot inject this pod: ` +
			`metadata.annotations[leasegate.io/renew-deadline]: Invalid value: "20s": renew deadline (20s) must be shorter than lease duration (15s); ` +
			`the rule is retry-period < renew-deadline < lease-duration (lease duration 15s, renew deadline 20s, retry period 2s; ` +
			`unset values come from the takeover objective or the leasegate-config defaults)`))
	})

	It("injects a spec that passes Pod Security restricted in a namespace that enforces it", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, map[string]string{
			"leasegate.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "restricted",
		})
		pod, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred(), "the injected agent must not break restricted")
		Expect(isInjected(pod)).To(BeTrue())

		// The same namespace rejects a pod that is not restricted-compliant: the check is really on.
		loose := deploymentPod(ns)
		loose.Spec.Containers[0].SecurityContext = nil
		_, err = createPod(ctx, loose, true)
		Expect(err).To(MatchError(ContainSubstring(`violates PodSecurity "restricted:latest"`)))
	})

	It("injects an agent without a fixed user when the chart's OpenShift values leave it to the platform, within restricted, and refuses a config that lifts the agent out of it", Serial, func(ctx SpecContext) {
		tools, err := checkout.FindTools()
		Expect(err).NotTo(HaveOccurred())
		var data map[string]string
		for _, obj := range chartObjects(tools, filepath.Join(checkout.RepoRoot(), "test", "chart", "testdata", "values", "openshift.yaml")) {
			if obj.GetKind() == "ConfigMap" && obj.GetName() == "leasegate-config" {
				data, _, _ = unstructured.NestedStringMap(obj.Object, "data")
			}
		}
		Expect(data).To(HaveKey("config.yaml"))
		configMaps := controlPlane.Client.CoreV1().ConfigMaps(leasegateNamespace)
		cm, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: data}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			Expect(configMaps.Delete(ctx, "leasegate-config", metav1.DeleteOptions{})).To(Succeed())
		})

		ns := labelledNamespace(ctx, map[string]string{
			"leasegate.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "restricted",
		})
		agent := func(g Gomega) *corev1.SecurityContext {
			pod, err := createPod(ctx, deploymentPod(ns), true)
			g.Expect(err).NotTo(HaveOccurred(), "Pod Security restricted admits the injected pod")
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				if c.Name == "leasegate-agent" {
					return c.SecurityContext
				}
			}
			g.Expect(pod.Spec.InitContainers).To(ContainElement(HaveField("Name", "leasegate-agent")))
			return nil
		}
		Eventually(func(g Gomega) {
			sc := agent(g)
			g.Expect(sc.RunAsUser).To(BeNil(), "the platform assigns the agent's user")
			g.Expect(sc.RunAsGroup).To(BeNil())
			g.Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))
			g.Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
		}).WithTimeout(5 * time.Second).Should(Succeed())

		By("a config that would let the agent escalate or keep capabilities is refused at admission, naming each field")
		cm.Data["config.yaml"] = "agent:\n  securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: true, capabilities: {drop: [NET_RAW]}, seccompProfile: {type: RuntimeDefault}}\n"
		_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).To(MatchError(And(
			ContainSubstring(`leasegate-config is invalid and was not saved`),
			ContainSubstring(`agent.securityContext.allowPrivilegeEscalation: Invalid value: true: must be set to false`),
			ContainSubstring(`agent.securityContext.capabilities.drop: Required value: must include ALL`),
		)))
	})

	It("provisions update rights on the pod's own lease within seconds, no other, and removes them with the last pod", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		created := time.Now()
		first, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool { return canUpdateLease(ctx, ns, "orders", "orders") }).
			WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(BeTrue())
		GinkgoWriter.Printf("rights provisioned %s after the pod was admitted\n", time.Since(created))
		Expect(canUpdateLease(ctx, ns, "orders", "billing")).To(BeFalse(), "another lease in the same namespace")
		Expect(canUpdateLease(ctx, ns, "default", "orders")).To(BeFalse(), "another service account")

		lease, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(lease.Labels).To(HaveKeyWithValue("leasegate.io/managed", "true"))

		second, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred())
		Expect(controlPlane.Client.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{})).To(Succeed())
		Consistently(func() bool { return canUpdateLease(ctx, ns, "orders", "orders") }).
			WithTimeout(time.Second).Should(BeTrue(), "a pod still uses the lease")

		Expect(controlPlane.Client.CoreV1().Pods(ns).Delete(ctx, second.Name, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() bool { return canUpdateLease(ctx, ns, "orders", "orders") }).WithTimeout(5 * time.Second).Should(BeFalse())
		Eventually(func() bool {
			_, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(5*time.Second).Should(BeTrue(), "the managed Lease goes with the last pod")
		roles, err := controlPlane.Client.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(roles.Items).To(BeEmpty())
	})

	It("never changes nor deletes a user's Role and RoleBinding of the name it provisions, and says so on the pod", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		rbac := controlPlane.Client.RbacV1()
		role, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-orders"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		// The binding carries leasegate's label, as a copy of a leasegate RoleBinding's YAML would: the
		// label alone does not make it leasegate's.
		binding, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-orders", Labels: map[string]string{"leasegate.io/managed": "true"}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leasegate-orders"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		pod, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) []string {
			events, err := controlPlane.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			var notes []string
			for _, e := range events.Items {
				if e.Reason == "ProvisioningConflict" && e.Regarding.Name == pod.Name && e.Regarding.Kind == "Pod" {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}).WithTimeout(10 * time.Second).Should(ContainElement(And(
			ContainSubstring("Role "+ns+"/leasegate-orders exists and leasegate did not create it"),
			ContainSubstring("Delete or rename that Role, or elect on another lease"),
		)))
		Expect(canUpdateLease(ctx, ns, "orders", "orders")).To(BeFalse(), "nothing was bound to the user's Role")
		_, err = controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the Lease is provisioned all the same")

		By("deleting the pod: the Lease goes, the user's Role and RoleBinding stay as they were")
		Expect(controlPlane.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() bool {
			_, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(5 * time.Second).Should(BeTrue())
		after, err := rbac.Roles(ns).Get(ctx, role.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the user's Role was deleted")
		Expect(after.ResourceVersion).To(Equal(role.ResourceVersion), "the user's Role was changed: %v %v", after.Labels, after.Rules)
		afterBinding, err := rbac.RoleBindings(ns).Get(ctx, binding.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the user's RoleBinding was deleted")
		Expect(afterBinding.ResourceVersion).To(Equal(binding.ResourceVersion), "the user's RoleBinding was changed: %v", afterBinding.Subjects)
	})

	It("gives agents, run from the injected spec with pod-bound tokens, enough rights to elect a leader and no more", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		var pods []*corev1.Pod
		for range 3 {
			pod, err := createPod(ctx, deploymentPod(ns), false)
			Expect(err).NotTo(HaveOccurred())
			pods = append(pods, pod)
		}
		leader := soleLeader(startInjectedAgents(ctx, pods))
		lease, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(*lease.Spec.HolderIdentity).To(Equal(leader.Pod.Identity()))
		Expect(*lease.Spec.LeaseDurationSeconds).To(BeEquivalentTo(15), "timing from the leasegate-config defaults")
	})

	It("applies a ConfigMap edit live, refuses an invalid edit at admission, and never applies one that gets past", Serial, func(ctx SpecContext) {
		configMaps := controlPlane.Client.CoreV1().ConfigMaps(leasegateNamespace)
		// Written as earlier releases wrote it, without apiVersion and kind: applied, with a warning to
		// whoever wrote it and an Event.
		config := rest.CopyConfig(controlPlane.Config)
		warned := &warnings{}
		config.WarningHandler = warned
		cm, err := kubernetes.NewForConfigOrDie(config).CoreV1().ConfigMaps(leasegateNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"},
			Data:       map[string]string{"config.yaml": "agent: {image: registry.example/leasegate-agent:live}\n"},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(warned.all()).To(ContainElement(ContainSubstring("config.yaml has no apiVersion and kind, and is read as config.leasegate.io/v1alpha1 LeasegateConfiguration")))
		Eventually(func(g Gomega) {
			events, err := controlPlane.Client.EventsV1().Events(leasegateNamespace).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", "DeprecatedConfig"), HaveField("Regarding.Name", "leasegate-config"))))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(configMaps.Delete(ctx, "leasegate-config", metav1.DeleteOptions{})).To(Succeed())
		})
		ns := labelledNamespace(ctx, optedIn)
		agentImage := func() string {
			pod, err := createPod(ctx, deploymentPod(ns), true)
			Expect(err).NotTo(HaveOccurred())
			var status struct{ Image string }
			Expect(json.Unmarshal([]byte(pod.Annotations["leasegate.io/status"]), &status)).To(Succeed())
			return status.Image
		}
		Eventually(agentImage).WithTimeout(5 * time.Second).Should(Equal("registry.example/leasegate-agent:live"))

		By("an invalid edit is refused at admission, with every error and its field path")
		cm.Data["config.yaml"] = "election: {renewDeadline: 30s}\nagent: {image: registry.example/leasegate-agent:broken, port: 0.5}\n"
		_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).To(MatchError(And(
			ContainSubstring(`admission webhook "config.leasegate.io" denied the request: leasegate-config is invalid and was not saved`),
			ContainSubstring(`agent.port`),
		)))
		cm.Data["config.yaml"] = "election: {renewDeadline: 30s}\nagent: {image: registry.example/leasegate-agent:broken}\n"
		_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).To(MatchError(ContainSubstring(
			`election.renewDeadline: Invalid value: "30s": renew deadline (30s) must be shorter than lease duration (15s)`)))

		By("an invalid edit that gets past admission (the config webhook removed) is not applied either")
		webhooks := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
		vwc, err := webhooks.Get(ctx, "leasegate", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		saved := vwc.DeepCopy()
		vwc.Webhooks = slices.DeleteFunc(vwc.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
			return w.Name == "config.leasegate.io"
		})
		_, err = webhooks.Update(ctx, vwc, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			current, err := webhooks.Get(ctx, "leasegate", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			current.Webhooks = saved.Webhooks
			_, err = webhooks.Update(ctx, current, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred())
		})
		Eventually(func() error {
			_, err := configMaps.Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}).WithTimeout(5 * time.Second).Should(Succeed())
		Eventually(func() ([]string, error) {
			events, err := controlPlane.Client.EventsV1().Events(leasegateNamespace).List(ctx, metav1.ListOptions{})
			var notes []string
			for _, e := range events.Items {
				if e.Reason == "InvalidConfig" && e.Regarding.Name == "leasegate-config" {
					notes = append(notes, e.Note)
				}
			}
			return notes, err
		}).WithTimeout(5 * time.Second).Should(ContainElement(ContainSubstring(
			`election.renewDeadline: Invalid value: "30s": renew deadline (30s) must be shorter than lease duration (15s)`)))
		Expect(agentImage()).To(Equal("registry.example/leasegate-agent:live"), "the last good configuration stays in force")
	})
})
