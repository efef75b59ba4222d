package e2e

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/leaderservice"
	"github.com/leasegate/leasegate/test/framework/observe"
	"github.com/leasegate/leasegate/test/framework/process"
)

var _ = Describe("A leader Service", func() {
	It("routes <service>-leader to the lease holder only, follows handovers, and refuses forged endpoints", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		var pods []*corev1.Pod
		for i := range 3 {
			spec := deploymentPod(ns)
			spec.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
			pod, err := createPod(ctx, spec, false)
			Expect(err).NotTo(HaveOccurred())
			ip := fmt.Sprintf("10.244.0.%d", 10+i)
			pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
			markReady(ctx, pod)
			pods = append(pods, pod)
		}
		services := controlPlane.Client.CoreV1().Services(ns)
		_, err := services.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "orders", Labels: map[string]string{contract.LeaderLease: "orders"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": "orders"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		routes, err := observe.WatchRoutes(ctx, controlPlane.Client, ns, "orders", "orders-leader")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(routes.Stop)
		agents := startInjectedAgents(ctx, pods)

		routedTo := func(g Gomega) string {
			slice, err := controlPlane.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "orders-leader", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(slice.Endpoints).To(HaveLen(1))
			g.Expect(slice.Ports).To(ConsistOf(HaveField("Port", ptr.To[int32](8080))), "the named target port, resolved on the holder")
			return slice.Endpoints[0].TargetRef.Name
		}
		By("creating the companion Service, without a selector, and its slice on the holder")
		leader := soleLeader(agents)
		Eventually(routedTo).WithTimeout(10 * time.Second).Should(Equal(leader.Pod.Name))
		companion, err := services.Get(ctx, "orders-leader", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(companion.Spec.Selector).To(BeEmpty())
		Expect(companion.OwnerReferences).To(ConsistOf(HaveField("Name", "orders")))

		By("following five handovers")
		leases := controlPlane.Client.CoordinationV1().Leases(ns)
		for range 5 {
			l, err := leases.Get(ctx, "orders", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverFrom, *l.Spec.HolderIdentity)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred())
			// The leader, which watches nothing, sees the request at its next renewal: within a retry period.
			Eventually(func() *process.Agent { return soleLeader(agents) }).WithTimeout(5 * time.Second).ShouldNot(Equal(leader))
			leader = soleLeader(agents)
			Eventually(routedTo).WithTimeout(10 * time.Second).Should(Equal(leader.Pod.Name))
		}
		By("dropping the endpoint when the holder releases on SIGTERM and nobody else is left")
		for _, a := range others(agents, leader) {
			a.Stop()
		}
		leader.Terminate(2 * time.Second)
		Eventually(func(g Gomega) []discoveryv1.Endpoint {
			slice, err := controlPlane.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "orders-leader", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			return slice.Endpoints
		}).WithTimeout(10 * time.Second).Should(BeEmpty())

		report := routes.Report()
		Expect(report.Violations).To(BeEmpty(), "the slice was written to route to a pod that did not hold the lease")
		Expect(report.Lags).To(HaveLen(6), "one routing per holder: the first and five handovers")
		GinkgoWriter.Printf("routing lag from the lease's new holder to the slice: %s; old holder still routed after it lost the lease: %s\n",
			medianMax(report.Lags), medianMax(report.Stale))

		By("refusing a write to the slice from anyone but leasegate, even with RBAC to write slices")
		_, err = controlPlane.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "slice-writer"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "create", "update"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = controlPlane.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "slice-writer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "slice-writer"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "mallory"}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		config := rest.CopyConfig(controlPlane.Config)
		config.Impersonate = rest.ImpersonationConfig{UserName: "mallory"}
		mallory := kubernetes.NewForConfigOrDie(config).DiscoveryV1().EndpointSlices(ns)
		forged := func(name, service string) *discoveryv1.EndpointSlice {
			return &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.99"}}},
			}
		}
		Eventually(func() error {
			_, err := mallory.Create(ctx, forged("orders-leader-extra", "orders-leader"), metav1.CreateOptions{})
			return err
		}).WithTimeout(5 * time.Second).Should(MatchError(ContainSubstring("only leasegate writes the endpoints of a <service>-leader Service")))
		slice, err := mallory.Get(ctx, "orders-leader", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		slice.Endpoints = forged("", "").Endpoints
		_, err = mallory.Update(ctx, slice, metav1.UpdateOptions{})
		Expect(err).To(MatchError(ContainSubstring(`admission webhook "endpointslices.leasegate.io" denied the request`)))
		slice.Labels[discoveryv1.LabelServiceName] = "elsewhere"
		_, err = mallory.Update(ctx, slice, metav1.UpdateOptions{})
		Expect(err).To(HaveOccurred(), "relabelling the slice away from its Service is refused too (the old object names it)")
		_, err = mallory.Create(ctx, forged("web-leader-1", "web-leader"), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "a Service that merely ends in -leader is not leasegate's")

		By("removing the companion when the Service opts out")
		svc, err := services.Get(ctx, "orders", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		delete(svc.Labels, contract.LeaderLease)
		_, err = services.Update(ctx, svc, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool {
			_, err := services.Get(ctx, "orders-leader", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(10 * time.Second).Should(BeTrue())
	})
})

var _ = Describe("A leader Service opted in after someone else routed its name", func() {
	It("removes every slice of <service>-leader that leasegate did not write, makes a lookalike Service its companion, and refuses new slices", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		mallory := sliceWriter(ctx, ns, "mallory")
		forged := func(name, managedBy string) *discoveryv1.EndpointSlice {
			return &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
					discoveryv1.LabelServiceName: "orders-leader", discoveryv1.LabelManagedBy: managedBy,
				}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.99"}}},
			}
		}

		By("before the opt-in: slices routing <service>-leader to an address mallory chose, then a lookalike companion with a selector")
		for _, slice := range []*discoveryv1.EndpointSlice{
			forged("orders-leader", "mallory"),
			forged("orders-leader-abcde", "endpointslice-controller.k8s.io"), // the endpoint controller's label, which nothing cleans on a selectorless Service
			forged("orders-leader-fghij", leaderservice.ManagedBy),           // leasegate's label, under another name
		} {
			_, err := mallory.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred(), "nothing is leasegate's yet: %s", slice.Name)
		}

		// Once a Service carries leasegate's labels, its slices are refused too: it is made last. Only
		// leasegate marks a Service as a companion, so mallory is refused; one made past the webhook (while
		// it was down, or before leasegate was installed) is played by a cluster admin's.
		lookalike := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "orders-leader", Labels: map[string]string{contract.LeaderLease: "orders", contract.LeaderOf: "orders"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": "orders"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}
		_, err := mallory.CoreV1().Services(ns).Create(ctx, lookalike, metav1.CreateOptions{})
		Expect(err).To(MatchError(ContainSubstring("only leasegate marks a Service as a <service>-leader companion")))
		_, err = controlPlane.Client.CoreV1().Services(ns).Create(ctx, lookalike, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("opting the Service in")
		_, err = controlPlane.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "orders", Labels: map[string]string{contract.LeaderLease: "orders"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": "orders"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		slices := controlPlane.Client.DiscoveryV1().EndpointSlices(ns)
		Eventually(func(g Gomega) {
			list, err := slices.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=orders-leader"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(HaveLen(1), "the companion carries leasegate's slice only")
			g.Expect(list.Items[0].Name).To(Equal("orders-leader"))
			g.Expect(list.Items[0].Labels).To(HaveKeyWithValue(discoveryv1.LabelManagedBy, leaderservice.ManagedBy))
			g.Expect(list.Items[0].Endpoints).To(BeEmpty(), "nobody holds the lease: no endpoint, and not mallory's")
		}).WithTimeout(10 * time.Second).Should(Succeed())
		companion, err := controlPlane.Client.CoreV1().Services(ns).Get(ctx, "orders-leader", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(companion.Spec.Selector).To(BeEmpty(), "the endpoint controller would route a selector's pods")
		Expect(companion.OwnerReferences).To(ConsistOf(HaveField("Name", "orders")))

		By("refusing a new slice for the companion, under any name and labels")
		for _, slice := range []*discoveryv1.EndpointSlice{forged("orders-leader-klmno", "mallory"), forged("orders-leader-pqrst", leaderservice.ManagedBy)} {
			_, err := mallory.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
			Expect(err).To(MatchError(ContainSubstring("only leasegate writes the endpoints of a <service>-leader Service")), slice.Name)
		}

		By("refusing to take the companion from leasegate: unmarked and given the workload's selector, it would route every replica")
		takes := map[string]func(*corev1.Service){
			"unmarked":         func(s *corev1.Service) { delete(s.Labels, contract.LeaderOf) },
			"given a selector": func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app.kubernetes.io/name": "orders"} },
			"both in one write": func(s *corev1.Service) {
				delete(s.Labels, contract.LeaderOf)
				s.Spec.Selector = map[string]string{"app.kubernetes.io/name": "orders"}
			},
			"pointed at a NodePort": func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
		}
		for what, take := range takes {
			svc, err := mallory.CoreV1().Services(ns).Get(ctx, "orders-leader", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			take(svc)
			_, err = mallory.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring(`admission webhook "services.leasegate.io" denied the request`)), what)
		}
		Expect(controlPlane.Client.RbacV1().Roles(ns).Delete(ctx, "mallory", metav1.DeleteOptions{})).To(Succeed())
		grantServiceDeletes(ctx, ns, "mallory")
		Expect(mallory.CoreV1().Services(ns).Delete(ctx, "orders-leader", metav1.DeleteOptions{})).
			To(MatchError(ContainSubstring(`admission webhook "services.leasegate.io" denied the request`)), "a delete would free the name for an unmarked lookalike")
		svc, err := mallory.CoreV1().Services(ns).Get(ctx, "orders-leader", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		metav1.SetMetaDataAnnotation(&svc.ObjectMeta, "team", "payments")
		_, err = mallory.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred(), "the companion's annotations are anyone's")
	})
})

// grantServiceDeletes gives user of namespace what sliceWriter does, and Service deletes too.
func grantServiceDeletes(ctx context.Context, namespace, user string) {
	_, err := controlPlane.Client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "create", "update"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "create", "update", "delete"}},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(process.WaitUntilAllowed(ctx, controlPlane.Client, user, []string{"system:authenticated"},
		authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "delete", Resource: "services"})).To(Succeed())
}

// sliceWriter is a user of namespace who may write Services and EndpointSlices there, and nothing else.
func sliceWriter(ctx context.Context, namespace, user string) kubernetes.Interface {
	_, err := controlPlane.Client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "create", "update"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "create", "update"}},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = controlPlane.Client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	config := rest.CopyConfig(controlPlane.Config)
	config.Impersonate = rest.ImpersonationConfig{UserName: user}
	// An impersonated user is authenticated with the group every authenticated user has.
	Expect(process.WaitUntilAllowed(ctx, controlPlane.Client, user, []string{"system:authenticated"},
		authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices"})).To(Succeed())
	return kubernetes.NewForConfigOrDie(config)
}

// medianMax formats durations as "median m, max x".
func medianMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return fmt.Sprintf("median %s, max %s (%d)", sorted[len(sorted)/2].Round(100*time.Microsecond), sorted[len(sorted)-1].Round(100*time.Microsecond), len(sorted))
}
