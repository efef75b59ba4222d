package realcluster

import (
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/leasegate/leasegate/internal/lease"
)

// appWiringSpecs tie an app's readiness, start and restarts to the lease.
func appWiringSpecs() {
	It("readiness: leader: only the leader is Ready, and the Service's endpoints follow leadership", func() {
		deployWorkload(ctx, node, "gateway", 2, map[string]string{"leasegate.io/readiness": "leader"})
		_, err := node.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "gateway"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(agentPort)}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		awaitRunning(ctx, node, "gateway", 2)
		leaderAlone := func(g Gomega) {
			g.Expect(readyEndpoints(g, ctx, node, "gateway")).To(Equal([]string{holderPod(ctx, node, "gateway")}))
		}
		Eventually(leaderAlone).WithTimeout(30 * time.Second).Should(Succeed())

		routes := watchRoutes(ctx, node, "gateway", "gateway")
		var unserved, misdirected []time.Duration
		for range *clusterRuns {
			leader := holderPod(ctx, node, "gateway")
			Expect(node.Client.CoreV1().Pods(app).Delete(ctx, leader, metav1.DeleteOptions{})).To(Succeed())
			var none, wrong time.Duration
			last := time.Now()
			Eventually(func(g Gomega) {
				ready, now := readyEndpoints(g, ctx, node, "gateway"), time.Now()
				current := holderPod(ctx, node, "gateway")
				switch {
				case len(ready) == 0:
					none += now.Sub(last)
				case !slices.Equal(ready, []string{current}):
					wrong += now.Sub(last) // a ready endpoint at a pod that does not hold the lease
				}
				last = now
				g.Expect(current).NotTo(Equal(leader))
				leaderAlone(g)
			}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
			unserved, misdirected = append(unserved, none), append(misdirected, wrong)
			awaitRunning(ctx, node, "gateway", 2)
		}
		figures.Durations("readiness: leader: no ready endpoint during a handover", unserved)
		figures.Durations("readiness: leader: a ready endpoint at a pod that does not hold the lease", misdirected)
		report := routes.Report()
		figures.Durations("readiness: leader: routing lag, the lease's new holder -> its Ready endpoint", report.Lags)
		figures.Durations("readiness: leader: the old holder still Ready after it lost the lease", report.Stale)
	})

	It("start: leader: a follower's app container starts only once it leads", func() {
		deployWorkload(ctx, node, "scheduler", 2, map[string]string{"leasegate.io/start": "leader"})
		started := func(g Gomega) (names []string) {
			for _, p := range listPods(g, ctx, node, "scheduler") {
				for _, c := range p.Status.ContainerStatuses {
					if c.Name == "scheduler" && c.State.Running != nil && p.DeletionTimestamp == nil {
						names = append(names, p.Name)
					}
				}
			}
			return names
		}
		Eventually(func(g Gomega) {
			g.Expect(listPods(g, ctx, node, "scheduler")).To(HaveLen(2))
			g.Expect(started(g)).To(Equal([]string{holderPod(ctx, node, "scheduler")}))
		}).WithTimeout(60 * time.Second).Should(Succeed())
		Consistently(func(g Gomega) int { return len(started(g)) }).WithTimeout(2*time.Second).Should(Equal(1), "the follower's app must wait")

		By("the leader goes; the follower's app starts once it has taken the lease")
		leader := holderPod(ctx, node, "scheduler")
		Expect(node.Client.CoreV1().Pods(app).Delete(ctx, leader, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func(g Gomega) {
			next := holderPod(ctx, node, "scheduler")
			g.Expect(next).NotTo(BeElementOf(leader, ""))
			g.Expect(started(g)).To(Equal([]string{next}))
		}).WithTimeout(60 * time.Second).Should(Succeed())
	})

	It("on-loss: restart: a leader frozen past a takeover is evicted once thawed, and its replacement waits as a follower", func() {
		deployWorkload(ctx, node, "batch", 2, map[string]string{"leasegate.io/on-loss": "restart"})
		DeferCleanup(removeWorkload, node, "batch") // the specs after this one measure with the load they had
		running := func(g Gomega) (names []string) {
			for _, p := range listPods(g, ctx, node, "batch") {
				for _, c := range p.Status.ContainerStatuses {
					if c.Name == "batch" && c.State.Running != nil {
						names = append(names, p.Name)
					}
				}
			}
			slices.Sort(names)
			return names
		}
		Eventually(func(g Gomega) {
			g.Expect(listPods(g, ctx, node, "batch")).To(HaveLen(2))
			g.Expect(running(g)).To(Equal([]string{holderPod(ctx, node, "batch")}), "only the leader's app runs (start: leader)")
		}).WithTimeout(60 * time.Second).Should(Succeed())

		var stopped []time.Duration
		for range min(*clusterRuns, 5) {
			leader := getPod(ctx, node, holderPod(ctx, node, "batch"))
			ids := []string{containerID(leader, agentContainer), containerID(leader, "batch")}
			w := watchLease(ctx, node, "batch")
			for _, id := range ids {
				Expect(node.Freeze(id)).To(Succeed())
			}
			change := nextHolder(w, lease.Identity(leader.Name, string(leader.UID)))
			next, _, _ := lease.ParseIdentity(change.Holder)
			Eventually(running).WithTimeout(30*time.Second).Should(ContainElement(next), "the new leader's app starts once it leads")
			for _, id := range ids {
				Expect(node.Thaw(id)).To(Succeed())
			}
			thawed := time.Now()
			// The thawed leader's app runs again until its agent, seeing the loss, has the pod evicted and
			// kubelet stops it: measured, as the window the fence covers.
			Eventually(func(g Gomega) []string { return running(g) }).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).
				ShouldNot(ContainElement(leader.Name), "the old leader's app is stopped")
			stopped = append(stopped, time.Since(thawed))
			Eventually(func() bool {
				p, err := node.Client.CoreV1().Pods(app).Get(ctx, leader.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
			}).WithTimeout(30*time.Second).Should(BeTrue(), "the old leader's pod was evicted")
			Eventually(func(g Gomega) {
				g.Expect(listPods(g, ctx, node, "batch")).To(HaveLen(2), "the Deployment replaced the evicted pod")
				g.Expect(running(g)).To(Equal([]string{holderPod(ctx, node, "batch")}), "the replacement waits as a follower")
			}).WithTimeout(60 * time.Second).Should(Succeed())
		}
		figures.Durations("on-loss: restart: frozen leader thawed -> its app stopped (evicted)", stopped)
	})
}
