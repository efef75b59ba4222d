package e2e

import (
	"fmt"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/test/framework/process"
)

// twoElections are a fast election, its timing derived from a 3 s takeover objective (lease duration 2 s
// with the 1 s clock skew margin), and a slow one with explicit timing: budgets of 3 s and 7 s.
var twoElections = map[string]struct {
	lease  string
	budget time.Duration
}{
	"fast": {"orders-fast", 3 * time.Second},
	"slow": {"orders-slow", 7 * time.Second},
}

const twoElectionsAnnotation = `fast: {takeover: 3s}
slow: {leaseDuration: 6s, renewDeadline: 4s, retryPeriod: 1s}
`

// holderOfElection asks every agent about election and returns the one that claims it, failing while not exactly
// one does.
func holderOfElection(g Gomega, agents []*process.Agent, election string) *process.Agent {
	var claiming []*process.Agent
	for _, a := range agents {
		s, err := a.Election(election)
		g.Expect(err).NotTo(HaveOccurred())
		if s.IsLeader {
			claiming = append(claiming, a)
		}
	}
	g.Expect(claiming).To(HaveLen(1), "exactly one agent leads election %s", election)
	return claiming[0]
}

var _ = Describe("Several elections in one pod", Serial, func() {
	It("elect independently, each moving within its own budget when its holder dies, and a guard fences by its own lease", func(ctx SpecContext) {
		ns := labelledNamespace(ctx, optedIn)
		// The timing below depends on the clock skew margin: 1 s, whatever an earlier spec left.
		setConfig(ctx, fmt.Sprintf(`election: {clockSkewMargin: 1s}
guards:
- name: slow-writes
  lease: orders-slow
  serviceAccounts: [orders]
  resources: [{group: "", resources: [configmaps]}]
  namespaces: [%s]
`, ns))
		var pods []*corev1.Pod
		for range 3 {
			spec := deploymentPod(ns)
			spec.Annotations = map[string]string{"leasegate.io/elections": twoElectionsAnnotation}
			pod, err := createPod(ctx, spec, false)
			Expect(err).NotTo(HaveOccurred())
			pods = append(pods, pod)
		}
		By("injecting one agent that runs both elections, and provisioning update rights on exactly their two leases")
		Expect(pods[0].Annotations["leasegate.io/status"]).To(ContainSubstring(`"leases":["orders-fast","orders-slow"]`))
		Expect(pods[0].Spec.InitContainers[0].Env).To(ContainElement(HaveField("Name", "LEASEGATE_ELECTIONS")))
		Expect(pods[0].Spec.Containers[0].Env).To(ContainElements(
			corev1.EnvVar{Name: "LEASEGATE_LEASE_FAST", Value: "orders-fast"}, corev1.EnvVar{Name: "LEASEGATE_LEASE_SLOW", Value: "orders-slow"}))
		Eventually(func() bool {
			return canUpdateLease(ctx, ns, "orders", "orders-fast") && canUpdateLease(ctx, ns, "orders", "orders-slow")
		}).WithTimeout(10 * time.Second).Should(BeTrue())
		Expect(canUpdateLease(ctx, ns, "orders", "orders")).To(BeFalse(), "no right on a lease the pod does not use")

		agents := startInjectedAgents(ctx, pods)

		By("electing exactly one leader per election, with each election's own timing in its Lease")
		holders := map[string]*process.Agent{}
		Eventually(func(g Gomega) {
			for election := range twoElections {
				holders[election] = holderOfElection(g, agents, election)
			}
		}).WithTimeout(20 * time.Second).Should(Succeed())
		for election, e := range twoElections {
			l, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, e.lease, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(ptr.Deref(l.Spec.HolderIdentity, "")).To(Equal(holders[election].Pod.Identity()))
			Expect(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)).To(BeEquivalentTo((e.budget - time.Second) / time.Second))
		}
		_, code, err := agents[0].Get("/leaderz/nonexistent")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(404))

		By("fencing ConfigMap writes by the slow election's lease alone")
		Expect(process.GrantConfigMapWrites(ctx, controlPlane.Client, ns, "orders")).To(Succeed())
		for _, a := range agents {
			client, _ := clientFor(a.Pod.Kubeconfig)
			err := writeConfigMap(ctx, client, ns, "state", a.Pod.Name)
			if a == holders["slow"] {
				Eventually(func() error { return writeConfigMap(ctx, client, ns, "state", a.Pod.Name) }).Should(Succeed())
			} else {
				Expect(err).To(MatchError(ContainSubstring("lease %s/orders-slow is held by %s", ns, holders["slow"].Pod.Identity())),
					"leading election fast (%v) gives no right to act for slow", a == holders["fast"])
			}
		}

		By("killing the fast election's holder: the elections it held move, each within its own budget; the others stay")
		victim := holders["fast"]
		Expect(victim.Signal(syscall.SIGKILL)).To(Succeed())
		killed := time.Now()
		var survivors []*process.Agent
		for _, a := range agents {
			if a != victim {
				survivors = append(survivors, a)
			}
		}
		moved := map[string]time.Duration{}
		Eventually(func(g Gomega) {
			for election := range twoElections {
				if _, done := moved[election]; done || holders[election] != victim {
					continue
				}
				next := holderOfElection(g, survivors, election)
				moved[election] = time.Since(killed)
				holders[election] = next
			}
			for election := range twoElections {
				if holders[election] == victim {
					g.Expect(moved).To(HaveKey(election), "election %s has moved", election)
				}
			}
		}).WithTimeout(15 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		for election, took := range moved {
			budget := twoElections[election].budget
			GinkgoWriter.Printf("election %s moved %s after the kill (budget %s)\n", election, took, budget)
			Expect(took).To(BeNumerically("<=", budget+time.Second), "election %s moved within its budget (+1 s for the kill landing anywhere in the renewal cycle and polling)", election)
		}
		if len(moved) == 2 {
			Expect(moved["fast"]).To(BeNumerically("<", moved["slow"]), "the fast election moved first: each on its own timing")
		} else {
			Consistently(func(g Gomega) *process.Agent { return holderOfElection(g, survivors, "slow") }).
				WithTimeout(twoElections["slow"].budget).Should(Equal(holders["slow"]), "an election the dead pod did not hold keeps its holder")
		}
	})
})

var _ = Describe("The webhook's leaderless report", func() {
	It("names a managed lease nobody took within its own budget, and not one that is held", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		leases := controlPlane.Client.CoordinationV1().Leases(ns)
		managed := map[string]string{"leasegate.io/managed": "true"}
		for name, duration := range map[string]int32{"abandoned": 4, "healthy": 60} {
			_, err := leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managed},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To("gone_1"), LeaseDurationSeconds: ptr.To(duration),
					RenewTime: &metav1.MicroTime{Time: time.Now().Add(-30 * time.Second)},
				},
			}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		series := func(lease string) string {
			return fmt.Sprintf(`leasegate_lease_leaderless_seconds{lease="%s",namespace="%s"}`, lease, ns)
		}
		Eventually(webhookMetrics).WithTimeout(15*time.Second).Should(And(ContainSubstring(series("abandoned")), Not(ContainSubstring(series("healthy")))),
			"abandoned: renewed 30 s ago for 4 s, free for 25 s, past its 5 s budget; healthy: still held for 30 s")
	})
})
