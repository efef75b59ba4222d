package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/leasegate/leasegate/internal/globalelection"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/pkg/multicluster"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
	"github.com/leasegate/leasegate/test/fixtures/guardedwrite"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/etcdcluster"
	"github.com/leasegate/leasegate/test/framework/process"
	"github.com/leasegate/leasegate/test/framework/relay"
	"github.com/leasegate/leasegate/test/framework/report"
)

// The multi-cluster timing: a 5 s lease duration is the backend TTL; candidates renew every 0.5 s and
// give up after 3 s, so that a retry period plus a renew deadline (3.5 s) fits inside the 4.5 s a
// confirmed heartbeat lets them act (ConfirmedFor: the TTL less the 10% clock rate error).
const (
	mclLeaseDuration = 5 * time.Second
	mclRenewDeadline = 3 * time.Second
	mclRetryPeriod   = 500 * time.Millisecond
	mclNamespace     = "default"
)

// mclCluster is one member cluster: its own kube-apiserver and etcd (envtest), its election controller
// in this process with a clock the spec may skew, and a TCP proxy per global etcd member, so that the
// controller's path to the global backend can be cut.
type mclCluster struct {
	name    string
	plane   *process.ControlPlane
	proxies []*relay.Proxy
	client  client.Client

	stopController context.CancelFunc
	controllerDone chan struct{}
}

// mclCandidate is one replica running client-go's leader elector with the library's lock. acting is true
// from OnStartedLeading until its context ends: what a controller built on client-go believes.
type mclCandidate struct {
	cluster *mclCluster
	id      string
	lock    *crashableLock
	acting  atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

var (
	multiclusterRuns    = flag.Int("multicluster.runs", 1, "handovers, crashes and partitions per measured figure in the multi-cluster specs (`make bench`: 20)")
	multiclusterReport  = flag.String("multicluster.report", "", "write the multi-cluster figures as a markdown table to this file")
	multiclusterFigures report.FigureTable
)

var _ = Describe("One leader across clusters", Label("multicluster"), Ordered, func() {
	var (
		etcd *etcdcluster.Cluster
		a, b *mclCluster
	)

	BeforeAll(func(ctx SpecContext) {
		// client-go's request logging goes through controller-runtime's logger in this process.
		ctrl.SetLogger(logr.Discard())
		dir := GinkgoT().TempDir()
		By("starting a three-member etcd cluster with TLS as the global backend")
		var err error
		etcd, err = etcdcluster.Start(filepath.Join(dir, "global-etcd"), 3)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(etcd.Stop)

		By("starting two clusters, each with its own control plane and election controller")
		for _, name := range []string{"a", "b"} {
			c := &mclCluster{name: name}
			c.plane, err = process.StartControlPlane(filepath.Join(checkout.RepoRoot(), "config", "crd"))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(c.plane.Stop)
			for i := range 3 {
				p, err := relay.StartProxy(etcd.Member(i).ClientAddr)
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(p.Close)
				c.proxies = append(c.proxies, p)
			}
			c.client, err = client.New(c.plane.Config, client.Options{Scheme: mclScheme()})
			Expect(err).NotTo(HaveOccurred())
			c.startController(etcd, clock.RealClock{})
			DeferCleanup(c.stop)
			if name == "a" {
				a = c
			} else {
				b = c
			}
		}
	})

	// startWatched starts inA candidates in A and inB in B on a new election, and a monitor of their
	// claims; both end with the spec.
	startWatched := func(inA, inB int) ([]*mclCandidate, *twoLeaders) {
		candidates := startCandidates(a, inA, b, inB)
		DeferCleanup(stopAll, candidates)
		monitor := watchForTwoLeaders(candidates)
		DeferCleanup(monitor.stop)
		return candidates, monitor
	}

	AfterAll(func() {
		if multiclusterFigures.Empty() {
			return
		}
		table := multiclusterFigures.Markdown(fmt.Sprintf("Two clusters on a three-member etcd (TTL 5 s), %d runs per failover figure", *multiclusterRuns))
		AddReportEntry("multi-cluster figures", table)
		if *multiclusterReport != "" {
			Expect(os.WriteFile(*multiclusterReport, []byte(table), 0o644)).To(Succeed())
		}
	})

	It("elects one global leader among three candidates in A and two in B, and every view agrees", func(ctx SpecContext) {
		candidates := startCandidates(a, 3, b, 2)
		DeferCleanup(stopAll, candidates)
		leader := eventuallySoleLeader(candidates, 15*time.Second)

		By("both clusters' status naming the same holder and term, and only the leader's cluster letting it act")
		Eventually(func(g Gomega) {
			sa, sb := a.status(ctx, g), b.status(ctx, g)
			g.Expect(sa.GlobalHolder).To(Equal(leader.id))
			g.Expect(sb.GlobalHolder).To(Equal(leader.id))
			g.Expect(sa.FencingToken).To(Equal(sb.FencingToken))
			g.Expect(sa.HolderCluster).To(Equal(leader.cluster.name))
			for _, c := range []*mclCluster{a, b} {
				s := c.status(ctx, g)
				if c == leader.cluster {
					g.Expect(s.LocalLeader(time.Now())).To(Equal(leader.id))
				} else {
					g.Expect(s.ValidUntil).To(BeNil())
					g.Expect(s.LocalLeader(time.Now())).To(BeEmpty())
				}
			}
		}, 5*time.Second, 50*time.Millisecond).Should(Succeed())

		By("every candidate's view agreeing for two more seconds")
		Consistently(func() []string { return actingIDs(candidates) }, 2*time.Second, 20*time.Millisecond).Should(Equal([]string{leader.id}))
	})

	It("hands over across clusters in under a second when the leader releases, and takes over after a crash within the TTL plus 2 s", func(ctx SpecContext) {
		candidates := startCandidates(a, 1, b, 1)
		DeferCleanup(func() { stopAll(candidates) })
		monitor := watchForTwoLeaders(candidates)
		DeferCleanup(monitor.stop)
		tokens := &tokenWatch{}
		var handovers, takeovers []time.Duration
		for run := range 2 * *multiclusterRuns {
			graceful := run%2 == 0
			leader := eventuallySoleLeader(candidates, 15*time.Second)
			tokens.observe(ctx, a, b)
			other := otherThan(candidates, leader)
			By(fmt.Sprintf("run %d: %s, the leader, stops (released: %v)", run, leader.id, graceful))
			stopped := time.Now()
			leader.stop(graceful)
			Eventually(other.acting.Load, mclLeaseDuration+5*time.Second, 5*time.Millisecond).Should(BeTrue())
			if took := time.Since(stopped); graceful {
				handovers = append(handovers, took)
				Expect(took).To(BeNumerically("<", time.Second), "a released lease changes cluster in under a second")
			} else {
				takeovers = append(takeovers, took)
				Expect(took).To(BeNumerically("<", mclLeaseDuration+2*time.Second), "a crashed leader is replaced within the TTL plus 2 s")
			}
			By("a new candidate standing by where the leader was")
			next := startCandidate(leader.cluster, fmt.Sprintf("%s-%d", leader.cluster.name, run+1))
			candidates = append(slices.DeleteFunc(candidates, func(c *mclCandidate) bool { return c == leader }), next)
			monitor.follow(candidates)
			Eventually(func() bool { return next.standing(ctx) }, 10*time.Second, 20*time.Millisecond).Should(BeTrue())
		}
		tokens.observe(ctx, a, b)
		multiclusterFigures.Durations("graceful handover across clusters (release)", handovers)
		multiclusterFigures.Durations(fmt.Sprintf("crash takeover across clusters (TTL %s)", mclLeaseDuration), takeovers)
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("stops the leader's cluster before the other can win when it is cut off from etcd, and it follows once healed", func(ctx SpecContext) {
		candidates, monitor := startWatched(1, 1)
		var stepDowns, margins []time.Duration
		for run := range *multiclusterRuns {
			leader := eventuallySoleLeader(candidates, 15*time.Second)
			cut, other := leader.cluster, otherThan(candidates, leader)

			By(fmt.Sprintf("run %d: black-holing %s's path to every etcd member", run, cut.name))
			partitioned := time.Now()
			cut.partition()
			DeferCleanup(cut.heal)
			Eventually(leader.acting.Load, mclLeaseDuration, 10*time.Millisecond).Should(BeFalse())
			stepDown := time.Since(partitioned)
			Eventually(other.acting.Load, 3*mclLeaseDuration, 10*time.Millisecond).Should(BeTrue())
			takeover := time.Since(partitioned)
			Expect(stepDown).To(BeNumerically("<", takeover))
			stepDowns, margins = append(stepDowns, stepDown), append(margins, takeover-stepDown)
			Eventually(cut.backendReachable, 10*time.Second, 50*time.Millisecond).Should(Equal(0.0), "the metric says the cut cluster's controller cannot reach the backend")
			Expect(other.cluster.backendReachable()).To(Equal(1.0))

			By("healing: the cut cluster follows the new leader")
			cut.heal()
			Eventually(func(g Gomega) {
				g.Expect(cut.status(ctx, g).GlobalHolder).To(Equal(other.id))
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
			Eventually(cut.backendReachable, 10*time.Second, 50*time.Millisecond).Should(Equal(1.0))
			Consistently(leader.acting.Load, time.Second, 20*time.Millisecond).Should(BeFalse())
		}
		multiclusterFigures.Durations("partition: the cut leader stops acting", stepDowns)
		multiclusterFigures.Durations("partition: from the cut leader's stop to the other cluster's start (margin)", margins)
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("has nobody lead while etcd has no quorum, and recovers by itself when it returns", func(ctx SpecContext) {
		candidates, monitor := startWatched(1, 1)
		eventuallySoleLeader(candidates, 15*time.Second)

		By("killing two of the three etcd members")
		for _, i := range []int{1, 2} {
			Expect(etcd.Kill(i)).To(Succeed())
		}
		// The leader's last confirmed heartbeat may have been renewed in etcd up to an etcd election timeout
		// after the kill (the surviving member leads until it notices it has lost quorum); client-go then
		// stops a retry period plus a renew deadline later, after its release: within the TTL on an idle
		// machine, with 2 s of slack for a loaded one, as the crash takeover has.
		killed := time.Now()
		Eventually(actingIDs, mclLeaseDuration+2*time.Second, 20*time.Millisecond).WithArguments(candidates).Should(BeEmpty())
		AddReportEntry("multicluster quorum lost", fmt.Sprintf("nobody acts %s after the kill", time.Since(killed)))
		Consistently(actingIDs, 2*time.Second, 20*time.Millisecond).WithArguments(candidates).Should(BeEmpty())

		By("restarting them: a leader again, without anyone's help")
		for _, i := range []int{1, 2} {
			Expect(etcd.Restart(i)).To(Succeed())
		}
		eventuallySoleLeader(candidates, 3*mclLeaseDuration)
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("never lets a candidate cut off while it waited claim a key freed meanwhile (no phantom leadership)", func(ctx SpecContext) {
		candidates, monitor := startWatched(1, 1)
		leader := eventuallySoleLeader(candidates, 15*time.Second)
		waiting := otherThan(candidates, leader)

		By("cutting the waiting cluster off for longer than the TTL, then deleting the leader's key")
		waiting.cluster.partition()
		DeferCleanup(waiting.cluster.heal)
		time.Sleep(mclLeaseDuration + time.Second)
		admin, err := etcd.Client()
		Expect(err).NotTo(HaveOccurred())
		defer admin.Close()
		_, err = admin.Delete(ctx, globalelection.Key(currentNamespace, currentElection))
		Expect(err).NotTo(HaveOccurred())
		Consistently(waiting.acting.Load, 2*time.Second, 20*time.Millisecond).Should(BeFalse())

		By("healing: the waiting cluster follows whoever holds the key now")
		waiting.cluster.heal()
		Eventually(func(g Gomega) {
			s := waiting.cluster.status(ctx, g)
			g.Expect(s.GlobalHolder).NotTo(BeEmpty())
			g.Expect(s.GlobalHolder).To(Equal(leader.id))
		}, 3*mclLeaseDuration, 50*time.Millisecond).Should(Succeed())
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("never publishes a validUntil past the term's etcd lease, though the spec's duration is lengthened mid-term", func(ctx SpecContext) {
		newElection()
		key := client.ObjectKey{Namespace: currentNamespace, Name: currentElection}
		// heartbeat writes A's spec as a candidate of A does, holding it for seconds, renewed now.
		heartbeat := func(seconds int32) {
			GinkgoHelper()
			Eventually(func() error {
				mcl := &v1alpha1.MultiClusterLease{}
				now := metav1.NewMicroTime(time.Now())
				spec := v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To("a-hand"), LeaseDurationSeconds: ptr.To(seconds), RenewTime: &now, AcquireTime: &now}
				if err := a.client.Get(ctx, key, mcl); err != nil {
					mcl = &v1alpha1.MultiClusterLease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: spec}
					return a.client.Create(ctx, mcl)
				}
				spec.AcquireTime = mcl.Spec.AcquireTime
				mcl.Spec = spec
				return a.client.Update(ctx, mcl)
			}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
		}
		DeferCleanup(func(ctx SpecContext) {
			mcl := &v1alpha1.MultiClusterLease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
			Expect(client.IgnoreNotFound(a.client.Delete(ctx, mcl))).To(Succeed())
		})
		// confirmed waits for the controller to publish its judgement of the spec as it is now.
		confirmed := func() v1alpha1.MultiClusterLeaseStatus {
			GinkgoHelper()
			mcl := &v1alpha1.MultiClusterLease{}
			Eventually(func(g Gomega) {
				g.Expect(a.client.Get(ctx, key, mcl)).To(Succeed())
				g.Expect(mcl.Status.ObservedGeneration).To(Equal(mcl.Generation))
				g.Expect(mcl.Status.LocalLeader(time.Now())).To(Equal("a-hand"))
			}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
			return mcl.Status
		}

		By("a candidate of A winning the term with the suite's TTL")
		heartbeat(int32(mclLeaseDuration / time.Second))
		confirmed()
		admin, err := etcd.Client()
		Expect(err).NotTo(HaveOccurred())
		defer admin.Close()
		held, err := admin.Get(ctx, globalelection.Key(currentNamespace, currentElection))
		Expect(err).NotTo(HaveOccurred())
		Expect(held.Kvs).To(HaveLen(1))
		granted, err := admin.TimeToLive(ctx, clientv3.LeaseID(held.Kvs[0].Lease))
		Expect(err).NotTo(HaveOccurred())
		Expect(time.Duration(granted.GrantedTTL) * time.Second).To(Equal(mclLeaseDuration))

		By("the spec lengthened to an hour: each confirmation publishes a validUntil within the etcd lease's TTL")
		for range 3 {
			sent := time.Now()
			heartbeat(3600)
			s := confirmed()
			Expect(s.ValidUntil.Time).To(BeTemporally("<=", time.Now().Add(mclLeaseDuration)),
				"validUntil %s, %s after the heartbeat, outlasts the etcd lease of %s", s.ValidUntil.Time, s.ValidUntil.Time.Sub(sent), mclLeaseDuration)
			time.Sleep(time.Second)
		}
	})

	It("keeps its leader when an etcd member dies, and never has two when the etcd leader dies", func(ctx SpecContext) {
		candidates, monitor := startWatched(1, 1)
		leader := eventuallySoleLeader(candidates, 15*time.Second)

		etcdLeader, err := etcd.LeaderIndex(ctx)
		Expect(err).NotTo(HaveOccurred())
		follower := (etcdLeader + 1) % 3
		By(fmt.Sprintf("killing etcd member %d, a follower", follower))
		Expect(etcd.Kill(follower)).To(Succeed())
		Consistently(actingIDs, 3*time.Second, 20*time.Millisecond).WithArguments(candidates).Should(Equal([]string{leader.id}))
		Expect(etcd.Restart(follower)).To(Succeed())

		By("killing the etcd leader")
		etcdLeader, err = etcd.LeaderIndex(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(etcd.Kill(etcdLeader)).To(Succeed())
		DeferCleanup(func() { _ = etcd.Restart(etcdLeader) })
		killed := time.Now()
		Consistently(func() int { return len(actingIDs(candidates)) }, 3*time.Second, 20*time.Millisecond).Should(BeNumerically("<=", 1))
		Eventually(func() []string { return actingIDs(candidates) }, 3*mclLeaseDuration, 20*time.Millisecond).Should(HaveLen(1))
		AddReportEntry("multicluster etcd leader killed", fmt.Sprintf("a global leader acting again %s after the kill", time.Since(killed)))
		Expect(monitor.overlaps()).To(BeEmpty())
		Expect(etcd.Restart(etcdLeader)).To(Succeed())
	})

	It("refuses, in A's own API server, the writes of A's old leader once B's candidate has won", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		By("running leasegate-webhook on A's API server, a guard on the MultiClusterLease")
		binary, err := checkout.BuildWebhook(dir)
		Expect(err).NotTo(HaveOccurred())
		fence, err := a.plane.StartWebhook(ctx, binary, dir, leasegateNamespace)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fence.Stop)
		const ns = "shop"
		Expect(a.plane.CreateNamespace(ctx, ns)).To(Succeed())
		Expect(b.plane.CreateNamespace(ctx, ns)).To(Succeed())
		currentNamespace = ns
		DeferCleanup(func() { currentNamespace = mclNamespace })
		pod, err := a.plane.CreatePod(ctx, ns, "a-0", dir, "")
		Expect(err).NotTo(HaveOccurred())
		podClient, _ := clientFor(pod.Kubeconfig)

		candidates := startCandidates(a, 1, b, 0)
		DeferCleanup(stopAll, candidates)
		Eventually(candidates[0].acting.Load, 15*time.Second, 20*time.Millisecond).Should(BeTrue())
		_, err = a.plane.Client.CoreV1().ConfigMaps(leasegateNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"},
			Data: map[string]string{"config.yaml": fmt.Sprintf(`election: {clockSkewMargin: 500ms}
guards:
- name: orders
  lease: %s
  leaseKind: MultiClusterLease
  holderFormat: pod-name
  serviceAccounts: [%s]
  resources: [{group: "", resources: [configmaps]}]
  namespaces: [%s]
`, currentElection, process.ServiceAccountName, ns)},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		By("the global leader a-0 writing through A's API server")
		Eventually(func() error {
			return guardedwrite.ConfigMap(ctx, podClient, ns, "orders", "a-0")
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("cutting A off from etcd until B's candidate wins")
		standby := startCandidate(b, "b-0")
		DeferCleanup(standby.stop, true)
		before := a.statusIn(ctx, ns).FencingToken
		a.partition()
		DeferCleanup(a.heal)
		Eventually(standby.acting.Load, 3*mclLeaseDuration, 10*time.Millisecond).Should(BeTrue())
		err = guardedwrite.ConfigMap(ctx, podClient, ns, "orders", "a-0")
		Expect(err).To(MatchError(And(ContainSubstring("held by a-0 of cluster a"), ContainSubstring("no pod of this cluster leads the MultiClusterLease now"))),
			"A's controller cannot know B won, but the term it confirmed has passed its validUntil")

		By("healing: A's status names B's leader, and A's API server names it in the denial")
		a.heal()
		Eventually(func() error {
			return guardedwrite.ConfigMap(ctx, podClient, ns, "orders", "a-0")
		}, 10*time.Second, 100*time.Millisecond).Should(MatchError(ContainSubstring("held by b-0 of cluster b")))
		after := a.statusIn(ctx, ns).FencingToken
		Expect(after).To(BeNumerically(">", before), "the fencing token grows with the new term")
	})

	It("runs a controller-runtime manager's runnables in exactly one cluster at a time, with the library as its lock", func(ctx SpecContext) {
		newElection()
		managers := []*mclCandidate{startManager(a, "mgr-a"), startManager(b, "mgr-b")}
		DeferCleanup(stopAll, managers)
		monitor := watchForTwoLeaders(managers)
		DeferCleanup(monitor.stop)
		leader := eventuallySoleLeader(managers, 20*time.Second)
		other := otherThan(managers, leader)
		By("stopping the leading manager: the other cluster's runs its runnables")
		leader.stop(true)
		Eventually(other.acting.Load, 10*time.Second, 10*time.Millisecond).Should(BeTrue())
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("elects across clusters with the agents the injector adds to pods that ask for a MultiClusterLease, each authenticating as its pod", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		agentBinary, err := checkout.BuildAgent(dir)
		Expect(err).NotTo(HaveOccurred())
		webhookBinary, err := checkout.BuildWebhook(dir)
		Expect(err).NotTo(HaveOccurred())
		const ns = "agents"
		newElection()
		var agents []*process.Agent
		clusterOf := map[*process.Agent]*mclCluster{}
		for _, c := range []*mclCluster{a, b} {
			By("injecting and provisioning in cluster " + c.name + " through its own leasegate-webhook")
			clusterDir := filepath.Join(dir, c.name)
			Expect(os.Mkdir(clusterDir, 0o700)).To(Succeed())
			wh, err := c.plane.StartWebhook(ctx, webhookBinary, clusterDir, leasegateNamespace)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(wh.Stop)
			Expect(c.plane.CreateNamespace(ctx, ns)).To(Succeed())
			var pods []*corev1.Pod
			for i := range map[*mclCluster]int{a: 2, b: 1}[c] {
				pod, err := c.plane.Client.CoreV1().Pods(ns).Create(ctx, multiClusterPod(fmt.Sprintf("%s-agent-%d", c.name, i)), metav1.CreateOptions{})
				Expect(err).NotTo(HaveOccurred())
				Expect(pod.Annotations).To(HaveKeyWithValue("leasegate.io/status", ContainSubstring(`"leaseKind":"MultiClusterLease"`)))
				pods = append(pods, pod)
			}
			Eventually(func(g Gomega) {
				m := &v1alpha1.MultiClusterLease{}
				g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: currentElection}, m)).To(Succeed())
				g.Expect(m.Labels).To(HaveKeyWithValue("leasegate.io/managed", "true"))
				g.Expect(c.podsMayUpdate(ctx, ns, "", currentElection)).To(BeTrue(),
					"the pods' service account may renew their MultiClusterLease's spec")
			}, 10*time.Second, 100*time.Millisecond).Should(Succeed(), "provisioned: the MultiClusterLease and a Role on it by name")
			Expect(c.podsMayUpdate(ctx, ns, "status", currentElection)).To(BeFalse(),
				"status is the election controller's alone")
			Expect(c.podsMayUpdate(ctx, ns, "", currentElection+"-other")).To(BeFalse(),
				"no right on a MultiClusterLease the pods do not use")
			for _, pod := range pods {
				identity, err := c.plane.PodIdentity(ctx, pod, clusterDir, "")
				Expect(err).NotTo(HaveOccurred())
				agent, err := process.StartInjectedAgent(agentBinary, pod, identity)
				Expect(err).NotTo(HaveOccurred())
				stopAtCleanup(agent)
				agents = append(agents, agent)
				clusterOf[agent] = c
			}
		}
		claims, _ := sampleAgentClaims(agents)

		leader := soleAgentLeader(agents, 20*time.Second)
		Eventually(func(g Gomega) {
			for _, agent := range agents {
				status, err := agent.Leader()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(status.GlobalHolder).To(Equal(leader.Pod.Identity()), "every agent names the global leader")
				m := &v1alpha1.MultiClusterLease{}
				g.Expect(clusterOf[agent].client.Get(ctx, client.ObjectKey{Namespace: ns, Name: currentElection}, m)).To(Succeed())
				g.Expect(status.FencingToken).To(And(BeNumerically(">", 0), Equal(m.Status.FencingToken)),
					"every agent's fencing token is the term's, status.fencingToken")
			}
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		firstTerm, err := leader.Leader()
		Expect(err).NotTo(HaveOccurred())
		By("the metrics tell each cluster's candidate from the global leader")
		Eventually(func(g Gomega) {
			candidates := map[*mclCluster]int{}
			for _, agent := range agents {
				candidate, err := agent.Metric("leasegate_agent_is_local_candidate")
				g.Expect(err).NotTo(HaveOccurred())
				leading, err := agent.Metric("leasegate_agent_is_leader")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(leading).To(Equal(map[bool]float64{true: 1, false: 0}[agent == leader]), "is_leader of %s", agent.Pod.Name)
				if candidate == 1 {
					candidates[clusterOf[agent]]++
				}
			}
			g.Expect(candidates).To(Equal(map[*mclCluster]int{a: 1, b: 1}), "one local candidate per cluster, the leader among them")
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("SIGKILL of the leading agent: another takes over within the TTL plus 2 s")
		killed := time.Now()
		Expect(leader.Signal(syscall.SIGKILL)).To(Succeed())
		rest := slices.DeleteFunc(slices.Clone(agents), func(x *process.Agent) bool { return x == leader })
		next := soleAgentLeader(rest, mclLeaseDuration+5*time.Second)
		crash := time.Since(killed)
		Expect(crash).To(BeNumerically("<", mclLeaseDuration+2*time.Second))
		Expect(next.Leader()).To(HaveField("FencingToken", BeNumerically(">", firstTerm.FencingToken)), "a new term, a higher token")

		By("SIGTERM of the new leader: it releases, and the next leads in under a second")
		last := slices.DeleteFunc(slices.Clone(rest), func(x *process.Agent) bool { return x == next })
		for _, agent := range last {
			// The killed leader's local claim lasts its lease duration and clock skew margin in its own
			// cluster: the handover measured is the one across clusters, to a candidate that stands.
			Eventually(func(g Gomega) string {
				m := &v1alpha1.MultiClusterLease{}
				g.Expect(clusterOf[agent].client.Get(ctx, client.ObjectKey{Namespace: ns, Name: currentElection}, m)).To(Succeed())
				return ptr.Deref(m.Spec.HolderIdentity, "")
			}, 2*mclLeaseDuration, 20*time.Millisecond).Should(BeElementOf(identities(last)), "cluster %s has a live candidate", clusterOf[agent].name)
		}
		terminated := time.Now()
		Expect(next.Signal(syscall.SIGTERM)).To(Succeed())
		soleAgentLeader(last, 5*time.Second)
		handover := time.Since(terminated)
		AddReportEntry("multicluster agents", fmt.Sprintf("crash takeover %s, release handover %s", crash, handover))
		Expect(handover).To(BeNumerically("<", time.Second))
		_, overlaps := claims.Stop()
		Expect(overlaps).To(BeEmpty())
	})

	It("never reports stale leadership from a controller process paused past the backend lease (SIGSTOP, then SIGCONT)", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		By("running A's election controller in leasegate-webhook, a process of its own")
		a.stop()
		DeferCleanup(a.startController, etcd, clock.RealClock{})
		binary, err := checkout.BuildWebhook(dir)
		Expect(err).NotTo(HaveOccurred())
		controller, err := a.plane.StartWebhook(ctx, binary, dir, leasegateNamespace, "--leader-elect=false",
			"--multicluster-cluster-name="+a.name, "--multicluster-etcd-endpoints="+strings.Join(a.etcdEndpoints(), ","),
			"--multicluster-etcd-cert-dir="+etcdClientCertDir(dir, etcd))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			controller.Stop()
			if CurrentSpecReport().Failed() {
				AddReportEntry("A's leasegate-webhook logs", controller.Logs())
			}
		})
		DeferCleanup(controller.Signal, syscall.SIGCONT) // first, should the spec fail while it is stopped

		newElection()
		inA := startCandidate(a, "a-0")
		DeferCleanup(stopAll, []*mclCandidate{inA})
		Eventually(inA.acting.Load, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "A's candidate leads, confirmed by the controller process")
		inB := startCandidate(b, "b-0")
		DeferCleanup(stopAll, []*mclCandidate{inB})
		monitor := watchForTwoLeaders([]*mclCandidate{inA, inB})
		DeferCleanup(monitor.stop)
		stale := sampleStaleLeadership(ctx, a, "a-0", inB)
		DeferCleanup(stale.stop)

		By("SIGSTOP of A's controller: B's candidate wins once the backend lease has expired")
		Expect(controller.Signal(syscall.SIGSTOP)).To(Succeed())
		stopped := time.Now()
		Eventually(inB.acting.Load, 3*mclLeaseDuration, 10*time.Millisecond).Should(BeTrue())
		multiclusterFigures.Value("controller SIGSTOPped: the other cluster leads after", report.RoundDuration(time.Since(stopped)).String())
		time.Sleep(time.Until(stopped.Add(mclLeaseDuration + time.Second))) // past the backend lease, whatever the takeover took

		By("SIGCONT: A's status never names a-0 as leader while B leads, and comes to name b-0")
		Expect(controller.Signal(syscall.SIGCONT)).To(Succeed())
		Eventually(func(g Gomega) {
			status := a.status(ctx, g)
			g.Expect(status.GlobalHolder).To(Equal("b-0"))
			g.Expect(status.HolderCluster).To(Equal(b.name))
		}, 3*mclLeaseDuration, 50*time.Millisecond).Should(Succeed())
		Consistently(inA.acting.Load, mclLeaseDuration, 20*time.Millisecond).Should(BeFalse(), "A's candidate stands again but waits")
		stale.stop()
		Expect(stale.findings()).To(BeEmpty())
		Expect(monitor.overlaps()).To(BeEmpty())
		rss, err := controller.RSSBytes()
		Expect(err).NotTo(HaveOccurred())
		multiclusterFigures.Value("leasegate-webhook RSS with the election controller (all caches, one MultiClusterLease)", fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)))
	})

	It("never has two leaders with one controller's clock an hour ahead and running 10% fast, and another's 10% slow", func(ctx SpecContext) {
		b.stop()
		b.startController(etcd, &skewedClock{start: time.Now(), offset: time.Hour, rate: 1.1})
		a.stop()
		a.startController(etcd, &skewedClock{start: time.Now(), offset: -time.Minute, rate: 0.9})
		DeferCleanup(func() {
			a.stop()
			a.startController(etcd, clock.RealClock{})
			b.stop()
			b.startController(etcd, clock.RealClock{})
		})
		candidates, monitor := startWatched(1, 1)
		for round := range 2 {
			leader := eventuallySoleLeader(candidates, 15*time.Second)
			By(fmt.Sprintf("round %d: cutting %s's controller off from etcd", round, leader.cluster.name))
			leader.cluster.partition()
			Eventually(otherThan(candidates, leader).acting.Load, 3*mclLeaseDuration, 10*time.Millisecond).Should(BeTrue())
			leader.cluster.heal()
		}
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("lets a waiting standby use a term won anywhere in its wait, and logs the handover as a function of when in the wait the release comes", func(ctx SpecContext) {
		candidates, monitor := startWatched(1, 1)
		// A standby's cycle under client-go: an Update (the fast path) waits up to the confirm timeout,
		// the slow path's Update waits again, then client-go sleeps a retry period (with jitter) before
		// the next cycle. The offsets cover the whole cycle from the start of its first wait.
		var offsets []time.Duration
		for offset := time.Duration(0); offset <= 2*mclRenewDeadline/2+2*mclRetryPeriod; offset += 250 * time.Millisecond {
			for range *multiclusterRuns {
				offsets = append(offsets, offset)
			}
		}
		type point struct {
			offset, handover time.Duration
			inWait           bool
		}
		var curve []point
		all := slices.Clone(candidates)
		for run, offset := range offsets {
			leader := eventuallySoleLeader(candidates, 15*time.Second)
			standby := otherThan(candidates, leader)
			began, inWait := standby.lock.cycleStart(ctx, offset)
			time.Sleep(time.Until(began.Add(offset)))
			released := time.Now()
			leader.stop(true)
			Eventually(standby.acting.Load, 3*mclLeaseDuration, 2*time.Millisecond).Should(BeTrue())
			curve = append(curve, point{offset, time.Since(released), inWait()})

			next := startCandidate(leader.cluster, fmt.Sprintf("%s-%d", leader.cluster.name, run+1))
			candidates = append(slices.DeleteFunc(candidates, func(c *mclCandidate) bool { return c == leader }), next)
			all = append(all, next)
			monitor.follow(candidates)
			Eventually(func() bool { return next.standing(ctx) }, 10*time.Second, 20*time.Millisecond).Should(BeTrue())
		}
		var report strings.Builder
		var inWait []time.Duration
		fmt.Fprintf(&report, "release at, after the start of the standby's cycle | handover | the standby was waiting\n")
		for _, p := range curve {
			fmt.Fprintf(&report, "%s | %s | %v\n", p.offset, p.handover.Round(time.Millisecond), p.inWait)
			if p.inWait {
				inWait = append(inWait, p.handover)
			}
		}
		AddReportEntry("multicluster handover curve", report.String())
		multiclusterFigures.Durations("graceful handover, the release coming while the standby waits", inWait)
		// A won term is refused only when the API server or the controller is too slow for the extra
		// heartbeat's round (a loaded machine under -race can be): reported, not failed. Any other refusal
		// of a won term (as the rule's "lengthen the lease duration" once was) fails the spec.
		var slow []string
		for _, c := range all {
			for _, refusal := range c.lock.refusals() {
				if strings.Contains(refusal, "confirmed afresh failed") || strings.Contains(refusal, "is slow") {
					slow = append(slow, refusal)
					continue
				}
				Fail(fmt.Sprintf("a term the controller won for %s was refused: %s", c.id, refusal))
			}
		}
		AddReportEntry("won terms refused because the API server or the controller was slow", slow)
		Expect(monitor.overlaps()).To(BeEmpty())
	})

	It("hands a released term to the waiting cluster, not to a follower of the releasing cluster that takes its spec at once", func(ctx SpecContext) {
		for run := range max(5, *multiclusterRuns) {
			newElection()
			leader := startCandidate(a, "a-0")
			Eventually(leader.acting.Load, 15*time.Second, 10*time.Millisecond).Should(BeTrue())
			standby := startCandidate(b, "b-0")
			candidates := []*mclCandidate{leader, standby}
			DeferCleanup(stopAll, candidates)
			Eventually(func() bool { return standby.standing(ctx) }, 10*time.Second, 20*time.Millisecond).Should(BeTrue())
			follower := a.takeSpecOnRelease(ctx, "a-1")

			By(fmt.Sprintf("run %d: a-0 releases; a-1 takes A's spec the moment it is free", run))
			leader.stop(true)
			Eventually(standby.acting.Load, 10*time.Second, 5*time.Millisecond).Should(BeTrue())
			// A's spec stays free until a-1 takes it; on a loaded machine that may be after B acts, and
			// the term must stay with B either way.
			Eventually(follower.took.Load, 10*time.Second, 5*time.Millisecond).Should(BeTrue(), "a-1 stands for cluster A on the free spec")
			Expect(follower.stop()).To(BeTrue())
			Eventually(func(g Gomega) {
				s := a.status(ctx, g)
				g.Expect(s.GlobalHolder).To(Equal("b-0"))
				g.Expect(s.HolderCluster).To(Equal("b"))
			}, 5*time.Second, 20*time.Millisecond).Should(Succeed())
			stopAll(candidates)
		}
	})

	It("has hand-run agents log one Started and one Stopped leading per change of global leadership, and stop with the partition margin", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		binary, err := checkout.BuildAgent(dir)
		Expect(err).NotTo(HaveOccurred())
		const ns = "mcl-agents"
		newElection()
		currentNamespace = ns
		DeferCleanup(func() { currentNamespace = mclNamespace })
		agentOf := map[*mclCluster]*process.Agent{}
		for _, c := range []*mclCluster{a, b} {
			Expect(c.plane.CreateNamespace(ctx, ns)).To(Succeed())
			Expect(grantMultiClusterCandidate(ctx, c, ns)).To(Succeed())
			pod, err := c.plane.CreatePod(ctx, ns, c.name+"-agent", dir, "")
			Expect(err).NotTo(HaveOccurred())
			agent, err := process.StartAgent(binary, pod, currentElection, process.AgentOptions{
				LeaseKind: "MultiClusterLease",
				Timing:    lease.Timing{LeaseDuration: mclLeaseDuration, RenewDeadline: mclRenewDeadline, RetryPeriod: mclRetryPeriod},
			})
			Expect(err).NotTo(HaveOccurred())
			stopAtCleanup(agent)
			agentOf[c] = agent
			if c == a {
				soleAgentLeader([]*process.Agent{agent}, 20*time.Second)
			}
		}
		agents := []*process.Agent{agentOf[a], agentOf[b]}
		claims, _ := sampleAgentClaims(agents)
		Eventually(func(g Gomega) {
			m := &v1alpha1.MultiClusterLease{}
			g.Expect(b.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: currentElection}, m)).To(Succeed())
			g.Expect(ptr.Deref(m.Spec.HolderIdentity, "")).To(Equal(agentOf[b].Pod.Identity()))
		}, 10*time.Second, 20*time.Millisecond).Should(Succeed(), "B's agent stands for its cluster")
		Consistently(agentOf[b].IsLeader, 2*time.Second, 50*time.Millisecond).Should(BeFalse())

		started, stopped := map[*process.Agent]int{agentOf[a]: 1}, map[*process.Agent]int{}
		var stepDowns, margins []time.Duration
		for run := range max(2, *multiclusterRuns) {
			leader := soleAgentLeader(agents, 20*time.Second)
			cut, other := a, b
			if leader == agentOf[b] {
				cut, other = b, a
			}
			expectAgentsAgree(agents, leader, started, stopped)

			By(fmt.Sprintf("run %d: black-holing %s's path to every etcd member", run, cut.name))
			partitioned := time.Now()
			cut.partition()
			DeferCleanup(cut.heal)
			Eventually(leader.IsLeader, mclLeaseDuration, 5*time.Millisecond).Should(BeFalse())
			stepDown := time.Since(partitioned)
			Eventually(agentOf[other].IsLeader, 3*mclLeaseDuration, 5*time.Millisecond).Should(BeTrue())
			takeover := time.Since(partitioned)
			stepDowns, margins = append(stepDowns, stepDown), append(margins, takeover-stepDown)
			stopped[leader]++
			started[agentOf[other]]++

			By("healing: the cut cluster's agent follows, and says it leads no more than once")
			cut.heal()
			Eventually(func(g Gomega) {
				g.Expect(cut.status(ctx, g).GlobalHolder).To(Equal(agentOf[other].Pod.Identity()))
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
			Consistently(leader.IsLeader, time.Second, 20*time.Millisecond).Should(BeFalse())
			expectAgentsAgree(agents, agentOf[other], started, stopped)
		}
		multiclusterFigures.Durations("partition, injected agents: the cut leader stops acting", stepDowns)
		multiclusterFigures.Durations("partition, injected agents: from the cut leader's stop to the other cluster's start (margin)", margins)
		_, overlaps := claims.Stop()
		Expect(overlaps).To(BeEmpty())
	})
})

func mclScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	Expect(corev1.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	return scheme
}

// etcdEndpoints are the global etcd's members as this cluster reaches them: through its proxies.
func (c *mclCluster) etcdEndpoints() []string {
	endpoints := make([]string, len(c.proxies))
	for i, p := range c.proxies {
		endpoints[i] = "https://" + p.Addr
	}
	return endpoints
}

// startController runs the cluster's election controller, reaching etcd through the cluster's proxies.
func (c *mclCluster) startController(etcd *etcdcluster.Cluster, clk clock.PassiveClock) {
	etcdClient, err := clientv3.New(clientv3.Config{Endpoints: c.etcdEndpoints(), TLS: etcd.TLS(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(c.plane.Config, ctrl.Options{
		Scheme:  mclScheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  logr.Discard(),
		// Two clusters' controllers, and their restarts, live in this one process.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	log := GinkgoLogr.WithName("controller-" + c.name)
	Expect((&globalelection.Controller{
		Client:          mgr.GetClient(),
		Backend:         &globalelection.Etcd{Client: etcdClient, Log: log},
		Cluster:         c.name,
		ClockSkewMargin: 500 * time.Millisecond,
		Clock:           clk,
		Log:             log,
	}).SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	c.stopController, c.controllerDone = cancel, make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(c.controllerDone)
		defer etcdClient.Close()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
}

func (c *mclCluster) stop() {
	if c.stopController != nil {
		c.stopController()
		<-c.controllerDone
		c.stopController = nil
	}
}

func (c *mclCluster) partition() {
	for _, p := range c.proxies {
		p.Cut()
	}
}

func (c *mclCluster) heal() {
	for _, p := range c.proxies {
		p.Heal()
	}
}

func (c *mclCluster) status(ctx context.Context, g Gomega) v1alpha1.MultiClusterLeaseStatus {
	obj := &v1alpha1.MultiClusterLease{}
	g.Expect(c.client.Get(ctx, client.ObjectKey{Namespace: currentNamespace, Name: currentElection}, obj)).To(Succeed())
	return obj.Status
}

// backendReachable is leasegate_multicluster_backend_reachable for the current election, as this
// cluster's controller reports it; -1 when it reports none.
func (c *mclCluster) backendReachable() float64 {
	families, err := crmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, family := range families {
		if family.GetName() != "leasegate_multicluster_backend_reachable" {
			continue
		}
		for _, m := range family.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == c.name && labels["namespace"] == currentNamespace && labels["lease"] == currentElection {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func (c *mclCluster) statusIn(ctx context.Context, namespace string) v1alpha1.MultiClusterLeaseStatus {
	obj := &v1alpha1.MultiClusterLease{}
	Expect(c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: currentElection}, obj)).To(Succeed())
	return obj.Status
}

// currentElection is the MultiClusterLease of the running spec, in currentNamespace: each spec elects on
// its own, so that no spec inherits a term from the one before.
var (
	currentElection  string
	currentNamespace = mclNamespace
)
var elections atomic.Int32

// newElection names a new MultiClusterLease for the running spec.
func newElection() { currentElection = fmt.Sprintf("orders-%d", elections.Add(1)) }

// startCandidates starts inA candidates in cluster a and inB in cluster b on a new election.
func startCandidates(a *mclCluster, inA int, b *mclCluster, inB int) []*mclCandidate {
	newElection()
	var candidates []*mclCandidate
	for i := range inA {
		candidates = append(candidates, startCandidate(a, fmt.Sprintf("a-%d", i)))
	}
	for i := range inB {
		candidates = append(candidates, startCandidate(b, fmt.Sprintf("b-%d", i)))
	}
	return candidates
}

func startCandidate(c *mclCluster, id string) *mclCandidate {
	lock, err := multicluster.NewLock(rest.CopyConfig(c.plane.Config), currentNamespace, currentElection, multicluster.LockConfig{
		Identity: id, RenewDeadline: mclRenewDeadline, RetryPeriod: mclRetryPeriod,
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	cand := &mclCandidate{cluster: c, id: id, lock: &crashableLock{Lock: lock}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cand.done)
		for ctx.Err() == nil {
			elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: cand.lock, LeaseDuration: mclLeaseDuration, RenewDeadline: mclRenewDeadline, RetryPeriod: mclRetryPeriod,
				ReleaseOnCancel: true,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(leading context.Context) {
						cand.acting.Store(true)
						<-leading.Done()
						cand.acting.Store(false)
					},
					OnStoppedLeading: func() { cand.acting.Store(false) },
				},
			})
			if err != nil {
				return
			}
			elector.Run(ctx) // returns when leadership is lost or ctx ends; a lost leader stands again
		}
	}()
	return cand
}

// multiClusterPod is a pod that opts in by its label and elects through the MultiClusterLease of the
// running spec, with the suite's multi-cluster timing.
func multiClusterPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"leasegate.io/inject": "enabled"},
			Annotations: map[string]string{
				"leasegate.io/lease":          currentElection,
				"leasegate.io/lease-kind":     "MultiClusterLease",
				"leasegate.io/lease-duration": mclLeaseDuration.String(),
				"leasegate.io/renew-deadline": mclRenewDeadline.String(),
				"leasegate.io/retry-period":   mclRetryPeriod.String(),
			},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: process.ServiceAccountName,
			Containers:         []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
		},
	}
}

// podsMayUpdate asks c's API server whether the test pods' service account may update a MultiClusterLease
// (or its subresource).
func (c *mclCluster) podsMayUpdate(ctx context.Context, namespace, subresource, name string) bool {
	return mayDo(ctx, c.plane.Client, process.ServiceAccountName, authorizationv1.ResourceAttributes{
		Namespace: namespace, Verb: "update", Group: v1alpha1.GroupVersion.Group, Resource: v1alpha1.Resource,
		Subresource: subresource, Name: name,
	})
}

// etcdClientCertDir lays the global etcd's CA and client certificate out as --multicluster-etcd-cert-dir
// expects them (the chart mounts a Secret so).
func etcdClientCertDir(dir string, etcd *etcdcluster.Cluster) string {
	certDir := filepath.Join(dir, "multicluster-etcd")
	Expect(os.Mkdir(certDir, 0o700)).To(Succeed())
	for name, from := range map[string]string{"ca.crt": etcd.CAFile(), "tls.crt": etcd.CertFile(), "tls.key": etcd.KeyFile()} {
		data, err := os.ReadFile(from)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(certDir, name), data, 0o600)).To(Succeed())
	}
	return certDir
}

// sampleStaleLeadership samples c's status while another cluster's candidate acts: a status that lets
// the fence and agents of c admit id then (LocalLeader) is stale leadership.
func sampleStaleLeadership(ctx context.Context, c *mclCluster, id string, elsewhere *mclCandidate) *sampler {
	return startSampler(ctx, func(ctx context.Context) (string, bool) {
		m := &v1alpha1.MultiClusterLease{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: currentNamespace, Name: currentElection}, m); err != nil {
			return "", true
		}
		if now := time.Now(); elsewhere.acting.Load() && m.Status.LocalLeader(now) == id {
			return fmt.Sprintf("cluster %s's status lets %s act until %s while %s leads",
				c.name, id, m.Status.ValidUntil.Format(time.StampMilli), elsewhere.id), false
		}
		return "", true
	})
}

// identities are the agents' holder identities.
func identities(agents []*process.Agent) []string {
	ids := make([]string, len(agents))
	for i, agent := range agents {
		ids[i] = agent.Pod.Identity()
	}
	return ids
}

// soleAgentLeader waits until exactly one of agents says it leads.
func soleAgentLeader(agents []*process.Agent, timeout time.Duration) *process.Agent {
	var leader *process.Agent
	Eventually(func(g Gomega) {
		var leading []*process.Agent
		for _, agent := range agents {
			if agent.IsLeader() {
				leading = append(leading, agent)
			}
		}
		g.Expect(leading).To(HaveLen(1))
		leader = leading[0]
	}, timeout, 20*time.Millisecond).Should(Succeed())
	return leader
}

// startManager runs a controller-runtime manager in cluster c that elects through the library's lock;
// acting is true while its leader-election runnable runs, which is when its reconcilers would.
func startManager(c *mclCluster, id string) *mclCandidate {
	lock, err := multicluster.NewLock(rest.CopyConfig(c.plane.Config), currentNamespace, currentElection, multicluster.LockConfig{
		Identity: id, RenewDeadline: mclRenewDeadline, RetryPeriod: mclRetryPeriod,
	})
	Expect(err).NotTo(HaveOccurred())
	cand := &mclCandidate{cluster: c, id: id, lock: &crashableLock{Lock: lock}, done: make(chan struct{})}
	leaseDuration, renewDeadline, retryPeriod := mclLeaseDuration, mclRenewDeadline, mclRetryPeriod
	mgr, err := ctrl.NewManager(rest.CopyConfig(c.plane.Config), ctrl.Options{
		Scheme: mclScheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionResourceLockInterface: cand.lock, LeaderElectionReleaseOnCancel: true,
		LeaseDuration: &leaseDuration, RenewDeadline: &renewDeadline, RetryPeriod: &retryPeriod,
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		cand.acting.Store(true)
		<-ctx.Done()
		cand.acting.Store(false)
		return nil
	}))).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	cand.cancel = cancel
	go func() {
		defer close(cand.done)
		defer cand.acting.Store(false)
		_ = mgr.Start(ctx) // ends with an error when leadership is lost, as a real manager's process exits
	}()
	return cand
}

// stop ends the candidate: released (a SIGTERM) or not (a crash: it just stops renewing).
func (c *mclCandidate) stop(release bool) {
	if !release {
		c.lock.crashed.Store(true)
	}
	c.cancel()
	<-c.done
}

// standing reports whether the candidate holds its cluster's local election (spec), so is the one its
// controller campaigns for.
func (c *mclCandidate) standing(ctx context.Context) bool {
	obj := &v1alpha1.MultiClusterLease{}
	if err := c.cluster.client.Get(ctx, client.ObjectKey{Namespace: currentNamespace, Name: currentElection}, obj); err != nil {
		return false
	}
	return obj.Spec.HolderIdentity != nil && *obj.Spec.HolderIdentity == c.id
}

func stopAll(candidates []*mclCandidate) {
	for _, c := range candidates {
		select {
		case <-c.done:
		default:
			c.stop(true)
		}
	}
}

func actingIDs(candidates []*mclCandidate) []string {
	var ids []string
	for _, c := range candidates {
		if c.acting.Load() {
			ids = append(ids, c.id)
		}
	}
	sort.Strings(ids)
	return ids
}

func eventuallySoleLeader(candidates []*mclCandidate, timeout time.Duration) *mclCandidate {
	var leader *mclCandidate
	Eventually(func(g Gomega) {
		ids := actingIDs(candidates)
		g.Expect(ids).To(HaveLen(1))
		for _, c := range candidates {
			if c.id == ids[0] {
				leader = c
			}
		}
	}, timeout, 20*time.Millisecond).Should(Succeed())
	return leader
}

func otherThan(candidates []*mclCandidate, leader *mclCandidate) *mclCandidate {
	for _, c := range candidates {
		if c.cluster != leader.cluster {
			return c
		}
	}
	Fail("no candidate in another cluster")
	return nil
}

// sampler calls sample every 20 ms until stopped and keeps what it reports as wrong.
type sampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []string
}

func startSampler(ctx context.Context, sample func(context.Context) (wrong string, ok bool)) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			if wrong, ok := sample(ctx); !ok {
				s.mu.Lock()
				s.seen = append(s.seen, time.Now().Format(time.StampMilli)+": "+wrong)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *sampler) stop() { s.cancel(); <-s.done }

// findings are what the samples reported so far.
func (s *sampler) findings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// twoLeaders samples whether more than one candidate acts, across clusters.
type twoLeaders struct {
	*sampler
	mu         sync.Mutex
	candidates []*mclCandidate
}

// follow makes the monitor sample candidates from now on (the spec replaced one).
func (m *twoLeaders) follow(candidates []*mclCandidate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.candidates = slices.Clone(candidates)
}

func watchForTwoLeaders(candidates []*mclCandidate) *twoLeaders {
	m := &twoLeaders{candidates: slices.Clone(candidates)}
	m.sampler = startSampler(context.Background(), func(context.Context) (string, bool) {
		m.mu.Lock()
		ids := actingIDs(m.candidates)
		m.mu.Unlock()
		return fmt.Sprint(ids), len(ids) <= 1
	})
	return m
}

func (m *twoLeaders) overlaps() []string { return m.findings() }

// tokenWatch checks that the fencing token only grows, in every cluster's status.
type tokenWatch struct{ last int64 }

func (t *tokenWatch) observe(ctx context.Context, clusters ...*mclCluster) {
	for _, c := range clusters {
		Eventually(func(g Gomega) {
			token := c.status(ctx, g).FencingToken
			g.Expect(token).To(BeNumerically(">=", t.last))
			t.last = token
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	}
}

// skewedClock runs offset from true time and at rate times its speed, as a badly kept clock does.
type skewedClock struct {
	start  time.Time
	offset time.Duration
	rate   float64
}

func (c *skewedClock) Now() time.Time {
	return c.start.Add(c.offset + time.Duration(float64(time.Since(c.start))*c.rate))
}

func (c *skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// crashableLock is the library's lock in a process that can crash: once crashed, nothing it would write
// reaches the API server, the elector's release on cancel included. It records its calls: when each
// write and wait for the controller's answer began and ended, and how it failed.
type crashableLock struct {
	*multicluster.Lock
	crashed atomic.Bool

	mu    sync.Mutex
	calls []lockCall
}

type lockCall struct {
	began, ended time.Time
	err          error
}

var errCrashed = errors.New("crashed")

func (l *crashableLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.crashed.Load() {
		return errCrashed
	}
	return l.record(func() error { return l.Lock.Create(ctx, ler) })
}

func (l *crashableLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.crashed.Load() {
		return errCrashed
	}
	if ler.HolderIdentity == "" {
		return l.Lock.Update(ctx, ler) // a release waits for nothing
	}
	return l.record(func() error { return l.Lock.Update(ctx, ler) })
}

func (l *crashableLock) record(call func() error) error {
	l.mu.Lock()
	i := len(l.calls)
	l.calls = append(l.calls, lockCall{began: time.Now()})
	l.mu.Unlock()
	err := call()
	l.mu.Lock()
	l.calls[i].ended, l.calls[i].err = time.Now(), err
	l.mu.Unlock()
	return err
}

// cycleStart waits for the standby's next retry cycle to begin (a call that starts more than half a
// retry period after the one before it ended, not the slow path's second Update) and returns when it
// began, and a report of whether a call of the lock was waiting offset after that.
func (l *crashableLock) cycleStart(ctx context.Context, offset time.Duration) (time.Time, func() bool) {
	l.mu.Lock()
	from := len(l.calls)
	l.mu.Unlock()
	var began time.Time
	Eventually(func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := max(from, 1); i < len(l.calls); i++ {
			if prev := l.calls[i-1]; !prev.ended.IsZero() && l.calls[i].began.Sub(prev.ended) > mclRetryPeriod/2 {
				began = l.calls[i].began
				return true
			}
		}
		return false
	}, 10*time.Second, 2*time.Millisecond).Should(BeTrue())
	return began, func() bool {
		at := began.Add(offset)
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.calls {
			if !c.began.After(at) && (c.ended.IsZero() || c.ended.After(at)) {
				return true
			}
		}
		return false
	}
}

// refusals are the calls that failed although the controller had confirmed the candidate: a won term
// the lock did not let it use.
func (l *crashableLock) refusals() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var refused []string
	for _, c := range l.calls {
		if c.err != nil && strings.Contains(c.err.Error(), "confirmed") {
			refused = append(refused, c.err.Error())
		}
	}
	return refused
}

// specTaker is a local candidate of one cluster that watches the spec and takes it the moment it is
// released, as the agent's elector does (client-go's polls), then renews it every retry period.
type specTaker struct {
	cancel context.CancelFunc
	done   chan struct{}
	took   atomic.Bool
}

// takeSpecOnRelease runs a specTaker for id on the running spec's MultiClusterLease in c.
func (c *mclCluster) takeSpecOnRelease(ctx context.Context, id string) *specTaker {
	ctx, cancel := context.WithCancel(ctx)
	t := &specTaker{cancel: cancel, done: make(chan struct{})}
	key := client.ObjectKey{Namespace: currentNamespace, Name: currentElection}
	go func() {
		defer GinkgoRecover()
		defer close(t.done)
		for ctx.Err() == nil {
			m := &v1alpha1.MultiClusterLease{}
			if err := c.client.Get(ctx, key, m); err == nil {
				holder := ptr.Deref(m.Spec.HolderIdentity, "")
				if holder == "" || holder == id {
					now := metav1.NowMicro()
					m.Spec = v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To(id), LeaseDurationSeconds: ptr.To(int32(mclLeaseDuration / time.Second)),
						AcquireTime: &now, RenewTime: &now, LeaseTransitions: m.Spec.LeaseTransitions}
					if c.client.Update(ctx, m) == nil && !t.took.Swap(true) {
						select {
						case <-ctx.Done():
						case <-time.After(mclRetryPeriod):
						}
						continue
					}
				}
			}
			wait := 2 * time.Millisecond
			if t.took.Load() {
				wait = mclRetryPeriod
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}()
	return t
}

// stop ends the taker and reports whether it ever took the spec.
func (t *specTaker) stop() bool {
	t.cancel()
	<-t.done
	return t.took.Load()
}

// grantMultiClusterCandidate lets the test pods' service account stand on MultiClusterLeases in
// namespace, as the chart's leasegate-multicluster-candidate ClusterRole does (spec only).
func grantMultiClusterCandidate(ctx context.Context, c *mclCluster, namespace string) error {
	rbac := c.plane.Client.RbacV1()
	if _, err := rbac.Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "multicluster-candidate"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{v1alpha1.Resource},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "multicluster-candidate"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "multicluster-candidate"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: process.ServiceAccountName}},
	}, metav1.CreateOptions{})
	return err
}

// expectAgentsAgree checks that only leader says it leads, in /leader and in its is_leader metric, and
// that each agent logged as many Started and Stopped leading lines as it had transitions.
func expectAgentsAgree(agents []*process.Agent, leader *process.Agent, started, stopped map[*process.Agent]int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for _, agent := range agents {
			status, err := agent.Leader()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(status.IsLeader).To(Equal(agent == leader), "/leader of %s", agent.Pod.Name)
			metric, err := agent.Metric("leasegate_agent_is_leader")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(metric).To(Equal(map[bool]float64{true: 1, false: 0}[agent == leader]), "is_leader of %s", agent.Pod.Name)
			logs := agent.Logs()
			g.Expect(strings.Count(logs, `msg="Started leading"`)).To(Equal(started[agent]), "Started leading lines of %s:\n%s", agent.Pod.Name, logs)
			g.Expect(strings.Count(logs, `msg="Stopped leading"`)).To(Equal(stopped[agent]), "Stopped leading lines of %s:\n%s", agent.Pod.Name, logs)
		}
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
}
