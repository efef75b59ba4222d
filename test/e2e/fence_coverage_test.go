package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/test/framework/process"
)

// deploymentGuard fences the Deployment writes of service account "worker" in namespace ns with the
// "worker" lease; resource is the guarded entry.
func deploymentGuard(ns, resource string) string {
	return fmt.Sprintf(`election: {clockSkewMargin: 0s}
guards:
- name: worker
  lease: worker
  serviceAccounts: [worker]
  resources: [%s]
  namespaces: [%s]
`, resource, ns)
}

// grantDeploymentWrites lets the pods' service account write Deployments and their scale and status: RBAC
// lets every replica do it, and only the fence tells them apart.
func grantDeploymentWrites(ctx context.Context, ns string) {
	_, err := controlPlane.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/scale", "deployments/status"},
			Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = controlPlane.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployments"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: process.ServiceAccountName}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	user, groups := process.ServiceAccountUser(ns, process.ServiceAccountName)
	for _, resource := range []string{"deployments", "deployments/scale", "deployments/status"} {
		plural, subresource, _ := strings.Cut(resource, "/")
		Expect(process.WaitUntilAllowed(ctx, controlPlane.Client, user, groups,
			authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "apps", Resource: plural, Subresource: subresource})).To(Succeed())
	}
}

func createDeployment(ctx context.Context, ns, name string) {
	labels := map[string]string{"app": name}
	_, err := controlPlane.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
			},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// scale writes deployments/scale.
func scale(ctx context.Context, c kubernetes.Interface, ns, name string, replicas int32) error {
	_, err := c.AppsV1().Deployments(ns).UpdateScale(ctx, name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas},
	}, metav1.UpdateOptions{})
	return err
}

// writeStatus writes deployments/status, as a controller reporting on the Deployment does.
func writeStatus(ctx context.Context, c kubernetes.Interface, ns, name string, replicas int32) error {
	d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.Status.Replicas, d.Status.ObservedGeneration = replicas, d.Generation
	_, err = c.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	return err
}

// impersonating is an admin client acting as a kube-system service account with a token bound to no pod,
// as kube-controller-manager's controllers (--use-service-account-credentials) write.
func impersonating(user string) kubernetes.Interface {
	config := rest.CopyConfig(controlPlane.Config)
	config.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	return kubernetes.NewForConfigOrDie(config)
}

// editConfig writes config.yaml through admission and returns the API server's answer.
func editConfig(ctx context.Context, yaml string) error {
	configMaps := controlPlane.Client.CoreV1().ConfigMaps(leasegateNamespace)
	cm, err := configMaps.Get(ctx, "leasegate-config", metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data = map[string]string{"config.yaml": yaml}
	_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// guardedRules are the resources in the rules of guarded.leasegate.io.
func guardedRules(ctx context.Context) []string {
	vwc, err := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	var resources []string
	for _, w := range vwc.Webhooks {
		if w.Name == "guarded.leasegate.io" {
			for _, r := range w.Rules {
				Expect(r.Scope).To(HaveValue(Equal(admissionregistrationv1.NamespacedScope)), "guards fence namespaced writes only")
				for _, resource := range r.Resources {
					resources = append(resources, fmt.Sprintf("%v/%s", r.APIGroups, resource))
				}
			}
		}
	}
	return resources
}

var _ = Describe("What the fence covers", Serial, func() {
	It("refuses a follower's deployments/scale and deployments/status, and admits its status once the guard excludes status", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		grantDeploymentWrites(ctx, ns)
		createDeployment(ctx, ns, "web")
		setConfig(ctx, deploymentGuard(ns, `{group: apps, resources: [deployments]}`))
		Eventually(func() []string { return guardedRules(ctx) }).WithTimeout(5 * time.Second).Should(ContainElement("[apps]/deployments/*"))
		agents := startAgents(ctx, ns, 2, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		follower := others(agents, leader)[0]
		leaderClient, _ := clientFor(leader.Pod.Kubeconfig)
		followerClient, _ := clientFor(follower.Pod.Kubeconfig)

		Eventually(func() error { return scale(ctx, leaderClient, ns, "web", 2) }).Should(Succeed(), "the holder scales")
		err := scale(ctx, followerClient, ns, "web", 5)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(fmt.Sprintf(`admission webhook "guarded.leasegate.io" denied the request: `+
			`leasegate: pod %s/%s (system:serviceaccount:%s:worker) may not update scale of deployments.apps %s/web: `+
			`lease %s/worker is held by %s (guard "worker"): another pod holds the lease`,
			ns, follower.Pod.Name, ns, ns, ns, leader.Pod.Identity())))
		err = writeStatus(ctx, followerClient, ns, "web", 7)
		Expect(err).To(MatchError(ContainSubstring(`may not update status of deployments.apps %s/web`, ns)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(writeStatus(ctx, leaderClient, ns, "web", 2)).To(Succeed(), "the holder writes status")

		By("excluding status: another controller's to write")
		Expect(editConfig(ctx, deploymentGuard(ns, `{group: apps, resources: [deployments], excludeSubresources: [status]}`))).To(Succeed())
		Eventually(func() []string { return guardedRules(ctx) }).WithTimeout(5 * time.Second).Should(And(
			ContainElement("[apps]/deployments/scale"), Not(ContainElement("[apps]/deployments/status")), Not(ContainElement("[apps]/deployments/*"))))
		Eventually(func() error { return writeStatus(ctx, followerClient, ns, "web", 7) }).WithTimeout(5*time.Second).Should(Succeed(), "status is excluded")
		Expect(apierrors.IsForbidden(scale(ctx, followerClient, ns, "web", 5))).To(BeTrue(), "scale stays guarded")
		d, err := controlPlane.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(*d.Spec.Replicas).To(Equal(int32(2)), "only the holder scaled")
	})

	It("refuses a follower's eviction under a guard on deleting pods: an eviction is a delete sent as a CREATE", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		_, err := controlPlane.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "pods"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = controlPlane.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "pods"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pods"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: process.ServiceAccountName}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = controlPlane.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "victim"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		setConfig(ctx, deploymentGuard(ns, `{group: "", resources: [pods], operations: [UPDATE, DELETE]}`))
		// One apply writes every rule of the guard: the eviction's, a CREATE, with pods/*.
		Eventually(func() []string { return guardedRules(ctx) }).WithTimeout(5 * time.Second).Should(ContainElement("[]/pods/*"))
		agents := startAgents(ctx, ns, 2, process.AgentOptions{Timing: fastTiming})
		follower := others(agents, soleLeader(agents))[0]
		followerClient, _ := clientFor(follower.Pod.Kubeconfig)

		err = followerClient.CoreV1().Pods(ns).Delete(ctx, "victim", metav1.DeleteOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a follower's delete: %v", err)
		err = followerClient.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns}})
		Expect(err).To(MatchError(ContainSubstring(`may not create eviction of pods %s/victim`, ns)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		_, err = controlPlane.Client.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the pod is still there")
		Expect(guardedRules(ctx)).To(ContainElement("[]/pods/eviction"), "sent in a CREATE rule of its own")
	})

	It("refuses a guard with group \"*\" at admission, naming the field and the fix", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		setConfig(ctx, deploymentGuard(ns, `{group: apps, resources: [deployments]}`))
		err := editConfig(ctx, deploymentGuard(ns, `{group: "*", resources: [deployments]}`))
		Expect(err).To(MatchError(And(
			ContainSubstring(`admission webhook "config.leasegate.io" denied the request: leasegate-config is invalid and was not saved`),
			ContainSubstring(`guards[0].resources[0].group: Invalid value: "*": wildcards are not supported: name one API group per entry`))))
		Expect(editConfig(ctx, deploymentGuard(ns, `{group: apps, resources: [Deployments]}`))).To(MatchError(ContainSubstring(
			`guards[0].resources[0].resources[0]: Invalid value: "Deployments": must be a resource name as the API serves it, plural and lowercase`)))
	})

	It("refuses a guard on namespaces at admission and in the live configuration, and never fences kube-system's controllers", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web")
		Expect(writeConfigMap(ctx, controlPlane.Client, ns, "state", "admin")).To(Succeed())
		// Every service account is gated: kube-system's are not, unless named.
		everyAccount := fmt.Sprintf(`guards:
- name: everything
  lease: worker
  resources: [{group: apps, resources: [deployments]}, {group: "", resources: [configmaps%s]}]
  namespaces: [%s]
`, "%s", ns)
		setConfig(ctx, fmt.Sprintf(everyAccount, ""))
		Eventually(func() []string { return guardedRules(ctx) }).WithTimeout(5 * time.Second).Should(ContainElement("[apps]/deployments/*"))

		By("kube-system's controllers write the guarded resources unfenced")
		deploymentController := impersonating("system:serviceaccount:kube-system:deployment-controller")
		Expect(writeStatus(ctx, deploymentController, ns, "web", 1)).To(Succeed())
		namespaceController := impersonating("system:serviceaccount:kube-system:namespace-controller")
		Expect(namespaceController.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(Succeed())
		Expect(namespaceController.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{})).To(Succeed())

		By("a guard on namespaces is refused at admission")
		err := editConfig(ctx, fmt.Sprintf(everyAccount, ", namespaces"))
		refused := `guards[0].resources[1].resources[1]: Invalid value: "namespaces": namespaces is cluster-scoped, and a guard fences namespaced resources only`
		Expect(err).To(MatchError(And(ContainSubstring(`admission webhook "config.leasegate.io" denied the request`), ContainSubstring(refused))))

		By("and by the live configuration, when it gets past admission (the config webhook removed)")
		webhooks := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
		vwc, err := webhooks.Get(ctx, "leasegate", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		saved := vwc.DeepCopy()
		vwc.Webhooks = slices.DeleteFunc(vwc.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return w.Name == "config.leasegate.io" })
		_, err = webhooks.Update(ctx, vwc, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			current, err := webhooks.Get(ctx, "leasegate", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			current.Webhooks = saved.Webhooks
			_, err = webhooks.Update(ctx, current, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred())
		})
		Eventually(func() error { return editConfig(ctx, fmt.Sprintf(everyAccount, ", namespaces")) }).WithTimeout(5 * time.Second).Should(Succeed())
		Eventually(func() ([]string, error) {
			events, err := controlPlane.Client.EventsV1().Events(leasegateNamespace).List(ctx, metav1.ListOptions{})
			var notes []string
			for _, e := range events.Items {
				if e.Reason == "InvalidConfig" && e.Regarding.Name == "leasegate-config" {
					notes = append(notes, e.Note)
				}
			}
			return notes, err
		}).WithTimeout(5 * time.Second).Should(ContainElement(ContainSubstring(refused)))
		Consistently(func() []string { return guardedRules(ctx) }).WithTimeout(time.Second).Should(And(
			ContainElement("[]/configmaps/*"), Not(ContainElement(ContainSubstring("namespaces")))), "the last good configuration stays in force")
	})
})
