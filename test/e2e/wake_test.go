package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/framework/process"
)

// leaseWatches is how many watches of Leases kube-apiserver serves now, from its own gauge of long-running
// requests.
func leaseWatches(ctx context.Context) (int, error) {
	raw, err := controlPlane.Client.CoordinationV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `resource="leases"`) && strings.Contains(line, `verb="WATCH"`) {
			var v float64
			fields := strings.Fields(line)
			if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
				n += int(v)
			}
		}
	}
	return n, nil
}

var _ = Describe("Followers that wait on the leader's agent", func() {
	It("hold no watch of the lease while a leader renews, and take its release at once", func(ctx SpecContext) {
		before, err := leaseWatches(ctx)
		Expect(err).NotTo(HaveOccurred())
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		Eventually(func() (string, error) {
			l := getLease(ctx, ns)
			return l.Annotations[contract.HolderURL], nil
		}).Should(Equal(leader.URL), "the leader names its agent on the lease")

		By("the API server serving no more lease watches than before the agents started")
		Eventually(leaseWatches).WithContext(ctx).WithTimeout(10 * time.Second).Should(BeNumerically("<=", before))
		Consistently(leaseWatches).WithContext(ctx).WithTimeout(2 * fastTiming.LeaseDuration).Should(BeNumerically("<=", before))
		for _, a := range agents {
			Expect(a.Metric("leasegate_agent_lease_watched")).To(BeZero(), "%s says it watches the lease", a.Pod.Name)
		}

		By("a release taken within a second of SIGTERM, with nothing watching")
		signalled := time.Now()
		Expect(leader.Signal(syscall.SIGTERM)).To(Succeed())
		next, handover := timeUntilOneLeads(others(agents, leader), signalled, 5*time.Second)
		GinkgoWriter.Printf("graceful handover, followers waiting on the leader: %s\n", handover)
		Expect(handover).To(BeNumerically("<", time.Second))
		Eventually(func() string { return getLease(ctx, ns).Annotations[contract.HolderURL] }).Should(Equal(next.URL))
		Eventually(leaseWatches).WithContext(ctx).WithTimeout(10*time.Second).Should(BeNumerically("<=", before),
			"the last follower waits on the new leader")
	})

	It("watch the lease where the leader's agent cannot be reached, and still take its release at once", func(ctx SpecContext) {
		before, err := leaseWatches(ctx)
		Expect(err).NotTo(HaveOccurred())
		ns := newNamespace(ctx)
		// 127.0.0.2 is loopback, but the agents listen on 127.0.0.1 only: a wait there is refused, as a
		// NetworkPolicy would refuse it.
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming, PodIP: "127.0.0.2"})
		leader := soleLeader(agents)
		Eventually(leaseWatches).WithContext(ctx).WithTimeout(10*time.Second).Should(BeNumerically(">=", before+2),
			"each follower watches the lease instead")
		for _, a := range others(agents, leader) {
			Eventually(func() (float64, error) { return a.Metric("leasegate_agent_lease_watched") }).Should(Equal(1.0),
				"%s does not say it watches the lease", a.Pod.Name)
		}

		signalled := time.Now()
		Expect(leader.Signal(syscall.SIGTERM)).To(Succeed())
		_, handover := timeUntilOneLeads(others(agents, leader), signalled, 5*time.Second)
		GinkgoWriter.Printf("graceful handover, followers watching: %s\n", handover)
		Expect(handover).To(BeNumerically("<", time.Second))
	})

	It("take a crashed leader's lease at lease duration + margin, the wait having ended with its agent", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		Eventually(func() string { return getLease(ctx, ns).Annotations[contract.HolderURL] }).Should(Equal(leader.URL))
		time.Sleep(fastTiming.RetryPeriod) // the followers' waits are open

		killed := time.Now()
		Expect(leader.Signal(syscall.SIGKILL)).To(Succeed())
		_, takeover := timeUntilOneLeads(others(agents, leader), killed, 10*time.Second)
		GinkgoWriter.Printf("crash takeover, followers waiting on the leader: %s\n", takeover)
		Expect(takeover).To(BeNumerically("<=", fastTiming.LeaseDuration+time.Second+250*time.Millisecond))
		Expect(takeover).To(BeNumerically(">=", fastTiming.LeaseDuration-fastTiming.RetryPeriod),
			"nobody takes the lease before the crashed leader's term could have ended")
	})
})
