package realcluster

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework/cluster"
	"github.com/leasegate/leasegate/test/framework/observe"
	"github.com/leasegate/leasegate/test/framework/process"
)

// fenceSpecs edit guards live and fence followers' writes.
func fenceSpecs() {
	It("applies guards added to leasegate-config live, and refuses a bad edit with the message the user sees", func() {
		ensureOrders(ctx, node)
		cm := guard(ctx, node, "orders", "ledger")

		bad := cm.DeepCopy()
		bad.Data["config.yaml"] += "missingPodIdentity: sometimes\n"
		_, err := node.Client.CoreV1().ConfigMaps(leasegateNamespace).Update(ctx, bad, metav1.UpdateOptions{})
		Expect(err).To(MatchError(ContainSubstring(`admission webhook "config.leasegate.io" denied the request: leasegate-config is invalid and was not saved: missingPodIdentity: Unsupported value: "sometimes"`)))

		By("the guard takes effect: the orders leader's writes land, its followers' are refused")
		awaitFenced(ctx, node, "orders")
	})

	It("fences followers: only the leader's writes land, and the webhook's metrics and Events match what every replica reported", func() {
		const writes = 20
		guard(ctx, node, "ledger")
		deployWorkload(ctx, node, "ledger", 3, nil, "--writes", fmt.Sprint(writes), "--interval", "100ms")
		pods := awaitRunning(ctx, node, "ledger", 3)
		outcomes := map[string]map[string]int{} // pod -> allowed/denied -> count
		Eventually(func(g Gomega) {
			for _, p := range pods {
				lines := podLog(g, ctx, node, p.Name, "ledger")
				g.Expect(lines).To(HaveLen(writes), "%s has not made its %d writes yet", p.Name, writes)
				counts := map[string]int{}
				for _, line := range lines {
					switch {
					case strings.HasSuffix(line, " allowed"):
						counts["allowed"]++
					case strings.Contains(line, `denied: admission webhook "guarded.leasegate.io" denied the request: leasegate: pod `+app+"/"+p.Name):
						counts["denied"]++
					default:
						g.Expect(line).To(BeEmpty(), "neither admitted nor fenced")
					}
				}
				outcomes[p.Name] = counts
			}
		}).WithTimeout(60 * time.Second).Should(Succeed())

		leader := holderPod(ctx, node, "ledger")
		var allowed, denied int
		for name, counts := range outcomes {
			allowed += counts["allowed"]
			denied += counts["denied"]
			if name != leader {
				Expect(counts["allowed"]).To(BeZero(), "follower %s wrote", name)
				Expect(counts["denied"]).To(Equal(writes), "follower %s", name)
			}
		}
		Expect(outcomes[leader]["allowed"]).To(BeNumerically(">", 0), "the leader %s never wrote", leader)

		By("the fence's decisions, summed over both webhook replicas, are the replicas' outcomes")
		// Secure metrics: over TLS with the certificate cert-manager issued, as a caller allowed GET /metrics.
		secret, err := node.Client.CoreV1().Secrets(leasegateNamespace).Get(ctx, "leasegate-webhook-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		client, err := observe.WebhookClient(secret.Data["ca.crt"], leasegateNamespace)
		Expect(err).NotTo(HaveOccurred())
		m := observe.Metrics{}
		for _, p := range listPodsIn(Default, ctx, node, leasegateNamespace, "app.kubernetes.io/name=leasegate-webhook") {
			code, body, err := observe.GetWithToken(ctx, client, fmt.Sprintf("https://%s:8080/metrics", p.Status.PodIP), node.Config.BearerToken)
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusOK), string(body))
			scraped, err := observe.ParseMetrics(body)
			Expect(err).NotTo(HaveOccurred())
			mergeMetrics(m, scraped)
		}
		Expect(m.Sum("leasegate_fence_decisions_total", map[string]string{"webhook": "guarded", "guard": "ledger", "outcome": "allowed"})).To(BeNumerically("==", allowed))
		Expect(m.Sum("leasegate_fence_decisions_total", map[string]string{"webhook": "guarded", "guard": "ledger", "outcome": "denied"})).To(BeNumerically("==", denied))

		By("every fenced replica has its own LeaderGateDenied Event, related to its pod (its repeats fold into one series)")
		Eventually(func(g Gomega) {
			events, err := node.Client.EventsV1().Events(app).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for name, counts := range outcomes {
				if counts["denied"] == 0 {
					continue
				}
				g.Expect(slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
					return e.Reason == "LeaderGateDenied" && strings.Contains(e.Note, "pod "+app+"/"+name+" ") &&
						e.Related != nil && e.Related.Kind == "Pod" && e.Related.Name == name
				})).To(BeTrue(), "no LeaderGateDenied Event related to %s", name)
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
		AddReportEntry("ledger", fmt.Sprintf("%d writes admitted (leader %s), %d fenced", allowed, leader, denied))
	})
}

// guard makes leasegate-config guard each workload's ConfigMap writes with its lease, for its service
// account, keeping the guards it has; and lets the workloads write ConfigMaps. It returns the ConfigMap as
// saved, the edit admitted by leasegate's own config webhook.
func guard(ctx context.Context, node *cluster.Node, workloads ...string) *corev1.ConfigMap {
	cm, err := node.Client.CoreV1().ConfigMaps(leasegateNamespace).Get(ctx, "leasegate-config", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	var config map[string]any
	Expect(yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &config)).To(Succeed())
	guards, _ := config["guards"].([]any)
	guarded := map[string]bool{}
	for _, g := range guards {
		if g, ok := g.(map[string]any); ok {
			guarded[fmt.Sprint(g["name"])] = true
		}
	}
	edited := false
	for _, workload := range workloads {
		Expect(process.GrantConfigMapWrites(ctx, node.Client, app, workload)).To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
		if !guarded[workload] {
			guards = append(guards, map[string]any{
				"name": workload, "lease": workload, "serviceAccounts": []string{app + "/" + workload},
				"resources": []any{map[string]any{"group": "", "resources": []string{"configmaps"}}},
			})
			edited = true
		}
	}
	if !edited {
		return cm
	}
	config["guards"] = guards
	data, err := yaml.Marshal(config)
	Expect(err).NotTo(HaveOccurred())
	cm.Data["config.yaml"] = string(data)
	cm, err = node.Client.CoreV1().ConfigMaps(leasegateNamespace).Update(ctx, cm, metav1.UpdateOptions{})
	Expect(err).NotTo(HaveOccurred(), "the edit, admitted by leasegate's own config webhook through its Service")
	return cm
}

// guardOrders makes sure the orders replicas run, leasegate-config guards their ConfigMap writes with
// their lease, and the fence refuses a follower's. A helm upgrade (the bring-your-own-certificate spec)
// resets leasegate-config to the chart's, as helm does with any field the chart renders: specs after it
// find no guard.
func guardOrders(ctx context.Context, node *cluster.Node) []corev1.Pod {
	pods := ensureOrders(ctx, node)
	guard(ctx, node, "orders")
	awaitFenced(ctx, node, "orders")
	return pods
}

// awaitFenced waits until the last write of the workload's leader was admitted and each follower's
// refused by the fence.
func awaitFenced(ctx context.Context, node *cluster.Node, workload string) {
	Eventually(func(g Gomega) {
		leader := holderPod(ctx, node, workload)
		for _, p := range listPods(g, ctx, node, workload) {
			lines := podLog(g, ctx, node, p.Name, workload)
			g.Expect(lines).NotTo(BeEmpty())
			last := lines[len(lines)-1]
			if p.Name == leader {
				g.Expect(last).To(HaveSuffix("allowed"), p.Name)
			} else {
				g.Expect(last).To(ContainSubstring(`denied: admission webhook "guarded.leasegate.io" denied the request: leasegate: pod `+app+"/"+p.Name), p.Name)
			}
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// mergeMetrics appends src's series to dst's, so Sum adds up several replicas.
func mergeMetrics(dst, src observe.Metrics) {
	for name, family := range src {
		if existing, ok := dst[name]; ok {
			existing.Metric = append(existing.Metric, family.Metric...)
		} else {
			dst[name] = family
		}
	}
}
