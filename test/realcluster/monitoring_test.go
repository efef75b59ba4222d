package realcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// alertFor is what the `for` of the chart's alerts is shortened to here, so a pending alert fires within
// the spec: the rules are otherwise the chart's, rendered.
const alertFor = "10s"

// monitoringSpecs run a real Prometheus against the cluster, configured as the chart's ServiceMonitor and
// PodMonitor configure one, with the chart's alerts and dashboard.
func monitoringSpecs() {
	It("Prometheus scrapes the webhook with a token and the agents: LeasegateNoLeader fires on a crash and resolves after the takeover, a denial moves its counter, every dashboard query returns data", func() {
		start := time.Now()
		By("workloads for every panel: fenced orders, two standby replicas to crash, a gated app, a multi-cluster candidate")
		guardOrders(ctx, node)
		deployWorkload(ctx, node, "standby", 2, nil)
		DeferCleanup(removeWorkload, node, "standby")
		deployWorkload(ctx, node, "gated", 1, map[string]string{"leasegate.io/gate": "http"}, "--serve", ":8080")
		DeferCleanup(removeWorkload, node, "gated")
		deployWorkload(ctx, node, "global", 1, map[string]string{"leasegate.io/lease-kind": "MultiClusterLease"})
		DeferCleanup(removeWorkload, node, "global")

		prometheus := startPrometheus()
		DeferCleanup(prometheus.Stop)
		denials := &alertWatch{labels: map[string]string{"alertname": "LeasegateFenceDenials", "guard": "orders"}}
		noLeader := &alertWatch{labels: map[string]string{"alertname": "LeasegateNoLeader", "namespace": app, "lease": "standby"}}
		watchAlerts(prometheus, denials, noLeader)
		awaitRunning(ctx, node, "standby", 2)
		awaitRunning(ctx, node, "gated", 1)
		awaitRunning(ctx, node, "global", 1)
		Eventually(func() string { return holder(ctx, node, "standby") }).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())

		By("every target is up: both webhook replicas over HTTPS with the token, and each injected pod's agent")
		Eventually(func(g Gomega) {
			targets, err := prometheus.Targets(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			up := map[string]int{}
			for _, t := range targets {
				if t.Health == "up" {
					up[t.Labels["job"]]++
				} else if strings.HasPrefix(t.Labels["pod"], "leasegate-webhook") || t.Labels["namespace"] == app {
					g.Expect(t.LastError).To(BeEmpty(), "target %s", t.ScrapeURL)
				}
			}
			g.Expect(up["leasegate-webhook"]).To(Equal(2))
			g.Expect(up["leasegate-agents"]).To(BeNumerically(">=", 3+2+1+1))
		}).WithTimeout(60 * time.Second).Should(Succeed())

		By("a fence denial moves leasegate_fence_decisions_total, and LeasegateFenceDenials goes pending, then fires")
		const denied = `sum(leasegate_fence_decisions_total{job="leasegate-webhook", guard="orders", outcome="denied"})`
		var before float64
		Eventually(func(g Gomega) {
			samples, err := prometheus.Query(ctx, denied)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(samples).To(HaveLen(1))
			before = samples[0].Float()
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			samples, err := prometheus.Query(ctx, denied)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(samples).To(HaveLen(1))
			g.Expect(samples[0].Float()).To(BeNumerically(">", before))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(func() time.Time { _, _, firing, _ := denials.times(); return firing }).WithTimeout(2 * time.Minute).ShouldNot(BeZero())
		denialsActive, denialsPending, denialsFiring, _ := denials.times()
		Expect(denialsPending).NotTo(BeZero(), "LeasegateFenceDenials fired without being seen pending for its %s", alertFor)
		Expect(denialsFiring.Sub(denialsActive)).To(BeNumerically(">=", 10*time.Second), "it fired before its `for` (active since %s)", denialsActive)

		By("both standby replicas frozen: nobody can take the lease, LeasegateNoLeader fires naming it")
		pods := listPods(Default, ctx, node, "standby")
		leaderName := holderPod(ctx, node, "standby")
		var leader, follower corev1.Pod
		for _, p := range pods {
			if p.Name == leaderName {
				leader = p
			} else {
				follower = p
			}
		}
		Expect(leader.Name).NotTo(BeEmpty())
		Expect(follower.Name).NotTo(BeEmpty())
		frozen := map[string][]string{}
		for _, p := range []corev1.Pod{leader, follower} {
			frozen[p.Name] = []string{containerID(&p, agentContainer), containerID(&p, "standby")}
			for _, id := range frozen[p.Name] {
				Expect(node.Freeze(id)).To(Succeed())
				DeferCleanup(func() { _ = node.Thaw(id) })
			}
		}
		frozeAt := time.Now()
		w := watchLease(ctx, node, "standby")
		Eventually(func() time.Time { _, _, firing, _ := noLeader.times(); return firing }).WithTimeout(2*time.Minute).ShouldNot(BeZero(),
			"LeasegateNoLeader never fired for %s/standby: does the webhook's scrape honour the leaderless gauge's namespace label?", app)

		By("the follower thawed: it takes the expired lease (a crash takeover), and the alert resolves")
		for _, id := range frozen[follower.Name] {
			Expect(node.Thaw(id)).To(Succeed())
		}
		change := nextHolder(w, lease.Identity(leader.Name, string(leader.UID)))
		Expect(change.Holder).To(Equal(lease.Identity(follower.Name, string(follower.UID))))
		// Thawed before kubelet's liveness probe (3 failures 10 s apart) would restart its agent.
		for _, id := range frozen[leader.Name] {
			Expect(node.Thaw(id)).To(Succeed())
		}
		Eventually(func() time.Time { _, _, _, resolved := noLeader.times(); return resolved }).WithTimeout(2 * time.Minute).ShouldNot(BeZero())
		Eventually(func(g Gomega) {
			samples, err := prometheus.Query(ctx, `sum(leasegate_agent_takeovers_total{lease="`+app+`/standby", kind="crash"})`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(samples).To(HaveLen(1))
			g.Expect(samples[0].Float()).To(BeNumerically(">=", 1), "the follower's agent counted a crash takeover")
		}).WithTimeout(30 * time.Second).Should(Succeed())

		_, noLeaderPending, noLeaderFiring, noLeaderResolved := noLeader.times()
		round := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
		figures.Value("Prometheus: LeasegateNoLeader (no `for`) firing after both replicas froze (lease 3s + margin 1s, budget 4s)", round(noLeaderFiring.Sub(frozeAt)))
		figures.Value("Prometheus: LeasegateNoLeader resolved after the takeover", round(noLeaderResolved.Sub(change.At)))
		figures.Value("Prometheus: LeasegateFenceDenials active -> firing (`for` shortened to "+alertFor+")", round(denialsFiring.Sub(denialsActive)))
		AddReportEntry("alerts", fmt.Sprintf("LeasegateNoLeader: pending %s, firing %s after the freeze, resolved %s after the takeover; "+
			"LeasegateFenceDenials: active at %s, seen pending at %s, firing at %s",
			stateSeen(noLeaderPending, frozeAt), round(noLeaderFiring.Sub(frozeAt)), round(noLeaderResolved.Sub(change.At)),
			denialsActive.Format(time.StampMilli), denialsPending.Format(time.StampMilli), denialsFiring.Format(time.StampMilli)))

		By("every query of the Grafana dashboard evaluates without error and returns data over the spec")
		queries, err := checkout.DashboardQueries(checkout.DashboardPath())
		Expect(err).NotTo(HaveOccurred())
		vars := map[string]string{"namespace": app, "lease": ".*", "job": "leasegate-webhook"}
		Eventually(func(g Gomega) {
			var empty []string
			for _, q := range queries {
				if strings.Contains(q.Expr, "leasegate_multicluster_") {
					// The node has no global etcd, so its webhook runs no multi-cluster election controller;
					// the multi-cluster e2e specs check that metric against a real backend they cut.
					continue
				}
				expr, err := checkout.Substitute(q.Expr, vars, "30s")
				g.Expect(err).NotTo(HaveOccurred())
				result, err := prometheus.QueryRange(ctx, expr, start, time.Now(), 2*time.Second)
				g.Expect(err).NotTo(HaveOccurred(), "panel %q query %s", q.Panel, q.RefID)
				if len(result) == 0 {
					empty = append(empty, fmt.Sprintf("%q %s: %s", q.Panel, q.RefID, expr))
				}
			}
			g.Expect(empty).To(BeEmpty(), "dashboard queries without data")
		}).WithTimeout(60 * time.Second).WithPolling(5 * time.Second).Should(Succeed())
		By("and its variables list what the cluster runs")
		for _, v := range []struct{ match, label, want string }{
			{"leasegate_injection_admissions_total", "job", "leasegate-webhook"},
			{"leasegate_agent_is_leader", "namespace", app},
			{`leasegate_agent_is_leader{namespace=~"` + app + `"}`, "lease", app + "/standby"},
		} {
			values, err := prometheus.LabelValues(ctx, v.match, v.label)
			Expect(err).NotTo(HaveOccurred())
			Expect(values).To(ContainElement(v.want), "label_values(%s, %s)", v.match, v.label)
		}
		AddReportEntry("dashboard", fmt.Sprintf("%d queries, each with data", len(queries)))
	})
}

// startPrometheus runs a real Prometheus on loopback with the chart's alerts (their `for` shortened to
// alertFor) and a scrape configuration that does what the chart's ServiceMonitor and PodMonitor make the
// Prometheus Operator do: the webhook over HTTPS, its certificate checked against the serving Secret's
// ca.crt, with the token of a service account bound to leasegate-metrics-reader and labels honoured; the
// agents over HTTP on their leasegate port.
func startPrometheus() *process.Prometheus {
	By("a service account bound to the chart's leasegate-metrics-reader ClusterRole, as Prometheus's own")
	_, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = node.Client.CoreV1().Namespaces().Delete(ctx, "monitoring", metav1.DeleteOptions{}) })
	_, err = node.Client.CoreV1().ServiceAccounts("monitoring").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = node.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-leasegate"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "leasegate-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		_ = node.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "prometheus-leasegate", metav1.DeleteOptions{})
	})
	token, err := node.Client.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, "prometheus",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	secret, err := node.Client.CoreV1().Secrets(leasegateNamespace).Get(ctx, "leasegate-webhook-tls", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())

	dir := GinkgoT().TempDir()
	rules, err := tools.AlertRules(dir)
	Expect(err).NotTo(HaveOccurred())
	Expect(string(rules)).To(ContainSubstring("for: 5m"))
	rules = []byte(strings.ReplaceAll(string(rules), "for: 5m", "for: "+alertFor))

	// The pinned Prometheus is built without service discovery but file and HTTP (-tags remove_all_sd):
	// the harness does the discovery a ServiceMonitor and a PodMonitor would (the webhook pods' metrics
	// port, every injected pod's leasegate port, with their namespace and pod as labels) into files
	// Prometheus watches.
	discoverTargets(dir)
	// The webhook's scrape is the chart's ServiceMonitor's: its scheme, server name and honoured labels.
	monitor, err := tools.ServiceMonitor(dir, leasegateNamespace)
	Expect(err).NotTo(HaveOccurred())
	Expect(monitor.Port).To(Equal("metrics"))
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
- job_name: leasegate-webhook
  honor_labels: %[2]t
  scheme: %[3]s
  authorization: {credentials_file: %[1]s/token}
  tls_config: {ca_file: %[1]s/webhook-ca.crt, server_name: %[4]s}
  file_sd_configs: [{files: [%[1]s/webhook-targets.json], refresh_interval: 1s}]
- job_name: leasegate-agents
  file_sd_configs: [{files: [%[1]s/agent-targets.json], refresh_interval: 1s}]
`, dir, monitor.HonorLabels, monitor.Scheme, monitor.TLSConfig.ServerName)
	By("Prometheus on loopback, scraping every second, evaluating the chart's rules every second")
	p, err := process.StartPrometheus(ctx, dir, config, map[string][]byte{
		"rules.yaml": rules, "token": []byte(token.Status.Token), "webhook-ca.crt": secret.Data["ca.crt"],
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			AddReportEntry("prometheus logs", p.Logs())
		}
	})
	return p
}

// alertWatch is what was seen of one alert (the one whose labels include labels) in the Prometheus API,
// polled every 100 ms: when it was first pending and firing, when it went after firing, and the activeAt
// Prometheus gave it (when its expression first held).
type alertWatch struct {
	labels map[string]string

	mu                                  sync.Mutex
	activeAt, pending, firing, resolved time.Time
}

// times returns what was seen so far.
func (w *alertWatch) times() (activeAt, pending, firing, resolved time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.activeAt, w.pending, w.firing, w.resolved
}

func (w *alertWatch) observe(alerts []process.Alert, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range alerts {
		match := true
		for k, v := range w.labels {
			match = match && a.Labels[k] == v
		}
		if !match {
			continue
		}
		if w.activeAt.IsZero() {
			w.activeAt = a.ActiveAt
		}
		if a.State == "pending" && w.pending.IsZero() {
			w.pending = now
		}
		if a.State == "firing" && w.firing.IsZero() {
			w.firing = now
		}
		return
	}
	if !w.firing.IsZero() && w.resolved.IsZero() {
		w.resolved = now
	}
}

// watchAlerts polls the server's alerts for watches from now until the spec ends.
func watchAlerts(p *process.Prometheus, watches ...*alertWatch) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if alerts, err := p.Alerts(ctx); err == nil {
				now := time.Now()
				for _, w := range watches {
					w.observe(alerts, now)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	DeferCleanup(func() {
		close(done)
		<-stopped
	})
}

// stateSeen says when a state was first seen after since, or that it was never seen.
func stateSeen(at, since time.Time) string {
	if at.IsZero() {
		return "never seen (an alert without `for` fires at its first evaluation)"
	}
	return at.Sub(since).Round(100 * time.Millisecond).String()
}

// discoverTargets writes, every 500 ms until the spec ends, the scrape targets a ServiceMonitor on the
// webhook's Service and the chart's PodMonitor select, as Prometheus file_sd target groups in dir:
// webhook-targets.json and agent-targets.json.
func discoverTargets(dir string) {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	port := func(p corev1.Pod, name string) int32 {
		for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			for _, cp := range c.Ports {
				if cp.Name == name {
					return cp.ContainerPort
				}
			}
		}
		return 0
	}
	targets := func(pods []corev1.Pod, portName string) []group {
		groups := []group{}
		for _, p := range pods {
			if n := port(p, portName); n != 0 && p.Status.PodIP != "" {
				groups = append(groups, group{Targets: []string{net.JoinHostPort(p.Status.PodIP, fmt.Sprint(n))},
					Labels: map[string]string{"namespace": p.Namespace, "pod": p.Name}})
			}
		}
		return groups
	}
	write := func(name string, groups []group) error {
		data, err := json.Marshal(groups)
		if err != nil {
			return err
		}
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(dir, name)) // Prometheus never reads half a file
	}
	discover := func() error {
		webhooks, err := node.Client.CoreV1().Pods(leasegateNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=leasegate-webhook"})
		if err != nil {
			return err
		}
		agents, err := node.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "leasegate.io/injected=true"})
		if err != nil {
			return err
		}
		return errors.Join(write("webhook-targets.json", targets(webhooks.Items, "metrics")), write("agent-targets.json", targets(agents.Items, "leasegate")))
	}
	Expect(discover()).To(Succeed())
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
				_ = discover() // an API error is retried at the next tick
			}
		}
	}()
	DeferCleanup(func() {
		close(done)
		<-stopped
	})
}
