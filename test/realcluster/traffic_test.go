package realcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/cli"
	"github.com/leasegate/leasegate/test/framework/observe"
)

// trafficSpecs send Service traffic to the holder: the leader Service and the gate.
func trafficSpecs() {
	It("routes <service>-leader to the lease holder only, across deleted leaders and kubectl leasegate handover", func() {
		deployWorkload(ctx, node, "router", 3, nil)
		_, err := node.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "router", Labels: map[string]string{"leasegate.io/leader-lease": "router"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "router"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		awaitRunning(ctx, node, "router", 3)
		routes := watchRoutes(ctx, node, "router", "router-leader")
		routedToHolder := func(g Gomega) {
			current := holderPod(ctx, node, "router")
			g.Expect(current).NotTo(BeEmpty())
			g.Expect(readyEndpoints(g, ctx, node, "router-leader")).To(Equal([]string{current}))
		}
		Eventually(routedToHolder).WithTimeout(30 * time.Second).Should(Succeed())

		By("deleting the leader's pod, again and again: the endpoint follows the lease, never the old pod")
		for range *clusterRuns {
			leader := holderPod(ctx, node, "router")
			Expect(node.Client.CoreV1().Pods(app).Delete(ctx, leader, metav1.DeleteOptions{})).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(holderPod(ctx, node, "router")).NotTo(Equal(leader))
				routedToHolder(g)
			}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
			awaitRunning(ctx, node, "router", 3)
		}

		By("kubectl leasegate handover --to a Ready follower --wait, with every agent asked throughout")
		var took []time.Duration
		for range *clusterRuns {
			leader := holderPod(ctx, node, "router")
			target := awaitReadyFollower(ctx, node, "router", leader)
			done := make(chan struct{})
			overlaps := make(chan string, 1)
			go func() {
				defer GinkgoRecover()
				for {
					select {
					case <-done:
						close(overlaps)
						return
					default:
					}
					if proof, found := observe.Overlap(claimsOf(podsOf(ctx, node, "router"))); found {
						overlaps <- proof
						close(overlaps)
						return
					}
				}
			}()
			var out strings.Builder
			result, err := cli.Handover(ctx, node.Client, cli.HandoverOptions{
				Namespace: app, Lease: "router", To: target, Wait: 30 * time.Second,
				LeasegateNamespace: leasegateNamespace, ConfigName: "leasegate-config",
			}, &out)
			Expect(err).NotTo(HaveOccurred(), out.String())
			Expect(result.NewHolder).To(Equal(target))
			Eventually(routedToHolder).WithTimeout(10 * time.Second).Should(Succeed())
			close(done)
			Expect(<-overlaps).To(BeEmpty(), "two agents led at once")
			took = append(took, result.Took)
		}
		figures.Durations("planned handover: kubectl leasegate handover --to a Ready pod --wait (request -> new holder)", took)

		By("a follower's own request is refused by the lease guard")
		follower := ""
		for _, p := range listPods(Default, ctx, node, "router") {
			if p.Name != holderPod(ctx, node, "router") {
				follower = p.Name
			}
		}
		pod := getPod(ctx, node, follower)
		config := rest.CopyConfig(node.Config)
		config.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + app + ":router", Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {pod.Name}, "authentication.kubernetes.io/pod-uid": {string(pod.UID)},
		}}
		asFollower := kubernetes.NewForConfigOrDie(config).CoordinationV1().Leases(app)
		// The holder renews between the read and the write now and then: a Conflict is the API server's
		// answer before admission runs, so the follower reads again and asks again.
		err = retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
			l, err := asFollower.Get(ctx, "router", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			metav1.SetMetaDataAnnotation(&l.ObjectMeta, "leasegate.io/handover-from", ptr.Deref(l.Spec.HolderIdentity, ""))
			_, err = asFollower.Update(ctx, l, metav1.UpdateOptions{})
			return err
		})
		Expect(err).To(MatchError(ContainSubstring("a pod may not ask for a handover")))

		report := routes.Report()
		Expect(report.Violations).To(BeEmpty(), "a slice version routed to a pod that did not hold the lease")
		figures.Durations("leader Service: routing lag, the lease's new holder -> its <service>-leader endpoint", report.Lags)
		figures.Durations("leader Service: the old holder still routed after it lost the lease", report.Stale)
		removeWorkload(ctx, node, "router")
	})

	It("gate: through a Service with a named targetPort, only the lease holder serves mutations, across a deleted and a frozen leader", func() {
		deployWorkload(ctx, node, "storefront", 3, map[string]string{"leasegate.io/gate": "http"}, "--serve", ":8080")
		DeferCleanup(removeWorkload, node, "storefront")
		svc, err := node.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "storefront"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "storefront"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		awaitRunning(ctx, node, "storefront", 3)
		Eventually(func(g Gomega) []string { return readyEndpoints(g, ctx, node, "storefront") }).WithTimeout(30 * time.Second).Should(HaveLen(3))
		endpointSlices, err := node.Client.DiscoveryV1().EndpointSlices(app).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=storefront"})
		Expect(err).NotTo(HaveOccurred())
		Expect(endpointSlices.Items).NotTo(BeEmpty())
		for _, slice := range endpointSlices.Items {
			Expect(slice.Ports).To(ConsistOf(HaveField("Port", HaveValue(BeEquivalentTo(agentPort+1)))),
				"the Service's named targetPort resolves to the gate (the port after the agent's), not the app's 8080")
		}
		By("gRPC through the same Service: the leader serves, followers answer UNAVAILABLE naming the holder")
		// kube-proxy programs a Service's endpoints a sync period after they become Ready, the leader's
		// usually first: until it has all three, every call lands on the leader and no follower is asked.
		// New connections until each replica has answered one.
		answeredBy := map[string]bool{}
		probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		Eventually(func() (map[string]bool, error) {
			resp, err := probe.Get("http://" + svc.Spec.ClusterIP + "/ready")
			if err != nil {
				return answeredBy, err
			}
			resp.Body.Close()
			answeredBy[resp.Header.Get("X-Served-By")] = true
			return answeredBy, nil
		}).WithTimeout(30*time.Second).WithPolling(20*time.Millisecond).Should(HaveLen(3), "kube-proxy sends the Service's connections to all three replicas")
		Eventually(func() string { return holderPod(ctx, node, "storefront") }).WithTimeout(30*time.Second).ShouldNot(BeEmpty(), "a leader is elected")
		var grpcServed, grpcRefused int
		for grpcServed+grpcRefused < 30 {
			// A connection per call, so kube-proxy spreads them over every replica.
			conn, err := grpc.NewClient(svc.Spec.ClusterIP+":80", grpc.WithTransportCredentials(insecure.NewCredentials()))
			Expect(err).NotTo(HaveOccurred())
			var header metadata.MD
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = healthpb.NewHealthClient(conn).Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
			cancel()
			conn.Close()
			switch status.Code(err) {
			case codes.OK:
				Expect(header.Get("x-leader")).To(Equal([]string{"true"}), "a gRPC call served by %v, which did not lead", header.Get("x-served-by"))
				grpcServed++
			case codes.Unavailable:
				if strings.HasPrefix(status.Convert(err).Message(), "connection error") {
					time.Sleep(100 * time.Millisecond) // the connection, not the gate: try again
					continue
				}
				Expect(status.Convert(err).Message()).To(ContainSubstring("not the leader: lease " + app + "/storefront is held by"))
				grpcRefused++
			default:
				Fail(fmt.Sprintf("gRPC through the gate: %v", err))
			}
		}
		figures.Value("gate through a Service, gRPC health Check (30 calls): served by the leader / UNAVAILABLE", fmt.Sprintf("%d / %d", grpcServed, grpcRefused))
		Expect(grpcServed).To(BeNumerically(">", 0))
		Expect(grpcRefused).To(BeNumerically(">", 0))

		url := "http://" + svc.Spec.ClusterIP
		// A new connection per request, so kube-proxy spreads them over every replica.
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

		type answer struct {
			at                   time.Time
			code                 int
			servedBy, leader     string
			retryAfter, errorMsg string
		}
		var (
			mu      sync.Mutex
			answers []answer
		)
		stop := make(chan struct{})
		var load sync.WaitGroup
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				method := http.MethodPost
				if i%2 == 1 {
					method = http.MethodGet
				}
				req, _ := http.NewRequest(method, url+"/entries", nil)
				a := answer{}
				if resp, err := client.Do(req); err != nil {
					a.errorMsg = err.Error()
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					a.code, a.servedBy, a.leader = resp.StatusCode, resp.Header.Get("X-Served-By"), resp.Header.Get("X-Leader")
					a.retryAfter = resp.Header.Get("Retry-After")
				}
				if method == http.MethodGet {
					a.leader = "get"
				}
				a.at = time.Now()
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		})
		holders := watchLease(ctx, node, "storefront")
		time.Sleep(3 * time.Second)

		By("deleting the leader's pod under load")
		leader := holderPod(ctx, node, "storefront")
		Expect(node.Client.CoreV1().Pods(app).Delete(ctx, leader, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() string { return holderPod(ctx, node, "storefront") }).WithTimeout(30 * time.Second).ShouldNot(BeElementOf(leader, ""))
		time.Sleep(2 * time.Second)

		By("freezing the next leader until another pod takes over, then thawing it, under load")
		frozen := getPod(ctx, node, holderPod(ctx, node, "storefront"))
		ids := []string{containerID(frozen, agentContainer), containerID(frozen, "storefront")}
		for _, id := range ids {
			Expect(node.Freeze(id)).To(Succeed())
		}
		Eventually(func() string { return holderPod(ctx, node, "storefront") }).WithTimeout(30 * time.Second).ShouldNot(BeElementOf(frozen.Name, ""))
		for _, id := range ids {
			Expect(node.Thaw(id)).To(Succeed())
		}
		time.Sleep(3 * time.Second)
		close(stop)
		load.Wait()
		changes := holders.Versions()

		// A mutation the app served while its agent said it did not lead is a violation, unless the lease
		// changed hands within 200 ms of the answer: the app asks its agent a moment after the gate let the
		// request in, so a request admitted just before a step-down is in flight, not a violation.
		nearChange := func(t time.Time) bool {
			for i := 1; i < len(changes); i++ {
				if changes[i].Holder != changes[i-1].Holder && changes[i].At.Sub(t).Abs() < 200*time.Millisecond {
					return true
				}
			}
			return false
		}
		var served, gated, reads, failed, inFlight int
		servedBy, readBy := map[string]int{}, map[string]bool{}
		var violations []string
		for _, a := range answers {
			switch {
			case a.errorMsg != "":
				failed++ // a connection to the frozen pod, or to one shutting down
			case a.leader == "get" && a.code == http.StatusOK:
				reads++
				readBy[a.servedBy] = true
			case a.code == http.StatusServiceUnavailable:
				gated++
				Expect(a.retryAfter).NotTo(BeEmpty(), "a 503 carries Retry-After")
			case a.code == http.StatusOK && a.leader == "true":
				served++
				servedBy[a.servedBy]++
			case a.code == http.StatusOK && nearChange(a.at):
				inFlight++
			case a.code == http.StatusOK:
				violations = append(violations, fmt.Sprintf("%s served a mutation at %s while its agent said leader=%s", a.servedBy, a.at.Format(time.StampMilli), a.leader))
			}
		}
		figures.Value("gate through a Service: mutations served by the holder / answered 503 / reads served / failed (frozen pod)",
			fmt.Sprintf("%d / %d / %d / %d", served, gated, reads, failed))
		GinkgoWriter.Printf("mutations served by: %v; in flight at a change of holder: %d\n", servedBy, inFlight)
		Expect(violations).To(BeEmpty(), "a follower served a mutation")
		Expect(served).To(BeNumerically(">", 20))
		Expect(gated).To(BeNumerically(">", 20), "followers answered mutations themselves")
		Expect(len(servedBy)).To(BeNumerically(">=", 2), "mutations moved with the lease")
		Expect(len(readBy)).To(BeNumerically(">=", 3), "reads reached followers too")
	})
}
