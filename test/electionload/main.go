// Command electionload measures what elections cost as they grow: for each number of leases asked for, it
// runs -candidates electors per lease in this process (the agent's own lease.Elector and lease.Client, a
// pod identity each, impersonating its pod's service account with the pod-name and pod-uid extras a
// pod-bound token carries), against a real API server, with leasegate-webhook's lease guard judging every
// write. Leaders renew once per retry period, so the API server's write load is leases / P: at the default
// timing (15s/10s/2s) while that stays within -renewals per second, beyond it with the timing of a longer
// takeover objective (leasegate.io/takeover) whose P keeps it there, which is what an operator of that
// many leases on that API server would choose. It reports, over a steady window: the lease requests the
// API server served per second by verb (leaders' renewals are the PUTs), the lease guard's latency as the
// API server measured it, the renewals' latency as the leaders saw it, the Lease watches held, leadership
// changes and claims (none, and never two leaders of one lease), the resident memory of the API server
// (and what the electors' watches added to it), etcd and the webhook, and the webhook's own API requests;
// then it crashes leaders (their store fails, so they neither renew nor release) and times the takeovers
// against their budget. `make bench` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/manager"
	"github.com/leasegate/leasegate/test/framework"
)

// leasesPerNamespace spreads the leases as a cluster would: many namespaces, each with a few workloads.
const leasesPerNamespace = 100

func main() {
	leases := flag.String("leases", "1000", "comma-separated numbers of leases, a row each")
	candidates := flag.Int("candidates", 3, "electors per lease")
	window := flag.Duration("window", 30*time.Second, "steady-state window measured per row")
	crashes := flag.Int("crashes", 10, "leaders crashed per row, at once, for the takeover figures")
	startRate := flag.Int("start-rate", 500, "electors started per second (a cluster's pods do not all start in one instant)")
	renewals := flag.Int("renewals", 500, "leaders' renewals per second the API server is asked for at most: a row whose leases would renew more often at the default timing gets a longer one")
	flag.Parse()
	framework.QuietControllerRuntime()
	klog.SetLogger(logr.Discard()) // client-go reports the electors' requests cancelled at the end of each row
	counts, err := framework.Counts(*leases)
	if err != nil || *candidates < 2 || *crashes < 1 || *crashes > slices.Min(counts) || *startRate < 1 || *renewals < 1 {
		fmt.Fprintf(os.Stderr, "electionload: -leases %q -candidates %d -crashes %d -start-rate %d -renewals %d: want positive counts, at least 2 candidates, crashes within each row's leases\n",
			*leases, *candidates, *crashes, *startRate, *renewals)
		os.Exit(2)
	}
	if err := run(context.Background(), counts, *candidates, *window, *crashes, *startRate, *renewals); err != nil {
		fmt.Fprintln(os.Stderr, "electionload:", err)
		os.Exit(1)
	}
}

// row is one measurement.
type row struct {
	leases, electors int
	timing           lease.Timing
	// Over the steady window:
	requestsPerSecond        map[string]float64 // lease requests by verb
	guardP50, guardP99       float64            // seconds, leases.leasegate.io as the API server timed it
	renewP50, renewP99       time.Duration
	renewMax                 time.Duration
	watches                  float64
	transitions              int // leadership changes
	doubleClaims             int // samples with two electors leading one lease
	webhookRequestsPerSecond float64
	// At its end:
	apiServerRSS, etcdRSS, webhookRSS int64
	apiServerAdded                    int64 // the API server's RSS with the electors running, over without
	// Around it:
	startup   time.Duration // first elector started -> every lease led
	takeovers []time.Duration
}

func run(ctx context.Context, counts []int, candidates int, window time.Duration, crashes, startRate, renewals int) error {
	// The webhook's own election gets the timing of the largest row, as its operator would give it: at
	// the default timing its elected replica, renewing every 2 s within 10 s, loses its lease while the
	// electors start on this saturated API server, and leasegate-webhook exits (a replica restarts then).
	largest, err := timingFor(slices.Max(counts), renewals)
	if err != nil {
		return err
	}
	bench, err := framework.StartWebhookBench(ctx,
		"--"+manager.FlagLeaseDuration+"="+largest.LeaseDuration.String(),
		"--"+manager.FlagRenewDeadline+"="+largest.RenewDeadline.String(),
		"--"+manager.FlagRetryPeriod+"="+largest.RetryPeriod.String())
	if err != nil {
		return err
	}
	defer bench.Stop()
	if err := grantLeases(ctx, bench.Client); err != nil {
		return err
	}
	var rows []row
	for _, n := range counts {
		timing, err := timingFor(n, renewals)
		if err != nil {
			return err
		}
		r, err := measure(ctx, bench, n, candidates, timing, window, crashes, startRate)
		if err != nil {
			return fmt.Errorf("%d leases: %w", n, err)
		}
		rows = append(rows, r)
	}
	fmt.Printf("\nElections at scale: %d electors per lease in one process, every write through the lease guard; %s steady window per row; timing %s/%s/%s unless leases / P would exceed %d renewals/s.\n\n",
		candidates, window, lease.DefaultTiming.LeaseDuration, lease.DefaultTiming.RenewDeadline, lease.DefaultTiming.RetryPeriod, renewals)
	fmt.Println("| leases | electors | timing D / R / P | all led after | lease requests/s: renewals (PUT) / other | lease guard p50 / p99 (API server) | renewal p50 / p99 / max (leader) | Lease watches | leaders changed / two claims | API server RSS (added by the electors) | etcd RSS | webhook RSS | webhook's API requests/s | crash takeover median / max (budget D + M) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		put := r.requestsPerSecond["PUT"]
		var other float64
		for verb, v := range r.requestsPerSecond {
			if verb != "PUT" {
				other += v
			}
		}
		slices.Sort(r.takeovers)
		fmt.Printf("| %d | %d | %s / %s / %s | %s | %.0f / %.1f | %.1f / %.0f ms | %s / %s / %s | %.0f | %d / %d | %s (%s) | %s | %s | %.1f | %s / %s (%s) |\n",
			r.leases, r.electors, r.timing.LeaseDuration, r.timing.RenewDeadline, r.timing.RetryPeriod, r.startup.Round(100*time.Millisecond),
			put, other, r.guardP50*1000, r.guardP99*1000,
			r.renewP50.Round(100*time.Microsecond), r.renewP99.Round(time.Millisecond), r.renewMax.Round(time.Millisecond),
			r.watches, r.transitions, r.doubleClaims, mib(r.apiServerRSS), mib(r.apiServerAdded), mib(r.etcdRSS), mib(r.webhookRSS), r.webhookRequestsPerSecond,
			r.takeovers[len(r.takeovers)/2].Round(10*time.Millisecond), r.takeovers[len(r.takeovers)-1].Round(10*time.Millisecond),
			lease.TakeoverBudget(r.timing.LeaseDuration, lease.DefaultClockSkewMargin))
	}
	return nil
}

// timingFor is the default timing when n leaders renewing every retry period stay within renewals per
// second, otherwise the timing of the shortest takeover objective (whole seconds) whose retry period does.
func timingFor(n, renewals int) (lease.Timing, error) {
	if float64(n)/lease.DefaultTiming.RetryPeriod.Seconds() <= float64(renewals) {
		return lease.DefaultTiming, nil
	}
	for objective := lease.TakeoverBudget(lease.DefaultTiming.LeaseDuration, lease.DefaultClockSkewMargin); ; objective += time.Second {
		t, err := lease.TimingFor(objective, lease.DefaultClockSkewMargin)
		if err != nil {
			return t, err
		}
		if float64(n)/t.RetryPeriod.Seconds() <= float64(renewals) {
			return t, nil
		}
	}
}

func mib(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// grantLeases lets every service account read and write Leases, as provisioning's Roles do lease by lease
// (the lease guard, not RBAC, is what is measured here).
func grantLeases(ctx context.Context, api kubernetes.Interface) error {
	rbac := api.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "electionload-leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "electionload-leases"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "electionload-leases"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}},
	}, metav1.CreateOptions{})
	return err
}

// elector is one candidate: a pod's identity and the elector running for it.
type elector struct {
	lease, namespace string
	*lease.Elector
	store  *timedStore
	cancel context.CancelFunc
	done   chan struct{}
}

// timedStore is the agent's Lease client, timing each renewal; once crashed, it fails every call, so the
// elector neither renews nor releases, as a SIGKILLed agent.
type timedStore struct {
	*lease.Client
	crashed  atomic.Bool
	renewals *latencies
}

var errCrashed = errors.New("crashed")

func (s *timedStore) Update(ctx context.Context, l *lease.Lease) (*lease.Lease, error) {
	if s.crashed.Load() {
		return nil, errCrashed
	}
	start := time.Now()
	updated, err := s.Client.Update(ctx, l)
	if err == nil {
		s.renewals.add(time.Since(start))
	}
	return updated, err
}

func (s *timedStore) Create(ctx context.Context, l *lease.Lease) (*lease.Lease, error) {
	if s.crashed.Load() {
		return nil, errCrashed
	}
	return s.Client.Create(ctx, l)
}

// latencies collects durations while on.
type latencies struct {
	mu sync.Mutex
	on bool
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.d = append(l.d, d)
	}
}

func (l *latencies) record(on bool) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
	return slices.Clone(l.d)
}

func measure(ctx context.Context, bench *framework.WebhookBench, n, candidates int, timing lease.Timing, window time.Duration, crashes, startRate int) (row, error) {
	api := bench.Client
	r := row{leases: n, electors: n * candidates, timing: timing}
	apiServerAlone, _ := bench.ControlPlane.RSSBytes()
	namespaces := (n + leasesPerNamespace - 1) / leasesPerNamespace
	fmt.Fprintf(os.Stderr, "creating %d unheld leases in %d namespaces, as provisioning does\n", n, namespaces)
	if err := createLeases(ctx, api, n); err != nil {
		return r, err
	}
	defer deleteNamespaces(context.Background(), api, n)

	renewals, failed := &latencies{}, &failures{}
	var electors []*elector
	defer func() {
		for _, e := range electors {
			e.cancel()
		}
		for _, e := range electors {
			<-e.done
		}
	}()
	fmt.Fprintf(os.Stderr, "starting %d electors, %d/s\n", n*candidates, startRate)
	pods, err := framework.NewPodClients(bench.ControlPlane.Config)
	if err != nil {
		return r, err
	}
	start := time.Now()
	for i := range n {
		for c := range candidates {
			time.Sleep(time.Until(start.Add(time.Duration(len(electors)) * time.Second / time.Duration(startRate))))
			e, err := startElector(ctx, pods, n, i, c, timing, renewals, failed.logger())
			if err != nil {
				return r, err
			}
			electors = append(electors, e)
		}
	}
	if err := waitLed(electors, candidates, start, 5*time.Minute+timing.LeaseDuration, failed); err != nil {
		return r, err
	}
	r.startup = time.Since(start)
	time.Sleep(lease.DefaultTiming.LeaseDuration) // the losers' first attempts are over: only the steady state counts

	fmt.Fprintf(os.Stderr, "all %d leases led after %s; measuring %s of steady state\n", n, r.startup.Round(time.Second), window)
	transitionsBefore, err := transitions(ctx, api, n)
	if err != nil {
		return r, err
	}
	apiBefore, err := bench.ControlPlane.Metrics(ctx)
	if err != nil {
		return r, err
	}
	webhookBefore, err := bench.Webhook.Metrics()
	if err != nil {
		return r, err
	}
	renewals.record(true)
	windowStart := time.Now()
	for time.Since(windowStart) < window {
		r.doubleClaims += doubleClaims(electors, candidates)
		time.Sleep(time.Second)
	}
	elapsed := time.Since(windowStart)
	durations := renewals.record(false)
	apiAfter, err := bench.ControlPlane.Metrics(ctx)
	if err != nil {
		return r, err
	}
	webhookAfter, err := bench.Webhook.Metrics()
	if err != nil {
		return r, err
	}
	transitionsAfter, err := transitions(ctx, api, n)
	if err != nil {
		return r, err
	}
	r.transitions = transitionsAfter - transitionsBefore

	r.requestsPerSecond = map[string]float64{}
	for _, verb := range []string{"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"} {
		labels := map[string]string{"resource": "leases", "verb": verb}
		if d := apiAfter.Sum("apiserver_request_total", labels) - apiBefore.Sum("apiserver_request_total", labels); d > 0 {
			r.requestsPerSecond[verb] = d / elapsed.Seconds()
		}
	}
	guard := map[string]string{"name": "leases.leasegate.io"}
	r.guardP50, _ = apiAfter.QuantileSince(apiBefore, "apiserver_admission_webhook_admission_duration_seconds", guard, 0.5)
	r.guardP99, _ = apiAfter.QuantileSince(apiBefore, "apiserver_admission_webhook_admission_duration_seconds", guard, 0.99)
	r.watches = apiAfter.Sum("apiserver_longrunning_requests", map[string]string{"resource": "leases", "verb": "WATCH"})
	r.webhookRequestsPerSecond = (webhookAfter.Sum("rest_client_requests_total", nil) - webhookBefore.Sum("rest_client_requests_total", nil)) / elapsed.Seconds()
	if len(durations) == 0 {
		return r, fmt.Errorf("no renewal in %s", window)
	}
	slices.Sort(durations)
	r.renewP50, r.renewP99, r.renewMax = durations[len(durations)/2], durations[len(durations)*99/100], durations[len(durations)-1]
	r.webhookRSS, _ = bench.Webhook.RSSBytes()
	r.apiServerRSS, r.etcdRSS = bench.ControlPlane.RSSBytes()
	r.apiServerAdded = r.apiServerRSS - apiServerAlone

	fmt.Fprintf(os.Stderr, "crashing %d leaders at once\n", crashes)
	r.takeovers, err = crashLeaders(electors, candidates, crashes, timing)
	return r, err
}

// startElector starts candidate c of lease i, as pod "w<i>-<c>" of its namespace.
func startElector(ctx context.Context, pods *framework.PodClients, row, i, c int, timing lease.Timing, renewals *latencies, log logr.Logger) (*elector, error) {
	namespace, leaseName := namespaceOf(row, i), fmt.Sprintf("lease-%d", i%leasesPerNamespace)
	podName, podUID := fmt.Sprintf("w%d-%d", i, c), fmt.Sprintf("uid-%d-%d-%d", row, i, c)
	store := &timedStore{Client: lease.NewClient(pods.For(namespace, "default", podName, podUID)), renewals: renewals}
	e, err := lease.NewElector(lease.Config{
		Client: store, Namespace: namespace, Name: leaseName, Identity: lease.Identity(podName, podUID),
		Timing: timing, ClockSkewMargin: lease.DefaultClockSkewMargin, Log: log,
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	el := &elector{lease: leaseName, namespace: namespace, Elector: e, store: store, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(el.done)
		e.Run(runCtx)
	}()
	return el, nil
}

func namespaceOf(row, i int) string { return fmt.Sprintf("elect-%d-%d", row, i/leasesPerNamespace) }

// waitLed waits until every lease has exactly one elector that leads it, saying every progressEvery how
// far it got and what the electors failed at.
func waitLed(electors []*elector, candidates int, start time.Time, timeout time.Duration, failed *failures) error {
	const progressEvery = 30 * time.Second
	deadline, nextProgress := time.Now().Add(timeout), time.Now().Add(progressEvery)
	for {
		unled, claimedTwice := 0, 0
		for _, leaders := range leadersPerLease(electors, candidates) {
			switch {
			case leaders == 0:
				unled++
			case leaders > 1:
				claimedTwice++
			}
		}
		if unled == 0 && claimedTwice == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, %d leases have no leader and %d more than one; %d electors never listed their lease; the electors' failures: %s",
				timeout, unled, claimedTwice, unsynced(electors), failed)
		}
		if time.Now().After(nextProgress) {
			nextProgress = nextProgress.Add(progressEvery)
			fmt.Fprintf(os.Stderr, "after %s: %d leases without a leader, %d with two; %d electors never listed their lease; failures: %s\n",
				time.Since(start).Round(time.Second), unled, claimedTwice, unsynced(electors), failed)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unsynced counts the electors whose watch has not yet listed their lease.
func unsynced(electors []*elector) int {
	n := 0
	for _, e := range electors {
		if !e.Synced() {
			n++
		}
	}
	return n
}

// doubleClaims counts the leases two electors claim at once.
func doubleClaims(electors []*elector, candidates int) int {
	double := 0
	for _, leaders := range leadersPerLease(electors, candidates) {
		if leaders > 1 {
			double++
		}
	}
	return double
}

// leadersPerLease counts, lease by lease, the electors that say they lead it.
func leadersPerLease(electors []*elector, candidates int) []int {
	leaders := make([]int, len(electors)/candidates)
	for i, e := range electors {
		if e.Status().IsLeader {
			leaders[i/candidates]++
		}
	}
	return leaders
}

// crashLeaders crashes the leaders of k leases picked at random, all at once, and times until another
// candidate of each leads.
func crashLeaders(electors []*elector, candidates, k int, timing lease.Timing) ([]time.Duration, error) {
	leases := rand.Perm(len(electors) / candidates)[:k]
	crashedAt := time.Now()
	var crashed []*elector
	for _, l := range leases {
		for _, e := range electors[l*candidates : (l+1)*candidates] {
			if e.Status().IsLeader {
				e.store.crashed.Store(true)
				crashed = append(crashed, e)
			}
		}
	}
	if len(crashed) != k {
		return nil, fmt.Errorf("found %d leaders of %d leases", len(crashed), k)
	}
	took := make([]time.Duration, k)
	deadline := crashedAt.Add(2 * lease.TakeoverBudget(timing.LeaseDuration, lease.DefaultClockSkewMargin))
	for pending := k; pending > 0; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d crashed leases not taken over within twice their budget", pending, k)
		}
		time.Sleep(20 * time.Millisecond)
		for j, l := range leases {
			if took[j] != 0 {
				continue
			}
			for _, e := range electors[l*candidates : (l+1)*candidates] {
				if e != crashed[j] && e.Status().IsLeader {
					took[j] = time.Since(crashedAt)
					pending--
					break
				}
			}
		}
	}
	return took, nil
}

// createLeases makes n unheld leases labelled as leasegate provisions them.
func createLeases(ctx context.Context, api kubernetes.Interface, n int) error {
	row := n
	return framework.InParallel(n, func(i int) error {
		ns := namespaceOf(row, i)
		if i%leasesPerNamespace == 0 {
			if _, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		for {
			_, err := api.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lease-%d", i%leasesPerNamespace), Labels: map[string]string{contract.Managed: "true"}},
			}, metav1.CreateOptions{})
			if err != nil && strings.Contains(err.Error(), "not found") { // its namespace, a moment from now
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
	})
}

func deleteNamespaces(ctx context.Context, api kubernetes.Interface, n int) {
	_ = framework.InParallel((n+leasesPerNamespace-1)/leasesPerNamespace, func(j int) error {
		return api.CoreV1().Namespaces().Delete(ctx, namespaceOf(n, j*leasesPerNamespace), metav1.DeleteOptions{})
	})
}

// transitions sums leaseTransitions over the row's leases.
func transitions(ctx context.Context, api kubernetes.Interface, n int) (int, error) {
	total := 0
	var mu sync.Mutex
	err := framework.InParallel((n+leasesPerNamespace-1)/leasesPerNamespace, func(j int) error {
		list, err := api.CoordinationV1().Leases(namespaceOf(n, j*leasesPerNamespace)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, l := range list.Items {
			if l.Spec.LeaseTransitions != nil {
				total += int(*l.Spec.LeaseTransitions)
			}
		}
		return nil
	})
	return total, err
}
