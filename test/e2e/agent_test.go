package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/observe"
	"github.com/leasegate/leasegate/test/framework/process"
	"github.com/leasegate/leasegate/test/framework/relay"
)

// fastTiming keeps failover specs short while keeping the proportions of the defaults.
var fastTiming = lease.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}

const leaseName = "worker"

// startAgents creates a pod with a pod-bound token for each agent and starts the agent binary as that
// pod. servers, when given, is the API server address each agent's kubeconfig uses.
func startAgents(ctx context.Context, namespace string, n int, opts process.AgentOptions, servers ...string) []*process.Agent {
	dir := GinkgoT().TempDir()
	agents := make([]*process.Agent, n)
	for i := range agents {
		server := ""
		if i < len(servers) {
			server = servers[i]
		}
		pod, err := controlPlane.CreatePod(ctx, namespace, fmt.Sprintf("worker-%d", i), dir, server)
		Expect(err).NotTo(HaveOccurred())
		agents[i] = startAgent(pod, opts)
	}
	return agents
}

func startAgent(pod *process.Pod, opts process.AgentOptions) *process.Agent {
	agent, err := process.StartAgent(agentBinary, pod, leaseName, opts)
	Expect(err).NotTo(HaveOccurred())
	stopAtCleanup(agent)
	return agent
}

// stopAtCleanup stops agent when the spec ends, reporting its logs if the spec failed.
func stopAtCleanup(agent *process.Agent) {
	DeferCleanup(func() {
		agent.Stop()
		if CurrentSpecReport().Failed() {
			AddReportEntry("logs of "+agent.Pod.Name, agent.Logs())
		}
	})
}

// soleLeader waits until exactly one agent claims leadership, all agree on its identity, and returns it.
func soleLeader(agents []*process.Agent) *process.Agent {
	var leader *process.Agent
	Eventually(func(g Gomega) {
		leader = nil
		for _, a := range agents {
			s, err := a.Leader()
			g.Expect(err).NotTo(HaveOccurred())
			if s.IsLeader {
				g.Expect(leader).To(BeNil(), "two agents claim leadership")
				leader = a
			}
		}
		g.Expect(leader).NotTo(BeNil(), "no agent leads yet")
		for _, a := range agents {
			s, err := a.Leader()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Holder).To(Equal(leader.Pod.Identity()), "agent %s disagrees about the holder", a.Pod.Name)
		}
	}).WithTimeout(15 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	return leader
}

func others(agents []*process.Agent, except *process.Agent) []*process.Agent {
	var rest []*process.Agent
	for _, a := range agents {
		if a != except {
			rest = append(rest, a)
		}
	}
	return rest
}

// timeUntilOneLeads measures how long after since one of the agents claims leadership.
func timeUntilOneLeads(agents []*process.Agent, since time.Time, timeout time.Duration) (*process.Agent, time.Duration) {
	next, err := process.FirstToLead(agents, timeout)
	Expect(err).NotTo(HaveOccurred())
	return next, time.Since(since)
}

// failOver stops the sole leader with sig, waits until another agent leads, and restarts the stopped
// pod's agent with the same identity, as kubelet restarts a container; agents is updated in place.
func failOver(ctx context.Context, agents []*process.Agent, sig syscall.Signal) (stopped, restarted *process.Agent) {
	stopped = soleLeader(agents)
	Expect(stopped.Signal(sig)).To(Succeed())
	Expect(stopped.WaitExit(ctx, 2*time.Second)).To(BeTrue())
	soleLeader(others(agents, stopped))
	restarted = startAgent(stopped.Pod, process.AgentOptions{Timing: fastTiming})
	for i := range agents {
		if agents[i] == stopped {
			agents[i] = restarted
		}
	}
	return stopped, restarted
}

// expectSteppedDown checks a leader resumed after a freeze: from its first answer it must not claim
// leadership, since its claim ran out at its renew deadline whether or not its loop has run since, and it
// soon names the new holder.
func expectSteppedDown(stale, next *process.Agent) {
	Consistently(stale.IsLeader).WithTimeout(time.Second).WithPolling(5 * time.Millisecond).Should(BeFalse())
	Eventually(func() (string, error) {
		s, err := stale.Leader()
		return s.Holder, err
	}).Should(Equal(next.Pod.Identity()))
}

func getLease(ctx context.Context, namespace string) *coordinationv1.Lease {
	l, err := controlPlane.Client.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return l
}

var _ = Describe("The leader agent", func() {
	It("elects exactly one leader among three agents and names it <pod>_<uid> in the Lease, /leader, /metrics and the status file", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		statusDir := GinkgoT().TempDir()
		dir := GinkgoT().TempDir()
		var agents []*process.Agent
		for i := range 3 {
			pod, err := controlPlane.CreatePod(ctx, ns, fmt.Sprintf("worker-%d", i), dir, "")
			Expect(err).NotTo(HaveOccurred())
			agents = append(agents, startAgent(pod, process.AgentOptions{
				Timing: fastTiming, StatusFile: filepath.Join(statusDir, pod.Name+".json"),
			}))
		}
		leader := soleLeader(agents)

		l := getLease(ctx, ns)
		Expect(*l.Spec.HolderIdentity).To(Equal(leader.Pod.Name + "_" + leader.Pod.UID))
		Expect(*l.Spec.LeaseDurationSeconds).To(BeEquivalentTo(3))

		for _, a := range agents {
			want := 0.0
			if a == leader {
				want = 1
			}
			Eventually(func() (float64, error) { return a.Metric("leasegate_agent_is_leader") }).Should(Equal(want))
			// The runtime settings an agent that only elects makes when the environment leaves them unset.
			Expect(a.Metric("go_sched_gomaxprocs_threads")).To(Equal(1.0))
			Expect(a.Metric("go_gc_gogc_percent")).To(Equal(25.0))
			Expect(a.Metric("go_gc_gomemlimit_bytes")).To(Equal(10.0 * (1 << 20)))
			Eventually(func() (string, error) {
				data, err := os.ReadFile(filepath.Join(statusDir, a.Pod.Name+".json"))
				return string(data), err
			}).Should(And(
				ContainSubstring(`"holder":%q`, leader.Pod.Identity()),
				ContainSubstring(`"isLeader":%t`, a == leader)))

			Eventually(func(g Gomega) {
				body, code, err := a.Get("/readyz")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), "readiness is health by default: followers stay Ready")
				g.Expect(string(body)).To(ContainSubstring(leader.Pod.Name))
			}).Should(Succeed())
		}
		Expect(leader.Logs()).To(ContainSubstring(`msg="Started leading" lease=%s/%s holder=%s`, ns, leaseName, leader.Pod.Identity()))
	})

	It("hands over within a second of SIGTERM, exits 0, and the Lease records the release", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)

		holders := watchLeaseOf(ctx, ns)
		signalled := time.Now()
		Expect(leader.Signal(syscall.SIGTERM)).To(Succeed())
		next, handover := timeUntilOneLeads(others(agents, leader), signalled, 5*time.Second)
		GinkgoWriter.Printf("graceful handover took %s\n", handover)
		Expect(handover).To(BeNumerically("<", time.Second))

		Expect(leader.WaitExit(ctx, time.Second)).To(BeTrue(), "the agent must exit within a second of SIGTERM")
		Expect(leader.ExitCode()).To(Equal(0))
		Eventually(holders.Holders).Should(ContainElements(leader.Pod.Identity(), "", next.Pod.Identity()))
		Expect(holders.Holders()).To(HaveExactElements(leader.Pod.Identity(), "", next.Pod.Identity()),
			"the lease goes from the old leader to released to the new leader, nothing in between")
		Expect(leader.Logs()).To(ContainSubstring("Released the lease"))
	})

	It("lets a follower take over within lease duration + clock skew margin when the leader is killed", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)

		killed := time.Now()
		Expect(leader.Signal(syscall.SIGKILL)).To(Succeed())
		_, takeover := timeUntilOneLeads(others(agents, leader), killed, 10*time.Second)
		GinkgoWriter.Printf("crash takeover took %s\n", takeover)
		// The follower's timer fires at the lease's expiry as the fence judges it (an agent run by hand
		// has the fence's default margin); the kill comes after the last renewal, plus one write to take it.
		Expect(takeover).To(BeNumerically("<=", fastTiming.LeaseDuration+lease.DefaultClockSkewMargin+250*time.Millisecond))
		Expect(getLease(ctx, ns).Spec.LeaseTransitions).To(HaveValue(BeEquivalentTo(1)), "one change of holder since the lease was created")
	})

	It("creates its lease again when someone deletes it, keeping its term and token, while the followers honour that term", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		before := getLease(ctx, ns)
		sampler, _ := sampleAgentClaims(agents)

		Expect(controlPlane.Client.CoordinationV1().Leases(ns).Delete(ctx, leaseName, metav1.DeleteOptions{})).To(Succeed())
		var after *coordinationv1.Lease
		Eventually(func(g Gomega) {
			l, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(l.UID).NotTo(Equal(before.UID), "the lease is the one deleted")
			after = l
		}).WithTimeout(5 * time.Second).Should(Succeed())
		// Past the deleted term, so a follower that ignored it would have had its chance.
		Consistently(func(g Gomega) {
			g.Expect(leader.IsLeader()).To(BeTrue(), "the leader stopped leading")
			for _, a := range others(agents, leader) {
				g.Expect(a.IsLeader()).To(BeFalse(), "%s leads", a.Pod.Name)
			}
		}).WithTimeout(fastTiming.LeaseDuration + lease.DefaultClockSkewMargin).WithPolling(100 * time.Millisecond).Should(Succeed())

		Expect(after.Spec.HolderIdentity).To(HaveValue(Equal(leader.Pod.Identity())))
		Expect(after.Spec.LeaseTransitions).To(Equal(before.Spec.LeaseTransitions), "the fencing token of the term that goes on")
		Expect(after.Spec.AcquireTime.Time).To(BeTemporally("==", before.Spec.AcquireTime.Time))
		_, overlaps := sampler.Stop()
		Expect(overlaps).To(BeEmpty())
		Expect(leader.Logs()).NotTo(ContainSubstring(`msg="Stopped leading"`))
		for _, a := range others(agents, leader) {
			Expect(a.Logs()).NotTo(ContainSubstring(`msg="Started leading"`), "%s led", a.Pod.Name)
		}
	})

	It("stops claiming leadership within its renew deadline when the API server becomes unreachable", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var servers []string
		var proxies []*relay.Proxy
		for range 3 {
			p, err := relay.StartProxy(controlPlane.Address())
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(p.Close)
			proxies = append(proxies, p)
			servers = append(servers, "https://"+p.Addr)
		}
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming, Readiness: "leader"}, servers...)
		leader := soleLeader(agents)
		for i, a := range agents {
			if a == leader {
				proxies[i].Cut()
			}
		}
		cut := time.Now()

		Eventually(leader.IsLeader).WithTimeout(5 * time.Second).WithPolling(10 * time.Millisecond).Should(BeFalse())
		stepDown := time.Since(cut)
		GinkgoWriter.Printf("partitioned leader stepped down after %s\n", stepDown)
		// The last renewal happened before the cut, so the deadline falls at most RenewDeadline after it;
		// the allowance covers this spec's polling.
		Expect(stepDown).To(BeNumerically("<=", fastTiming.RenewDeadline+100*time.Millisecond))
		// /leader answers from the renew deadline itself; the metric follows when the election loop steps
		// down, a moment later (the renewal in flight is abandoned at that same deadline).
		Eventually(func() (float64, error) { return leader.Metric("leasegate_agent_is_leader") }).WithTimeout(time.Second).Should(BeZero())
		body, code, err := leader.Get("/readyz")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusServiceUnavailable))
		Expect(string(body)).To(HavePrefix("not leader"))

		next := soleLeader(others(agents, leader))
		_, code, err = next.Get("/readyz")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusOK))
		Expect(leader.IsLeader()).To(BeFalse(), "the partitioned agent must not reclaim a lease it cannot renew")
	})

	It("never reports leadership it lost while frozen (SIGSTOP), and learns the new holder when resumed", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)

		Expect(leader.Signal(syscall.SIGSTOP)).To(Succeed())
		next, _ := timeUntilOneLeads(others(agents, leader), time.Now(), 10*time.Second)
		Expect(leader.Signal(syscall.SIGCONT)).To(Succeed())
		expectSteppedDown(leader, next)
		Expect(leader.Metric("leasegate_agent_is_leader")).To(BeZero())
		Expect(leader.Logs()).To(ContainSubstring(`msg="Stopped leading"`))
		soleLeader(agents)
	})

	It("never has two agents claiming leadership at once through repeated handovers and crashes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		sampler, swap := sampleAgentClaims(agents)

		for round := range 6 {
			sig := syscall.SIGTERM
			if round%2 == 1 {
				sig = syscall.SIGKILL
			}
			swap(failOver(ctx, agents, sig))
		}
		rounds, violations := sampler.Stop()
		GinkgoWriter.Printf("sampled %d rounds of /leader across 6 failovers\n", rounds)
		Expect(rounds).To(BeNumerically(">", 100))
		Expect(violations).To(BeEmpty())
	})

	DescribeTable("rejects bad settings with exit status 2 and a message naming the setting",
		func(ctx SpecContext, env []string, want string) {
			cmd := exec.CommandContext(ctx, agentBinary)
			cmd.Env = append([]string{
				"POD_NAME=worker-0", "POD_NAMESPACE=default", "POD_UID=0f1e", "LEASEGATE_LEASE=worker",
				"KUBECONFIG=" + writeUnreachableKubeconfig(),
			}, env...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			Expect(err).To(BeAssignableToTypeOf(exit))
			Expect(cmd.ProcessState.ExitCode()).To(Equal(2))
			Expect(string(out)).To(ContainSubstring(want))
			Expect(string(out)).NotTo(ContainSubstring("panic"))
		},
		Entry("missing pod UID, with no fallback to the hostname", []string{"POD_UID="}, "POD_UID (--pod-uid) is required"),
		Entry("missing lease name", []string{"LEASEGATE_LEASE="}, "LEASEGATE_LEASE (--lease) is required"),
		Entry("duration that does not parse", []string{"LEASEGATE_RETRY_PERIOD=2"}, `LEASEGATE_RETRY_PERIOD="2": not a duration`),
		Entry("renew deadline not shorter than lease duration", []string{"LEASEGATE_RENEW_DEADLINE=15s"}, "LEASEGATE_RENEW_DEADLINE=15s (--renew-deadline): renew deadline (15s) must be shorter than lease duration (15s)"),
		Entry("retry period not shorter than renew deadline", []string{"LEASEGATE_RETRY_PERIOD=10s"}, "LEASEGATE_RETRY_PERIOD=10s (--retry-period): retry period (10s) must be shorter than renew deadline (10s)"),
		Entry("lease duration a Lease cannot store", []string{"LEASEGATE_LEASE_DURATION=15500ms"}, "lease duration must be a whole number of seconds"),
		Entry("unknown readiness mode", []string{"LEASEGATE_READINESS=always"}, `LEASEGATE_READINESS="always": must be "health" or "leader"`),
		Entry("kubeconfig that does not exist", []string{"KUBECONFIG=/nonexistent/kubeconfig"}, "KUBECONFIG=/nonexistent/kubeconfig"),
		Entry("outside a pod without a kubeconfig", []string{"KUBECONFIG=", "KUBERNETES_SERVICE_HOST="}, "set KUBECONFIG (--kubeconfig) outside a pod"),
		Entry("listen address that is not an address", []string{"LEASEGATE_LISTEN=nowhere"}, "LEASEGATE_LISTEN=nowhere"),
	)

	It("reports an unreachable API server clearly, never claims leadership, and still exits promptly on SIGTERM", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		pod, err := controlPlane.CreatePod(ctx, ns, "worker-0", GinkgoT().TempDir(), unreachableServer)
		Expect(err).NotTo(HaveOccurred())
		agent := startAgent(pod, process.AgentOptions{Timing: fastTiming})

		Eventually(func() (string, error) {
			body, _, err := agent.Get("/healthz")
			return string(body), err
		}).Should(Equal("ok\n"))
		body, code, err := agent.Get("/readyz")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusServiceUnavailable))
		Expect(string(body)).To(ContainSubstring("not observed yet (is the API server reachable?)"))
		Eventually(agent.Logs).WithTimeout(5*time.Second).Should(
			ContainSubstring(`msg="Could not read the lease"`), "the election loop names what failed")
		Expect(agent.Logs()).To(ContainSubstring("connection refused"))
		Consistently(agent.IsLeader).WithTimeout(time.Second).Should(BeFalse())

		Expect(agent.Signal(syscall.SIGTERM)).To(Succeed())
		Expect(agent.WaitExit(ctx, time.Second)).To(BeTrue())
		Expect(agent.ExitCode()).To(Equal(0))
		Expect(agent.Logs()).NotTo(ContainSubstring("panic"))
	})
})

// unreachableServer is a loopback port nothing listens on.
const unreachableServer = "https://127.0.0.1:1"

func writeUnreachableKubeconfig() string {
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+unreachableServer+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)).To(Succeed())
	return path
}

// watchLeaseOf follows the namespace's worker Lease until the spec ends.
func watchLeaseOf(ctx context.Context, namespace string) *observe.LeaseWatch {
	w, err := observe.WatchLease(ctx, controlPlane.Client, namespace, leaseName)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	return w
}

// sampleAgentClaims asks the agents in turn, through their /leader, whether they lead, until the sampler
// is stopped; swap replaces an agent restarted in place (failOver) in the agents asked.
func sampleAgentClaims(agents []*process.Agent) (sampler *observe.ClaimsSampler, swap func(old, new *process.Agent)) {
	var mu sync.Mutex
	asked := slices.Clone(agents)
	sampler = observe.SampleClaims(func() []observe.Claim {
		mu.Lock()
		current := slices.Clone(asked)
		mu.Unlock()
		var claims []observe.Claim
		for _, a := range current {
			at := time.Now()
			status, err := a.Leader()
			if err != nil || !status.IsLeader {
				continue
			}
			claim := observe.Claim{Pod: a.Pod.Name, Asked: at}
			// A multi-cluster agent's since is its local candidacy, not its global leadership: the
			// sampler counts that claim from its first answer instead.
			if status.Since != nil && status.GlobalHolder == "" {
				claim.Since = *status.Since
			}
			claims = append(claims, claim)
		}
		return claims
	})
	return sampler, func(old, new *process.Agent) {
		mu.Lock()
		defer mu.Unlock()
		for i := range asked {
			if asked[i] == old {
				asked[i] = new
			}
		}
	}
}
