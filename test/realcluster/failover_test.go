package realcluster

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/observe"
)

// failoverSpecs move the orders lease by every way a leader can go.
func failoverSpecs() {
	It("hands the lease over when the leader's pod is deleted: kubelet's SIGTERM makes the agent release it", func() {
		ensureOrders(ctx, node)
		var took []time.Duration
		for range *clusterRuns {
			identity := holder(ctx, node, "orders")
			leader, _, _ := lease.ParseIdentity(identity)
			w := watchLease(ctx, node, "orders")
			deleted := time.Now()
			Expect(node.Client.CoreV1().Pods(app).Delete(ctx, leader, metav1.DeleteOptions{})).To(Succeed())
			change := nextHolder(w, identity)
			Expect(change.Released).To(BeTrue(), "the lease went from %s to %s without a release: it expired", leader, change.Holder)
			took = append(took, change.At.Sub(deleted))
			awaitRunning(ctx, node, "orders", 3)
		}
		figures.Durations("graceful handover: kubectl delete pod of the leader", took)
	})

	It("takes over from a frozen leader; thawed, the old leader's writes are denied and its agent steps down", func() {
		guardOrders(ctx, node) // the thawed leader's writes are fenced
		var took []time.Duration
		for range *clusterRuns {
			leader := getPod(ctx, node, holderPod(ctx, node, "orders"))
			frozen := []string{containerID(leader, agentContainer), containerID(leader, "orders")}
			w := watchLease(ctx, node, "orders")
			for _, id := range frozen {
				Expect(node.Freeze(id)).To(Succeed())
			}
			stalled := time.Now()
			change := nextHolder(w, lease.Identity(leader.Name, string(leader.UID)))
			took = append(took, change.At.Sub(stalled))
			// Read while the app is still frozen, seconds after it stopped: its log holds every write it
			// made before the freeze, and nothing since.
			before := len(podLog(Default, ctx, node, leader.Name, "orders"))
			for _, id := range frozen {
				Expect(node.Thaw(id)).To(Succeed())
			}
			Eventually(func() (lease.Status, error) { return agentStatus(leader) }).WithTimeout(10*time.Second).
				Should(And(HaveField("IsLeader", BeFalse()), HaveField("Holder", Equal(change.Holder))), "the thawed agent steps down")
			Eventually(func(g Gomega) {
				// The first new line may be the one write the app had in flight when it was frozen,
				// admitted before the takeover and answered while it was frozen. Every write sent after
				// the thaw is fenced.
				after := podLog(g, ctx, node, leader.Name, "orders")[before:]
				g.Expect(len(after)).To(BeNumerically(">=", 3))
				for _, line := range after[1:] {
					g.Expect(line).To(ContainSubstring(`denied the request: leasegate: pod `+app+"/"+leader.Name), "a write of the stale leader was admitted")
				}
			}).WithTimeout(15 * time.Second).Should(Succeed())
		}
		figures.Durations("crash takeover: leader pod frozen (lease 3s + skew margin 1s, retry 500ms)", took)
	})

	It("resumes leadership when the leader's agent is SIGKILLed through the runtime and kubelet restarts it", func() {
		ensureOrders(ctx, node)
		var took []time.Duration
		samePod := 0
		for range *clusterRuns {
			leader := getPod(ctx, node, holderPod(ctx, node, "orders"))
			w := watchLease(ctx, node, "orders")
			Expect(node.Kill(containerID(leader, agentContainer), "SIGKILL")).To(Succeed())
			killed := time.Now()
			renewal, err := w.NextRenewal(killed, leaseChangeTimeout)
			Expect(err).NotTo(HaveOccurred())
			took = append(took, renewal.At.Sub(killed))
			if renewal.Holder == lease.Identity(leader.Name, string(leader.UID)) {
				samePod++
			}
			// A fresh pod for the next run: kubelet backs off restarting a container that crashes again.
			Expect(node.Client.CoreV1().Pods(app).Delete(ctx, leader.Name, metav1.DeleteOptions{})).To(Succeed())
			awaitRunning(ctx, node, "orders", 3)
			Eventually(func() string { return holder(ctx, node, "orders") }).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
		}
		figures.Durations(fmt.Sprintf("agent SIGKILL: a live agent leads again (the restarted one in %d of %d)", samePod, len(took)), took)
	})

	It("kubectl rollout restart: never two leaders, every handover a release, and the leaderless gap is measured", func() {
		ensureOrders(ctx, node)
		var gaps []time.Duration
		for range max(1, *clusterRuns/4) {
			deployment, err := node.Client.AppsV1().Deployments(app).Get(ctx, "orders", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			history := watchLease(ctx, node, "orders")
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
			_, err = node.Client.AppsV1().Deployments(app).Patch(ctx, "orders", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())

			Eventually(func(g Gomega) {
				// Every agent is asked, old and new, terminating or not.
				claimants := claimsOf(listPods(g, ctx, node, "orders"))
				if proof, found := observe.Overlap(claimants); found {
					Fail("two agents led at once: " + proof)
				}
				d, err := node.Client.AppsV1().Deployments(app).Get(ctx, "orders", metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(d.Status.ObservedGeneration).To(BeNumerically(">", deployment.Generation))
				g.Expect(d.Status.UpdatedReplicas).To(BeEquivalentTo(3))
				g.Expect(d.Status.Replicas).To(BeEquivalentTo(3), "old pods are still terminating")
				g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(3))
				g.Expect(claimants).To(HaveLen(1))
			}).WithTimeout(120 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

			var longest time.Duration
			var releasedAt time.Time
			previous := ""
			history.Stop()
			for _, v := range history.Versions() {
				switch {
				case v.Holder == "" && previous != "":
					releasedAt = v.At
				case v.Holder != "" && previous == "" && !releasedAt.IsZero():
					longest = max(longest, v.At.Sub(releasedAt))
				case v.Holder != "" && previous != "" && v.Holder != previous:
					Fail(fmt.Sprintf("the lease passed from %s to %s without a release: it expired during a rolling restart", previous, v.Holder))
				}
				previous = v.Holder
			}
			gaps = append(gaps, longest)
		}
		figures.Durations("rollout restart of 3 replicas: longest leaderless gap (lease released -> next holder)", gaps)
	})
}
