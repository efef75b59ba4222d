package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/fixtures/guardedwrite"
	"github.com/leasegate/leasegate/test/framework/process"
)

// guardConfig fences ConfigMap writes by service account "worker" in namespace ns with the "worker" lease.
func guardConfig(ns, enforcement, missingPodIdentity string) string {
	return fmt.Sprintf(`election: {clockSkewMargin: 0s}
missingPodIdentity: %s
guards:
- name: worker
  lease: worker
  serviceAccounts: [worker]
  resources: [{group: "", resources: [configmaps]}]
  namespaces: [%s]
  enforcement: %s
`, missingPodIdentity, ns, enforcement)
}

// setConfig puts config.yaml in force and waits until the guarded webhook's rules cover every resource
// its guards name.
func setConfig(ctx context.Context, yaml string) {
	cfg, err := config.Load([]byte(yaml))
	Expect(err).NotTo(HaveOccurred())
	var guarded []any
	for _, g := range cfg.Guards {
		for _, r := range g.Resources {
			for _, resource := range r.Resources {
				guarded = append(guarded, And(HaveField("APIGroups", ContainElement(r.Group)), HaveField("Resources", ContainElement(resource))))
			}
		}
	}
	configMaps := controlPlane.Client.CoreV1().ConfigMaps(leasegateNamespace)
	cm, err := configMaps.Get(ctx, "leasegate-config", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = configMaps.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: map[string]string{"config.yaml": yaml},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			Expect(configMaps.Delete(ctx, "leasegate-config", metav1.DeleteOptions{})).To(Succeed())
		})
	} else {
		Expect(err).NotTo(HaveOccurred())
		cm.Data = map[string]string{"config.yaml": yaml}
		_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	Eventually(func(g Gomega) {
		vwc, err := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leasegate", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(vwc.Webhooks[0].Rules).To(ContainElements(guarded...))
	}).WithTimeout(5 * time.Second).Should(Succeed())
}

// warnings collects the warnings the API server returns to a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// clientFor authenticates with a kubeconfig, collecting warnings.
func clientFor(kubeconfig string) (kubernetes.Interface, *warnings) {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	w := &warnings{}
	config.WarningHandler = w
	config.QPS, config.Burst = 1000, 1000
	return kubernetes.NewForConfigOrDie(config), w
}

// webhookMetrics scrapes leasegate-webhook's /metrics.
func webhookMetrics() (string, error) {
	resp, err := http.Get(webhook.MetricsURL)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// writeConfigMap is the workload's guarded write.
var writeConfigMap = guardedwrite.ConfigMap

// deniedEvents lists the LeaderGateDenied Events in namespace.
func deniedEvents(ctx context.Context, namespace string) []string {
	events, err := controlPlane.Client.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	var notes []string
	for _, e := range events.Items {
		if e.Reason == "LeaderGateDenied" {
			related := "none"
			if e.Related != nil {
				related = e.Related.Kind + "/" + e.Related.Name
			}
			notes = append(notes, e.Regarding.Kind+"/"+e.Regarding.Name+" "+e.Action+": "+e.Note+" [related "+related+"]")
		}
	}
	return notes
}

// fencedAgents starts n agents in a new namespace whose ConfigMap writes a deny guard fences, and returns
// the namespace, the agents, the leader and a follower.
func fencedAgents(ctx context.Context, n int) (ns string, agents []*process.Agent, leader, follower *process.Agent) {
	ns = newNamespace(ctx)
	setConfig(ctx, guardConfig(ns, "deny", "deny"))
	agents = startAgents(ctx, ns, n, process.AgentOptions{Timing: fastTiming})
	leader = soleLeader(agents)
	return ns, agents, leader, others(agents, leader)[0]
}

var _ = Describe("The fence", Serial, func() {
	It("admits the leader's writes and denies a follower's with a 403 naming requester, lease and holder, and an Event", func(ctx SpecContext) {
		ns, _, leader, follower := fencedAgents(ctx, 3)
		leaderClient, _ := clientFor(leader.Pod.Kubeconfig)
		Eventually(func() error { return writeConfigMap(ctx, leaderClient, ns, "state", leader.Pod.Name) }).Should(Succeed())
		followerClient, _ := clientFor(follower.Pod.Kubeconfig)
		err := writeConfigMap(ctx, followerClient, ns, "state", follower.Pod.Name)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(fmt.Sprintf(`admission webhook "guarded.leasegate.io" denied the request: `+
			`leasegate: pod %s/%s (system:serviceaccount:%s:worker) may not update configmaps %s/state: `+
			`lease %s/worker is held by %s (guard "worker"): another pod holds the lease`,
			ns, follower.Pod.Name, ns, ns, ns, leader.Pod.Identity())))

		Eventually(func() []string { return deniedEvents(ctx, ns) }).WithTimeout(5 * time.Second).Should(ContainElement(And(
			HavePrefix("ConfigMap/state Deny: "), ContainSubstring(follower.Pod.Name), ContainSubstring(leader.Pod.Identity()),
			HaveSuffix("[related Pod/"+follower.Pod.Name+"]"))))
		Eventually(webhookMetrics).Should(ContainSubstring(`leasegate_fence_decisions_total{guard="worker",outcome="denied",reason="held_by_another",webhook="guarded"}`))
	})

	It("judges a lease leasegate provisioned and one it did not make alike, also while its label changes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// As the injector provisions it: labelled, unheld. The agents take it, keeping the label.
		_, err := controlPlane.Client.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: leaseName, Labels: map[string]string{contract.Managed: "true"}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		setConfig(ctx, guardConfig(ns, "deny", "deny"))
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		follower := others(agents, leader)[0]
		leaderClient, _ := clientFor(leader.Pod.Kubeconfig)
		followerClient, _ := clientFor(follower.Pod.Kubeconfig)
		fenced := func(g Gomega) {
			g.Expect(writeConfigMap(ctx, leaderClient, ns, "state", leader.Pod.Name)).To(Succeed(), "the holder's write")
			g.Expect(apierrors.IsForbidden(writeConfigMap(ctx, followerClient, ns, "state", follower.Pod.Name))).To(BeTrue(), "a follower's write")
		}
		Eventually(fenced).Should(Succeed())
		Expect(getLease(ctx, ns).Labels).To(HaveKeyWithValue(contract.Managed, "true"), "a lease leasegate provisioned")

		By("unlabelling the lease, as if another controller had made it: judged throughout")
		unlabel := []byte(`{"metadata":{"labels":{"` + contract.Managed + `":null}}}`)
		_, err = controlPlane.Client.CoordinationV1().Leases(ns).Patch(ctx, leaseName, types.MergePatchType, unlabel, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Consistently(fenced).WithTimeout(2 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

		By("labelling it again")
		relabel := []byte(`{"metadata":{"labels":{"` + contract.Managed + `":"true"}}}`)
		_, err = controlPlane.Client.CoordinationV1().Leases(ns).Patch(ctx, leaseName, types.MergePatchType, relabel, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Consistently(fenced).WithTimeout(2 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	})

	It("denies a frozen leader's writes once another pod took over, and the resumed agent steps down", func(ctx SpecContext) {
		ns, agents, stale, _ := fencedAgents(ctx, 3)
		staleClient, _ := clientFor(stale.Pod.Kubeconfig)
		Eventually(func() error { return writeConfigMap(ctx, staleClient, ns, "state", stale.Pod.Name) }).Should(Succeed())

		Expect(stale.Signal(syscall.SIGSTOP)).To(Succeed())
		next, _ := timeUntilOneLeads(others(agents, stale), time.Now(), 10*time.Second)
		err := writeConfigMap(ctx, staleClient, ns, "state", stale.Pod.Name)
		Expect(err).To(MatchError(ContainSubstring("lease %s/worker is held by %s", ns, next.Pod.Identity())))

		Expect(stale.Signal(syscall.SIGCONT)).To(Succeed())
		expectSteppedDown(stale, next)
	})

	It("applies missingPodIdentity, exemptions, and warn and dryrun enforcement, switching live", func(ctx SpecContext) {
		ns, _, _, follower := fencedAgents(ctx, 2)
		followerClient, followerWarnings := clientFor(follower.Pod.Kubeconfig)
		Expect(writeConfigMap(ctx, controlPlane.Client, ns, "state", "admin")).To(Succeed())

		unbound, err := controlPlane.UnboundToken(ctx, ns, "worker", GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		legacyClient, legacyWarnings := clientFor(unbound)
		Eventually(func() error { return writeConfigMap(ctx, legacyClient, ns, "legacy", "legacy") }).Should(
			MatchError(ContainSubstring("the requester has no pod identity")), "missingPodIdentity: deny")
		Expect(writeConfigMap(ctx, controlPlane.Client, ns, "admin", "admin")).To(Succeed(), "system:masters is exempt")

		setConfig(ctx, guardConfig(ns, "warn", "warn"))
		Eventually(func() error { return writeConfigMap(ctx, legacyClient, ns, "legacy", "legacy") }).Should(Succeed())
		Expect(legacyWarnings.all()).To(ContainElement(HavePrefix("leasegate warned:")))
		Eventually(func() error { return writeConfigMap(ctx, followerClient, ns, "state", follower.Pod.Name) }).Should(Succeed())
		Expect(followerWarnings.all()).To(ContainElement(HavePrefix("leasegate warned: not the holder of lease " + ns + "/worker")))
		for _, w := range followerWarnings.all() {
			Expect(len(w)).To(BeNumerically("<=", 120), "a warning the API server passes on unchanged: %q", w)
		}
		Eventually(func() []string { return deniedEvents(ctx, ns) }).WithTimeout(5 * time.Second).Should(
			ContainElement(HavePrefix("ConfigMap/state Warn: ")))
		Expect(deniedEvents(ctx, ns)).To(ContainElement(HavePrefix("Namespace/"+ns+" Warn: ")), "a CREATE is recorded on the namespace")

		setConfig(ctx, guardConfig(ns, "dryrun", "deny"))
		Eventually(func() []string {
			_ = writeConfigMap(ctx, followerClient, ns, "state", follower.Pod.Name)
			return deniedEvents(ctx, ns)
		}).WithTimeout(5 * time.Second).Should(ContainElement(HavePrefix("ConfigMap/state DryRun: ")))
		Expect(writeConfigMap(ctx, followerClient, ns, "state", follower.Pod.Name)).To(Succeed(), "dryrun admits")

		setConfig(ctx, guardConfig(ns, "deny", "deny"))
		Eventually(func() error { return writeConfigMap(ctx, followerClient, ns, "state", follower.Pod.Name) }).
			WithTimeout(time.Second).Should(MatchError(ContainSubstring("another pod holds the lease")), "back to deny, live within a second")
	})

	It("never lets a follower write another pod's identity into a managed Lease or take an unexpired one", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 2, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		follower := others(agents, leader)[0]
		leases := controlPlane.Client.CoordinationV1().Leases(ns)
		l, err := leases.Get(ctx, "worker", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		l.Labels = map[string]string{"leasegate.io/managed": "true"}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		followerClient, _ := clientFor(follower.Pod.Kubeconfig)
		attempt := func(holder string) error {
			l, err := followerClient.CoordinationV1().Leases(ns).Get(ctx, "worker", metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.HolderIdentity = ptr.To(holder)
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = followerClient.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}
		Eventually(func() error { return attempt(follower.Pod.Identity()) }).Should(MatchError(ContainSubstring(
			`admission webhook "leases.leasegate.io" denied the request`)))
		Expect(attempt(follower.Pod.Identity())).To(MatchError(ContainSubstring("the lease is held by another pod and has not expired")))
		Expect(attempt(leader.Pod.Identity())).To(MatchError(ContainSubstring("a pod may write only its own identity as the holder")))
		Expect(attempt("")).To(MatchError(ContainSubstring("only the holder may renew or release the lease")))
		// Deleting is refused by RBAC before the guard (which refuses it too: unit-tested).
		Expect(apierrors.IsForbidden(followerClient.CoordinationV1().Leases(ns).Delete(ctx, "worker", metav1.DeleteOptions{}))).To(BeTrue())

		Consistently(leader.IsLeader).WithTimeout(2*time.Second).Should(BeTrue(), "the leader renews through the guard undisturbed")
		Expect(leader.Signal(syscall.SIGTERM)).To(Succeed())
		next, _ := timeUntilOneLeads([]*process.Agent{follower}, time.Now(), 5*time.Second)
		Expect(next).To(Equal(follower), "release and takeover pass the guard")
	})

	It("admits no write from a non-holder among 1,000 attempts over 20 leadership changes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		setConfig(ctx, guardConfig(ns, "deny", "deny"))
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		soleLeader(agents)
		holder := watchLeaseOf(ctx, ns)

		var attempts, admitted, ambiguous atomic.Int64
		var violations []string
		var mu sync.Mutex
		stop := make(chan struct{})
		var writers sync.WaitGroup
		for _, a := range agents {
			c, _ := clientFor(a.Pod.Kubeconfig)
			writers.Add(1)
			go func() {
				defer writers.Done()
				defer GinkgoRecover()
				for {
					select {
					case <-stop:
						return
					default:
					}
					before := holder.Holder()
					err := writeConfigMap(ctx, c, ns, "race-"+a.Pod.Name, a.Pod.Name)
					// This watch and the webhook's cache see a change of holder a few milliseconds
					// apart; looking again after a pause classes every attempt near a change as one.
					time.Sleep(20 * time.Millisecond)
					after := holder.Holder()
					attempts.Add(1)
					if err == nil {
						admitted.Add(1)
					}
					switch {
					case before != after:
						ambiguous.Add(1) // the lease changed hands around the attempt
					case err == nil && before != a.Pod.Identity():
						mu.Lock()
						violations = append(violations, fmt.Sprintf("%s wrote while %s held the lease", a.Pod.Name, before))
						mu.Unlock()
					}
				}
			}()
		}
		for change := range 20 {
			failOver(ctx, agents, syscall.SIGTERM)
			if change < 19 || attempts.Load() < 1000 {
				time.Sleep(150 * time.Millisecond)
			}
		}
		Eventually(attempts.Load).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 1000))
		close(stop)
		writers.Wait()
		GinkgoWriter.Printf("%d attempts, %d admitted, %d during a change of holder\n", attempts.Load(), admitted.Load(), ambiguous.Load())
		Expect(violations).To(BeEmpty())
		Expect(admitted.Load()).To(BeNumerically(">", 100), "the holders' writes pass")
	})
})

var _ rest.WarningHandler = (*warnings)(nil)
