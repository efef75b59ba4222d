package realcluster

import (
	"fmt"
	"time"

	"github.com/leasegate/leasegate/test/framework/observe"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// crashSpecs kill kube-apiserver, then etcd, under a running election and guarded writes.
func crashSpecs() {
	It("rides out a kube-apiserver crash and an etcd crash: never two leaders, the leader stops within its renew deadline, and the election and the fence recover by themselves", func() {
		const (
			renewDeadline = 2 * time.Second // fastElection
			// Down past the lease duration plus the clock skew margin (4 s), so the lease has expired when
			// the server returns, and within the webhook's own leader election's renew deadline (10 s).
			outage = 6 * time.Second
		)
		pods := guardOrders(ctx, node)
		claimsNow := func() []observe.Claim { return claimsOf(pods) }
		for _, component := range []string{"kube-apiserver", "etcd"} {
			By("killing " + component + " for " + outage.String() + ", with the orders replicas writing through the fence every 200 ms")
			Eventually(claimsNow).WithTimeout(30 * time.Second).Should(HaveLen(1))
			sampler := sampleClaimsOf(pods)
			Expect(node.KillComponent(component)).To(Succeed())
			stopped := time.Now()
			Eventually(claimsNow).WithTimeout(renewDeadline + 3*time.Second).WithPolling(20 * time.Millisecond).Should(BeEmpty())
			steppedDown := time.Since(stopped)
			Expect(steppedDown).To(BeNumerically("<=", renewDeadline+500*time.Millisecond), "the leader kept claiming past its renew deadline")
			time.Sleep(time.Until(stopped.Add(outage)))

			Expect(node.StartComponent(component)).To(Succeed())
			restarted := time.Now()
			Eventually(claimsNow).WithTimeout(90 * time.Second).WithPolling(20 * time.Millisecond).Should(HaveLen(1))
			leading := time.Since(restarted)
			// The first leader after the outage may not be the last: a leader whose renewals fail while
			// the server settles steps down, and another takes over. The fence is judged against whoever
			// leads at each look.
			Eventually(func(g Gomega) {
				claims := claimsNow()
				g.Expect(claims).To(HaveLen(1))
				leader := claims[0].Pod
				seen := fmt.Sprintf("agents: %s leads; lease holder %q", leader, holder(ctx, node, "orders"))

				for _, p := range pods {
					// Only what each replica wrote since the component came back counts.
					lines := podLogSince(g, ctx, node, p.Name, "orders", restarted)
					seen += fmt.Sprintf("; %s wrote %d lines since, last %q", p.Name, len(lines), lastOf(lines))
				}
				for _, p := range pods {
					lines := podLogSince(g, ctx, node, p.Name, "orders", restarted)
					g.Expect(lines).NotTo(BeEmpty(), "%s has written nothing since %s came back (%s)", p.Name, component, seen)
					last := lines[len(lines)-1]
					if p.Name == leader {
						g.Expect(last).To(HaveSuffix("allowed"), "the new leader %s (%s)", p.Name, seen)
					} else {
						g.Expect(last).To(ContainSubstring(`denied the request: leasegate: pod `+app+"/"+p.Name), "follower %s (%s)", p.Name, seen)
					}
				}
			}).WithTimeout(90 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
			fenced := time.Since(restarted)
			// The fence's guarded-lease watches retry every second at most (client-go's default backoff
			// grows to 30 s and left the new leader fenced for 13 s after this very outage).
			Expect(fenced-leading).To(BeNumerically("<", 3*time.Second), "the fence judged from the leases as they were before the outage for too long")
			rounds, overlaps := sampler.Stop()
			Expect(overlaps).To(BeEmpty(), "two agents led at once")
			AddReportEntry(component+" restart", fmt.Sprintf("%d samples of every agent, never two leaders", rounds))
			figures.Value(component+" killed: the leader stops claiming (renew deadline 2 s)", steppedDown.Round(10*time.Millisecond).String())
			figures.Value(component+" down "+outage.String()+", started again: a leader again", leading.Round(10*time.Millisecond).String())
			figures.Value(component+" restarted: the leader's guarded writes admitted, its followers' fenced", fenced.Round(100*time.Millisecond).String())
			figures.Value(component+" restarted: the new leader fenced after it took over (the fence's watches relisting)", (fenced - leading).Round(100*time.Millisecond).String())
		}
	})
}
