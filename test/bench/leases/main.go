// Command leases measures what elections cost as they grow: for each number of leases asked for, it
// runs -candidates electors per lease in this process (the agent's own leaseelection.Elector and Client, a
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
// against their budget. Then the bad days: it kills kube-apiserver and starts it again on the same etcd
// (every watch and connection drops at once, every elector comes back together), then does the same to
// etcd, and reports for each, as for the cold start, how long until every lease was led again, the 429s,
// the lease writes per second, leaders changed, two claims and the API server's memory. -client runs the
// same rows with client-go's leaderelection electors (resourcelock.LeaseLock, client-go's defaults) as
// well, one client after the other on the same control plane, so that each row has both side by side.
// `make bench` runs it; docs/scale.md has the figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	lgconfig "github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/manager"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/load"
	"github.com/leasegate/leasegate/test/framework/process"
)

// leasesPerNamespace spreads the leases as a cluster would: many namespaces, each with a few workloads.
const leasesPerNamespace = 100

func main() {
	leases := flag.String("leases", "1000", "comma-separated numbers of leases, a row each")
	candidates := flag.Int("candidates", 3, "electors per lease")
	clients := flag.String("client", clientAgent+","+clientClientGo, "comma-separated electors to run each row with, one after the other: "+clientAgent+" (leasegate's own) and "+clientClientGo+" (client-go's leaderelection with a LeaseLock)")
	restarts := flag.String("restarts", "apiserver,etcd", "comma-separated control-plane restarts each row goes through after its steady window, in order: apiserver (kube-apiserver killed and started again on the same etcd), etcd (etcd killed and started again); one named more than once runs that many rounds; empty for none")
	down := flag.Duration("down", 0, "how long a killed kube-apiserver stays down before it is started again (0: at once): an outage past the renew deadline makes every leader step down, whatever the time the new one takes to start")
	window := flag.Duration("window", 30*time.Second, "steady-state window measured per row")
	crashes := flag.Int("crashes", 10, "leaders crashed per row, at once, for the takeover figures; 0 for none")
	startRate := flag.Int("start-rate", 500, "electors started per second (a cluster's pods do not all start in one instant)")
	renewals := flag.Int("renewals", 250, "leaders' renewals per second the API server is asked for at most: a row whose leases would renew more often at the default timing gets a longer one. The default is half of what this project's 2-core machine's API server carries, as docs/scale.md advises operators to size leases / P")
	timeout := flag.Duration("recover-timeout", 5*time.Minute, "how long a scenario waits for every lease to be led, and a restarted kube-apiserver to be ready, before it reports the leases still unled (or the server not ready)")
	flowControl := flag.Bool("flow-control", true, "install the chart's API Priority and Fairness objects (config/webhook/flowschema.yaml) before the rows, as a cluster with leasegate has them: every service account's lease writes, both clients' electors' included, get a priority level of their own; false leaves them in workload-low with the reads")
	runs := flag.Int("runs", 1, "times each row runs, one run after the other on the same control plane; with more than one, each agent row is judged against client-go's of its own run, and a last table judges the medians over the runs")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (the electors' and the harness's) to this file, for `go tool pprof`")
	keepGoing := flag.Bool("keep-going", false, "when a scenario leaves leases unled after -recover-timeout, report it and go on with the row's next scenarios (and the next client) instead of stopping the run")
	flag.Parse()
	process.QuietControllerRuntime()
	klog.SetLogger(logr.Discard()) // client-go reports the electors' requests cancelled at the end of each row
	counts, err := load.Counts(*leases)
	if err != nil || *candidates < 2 || *crashes < 0 || *crashes > slices.Min(counts) || *startRate < 1 || *renewals < 1 || *runs < 1 || *window <= 0 || *timeout <= 0 || *down < 0 {
		fmt.Fprintf(os.Stderr, "leases: -leases %q -candidates %d -crashes %d -start-rate %d -renewals %d -runs %d -window %s -recover-timeout %s -down %s: want positive counts, at least 2 candidates, crashes within each row's leases, at least 1 run, positive durations (-down: 0 or more)\n",
			*leases, *candidates, *crashes, *startRate, *renewals, *runs, *window, *timeout, *down)
		os.Exit(2)
	}
	stopProfile := func() {}
	if *cpuProfile != "" {
		if stopProfile, err = profileCPU(*cpuProfile); err != nil {
			fmt.Fprintln(os.Stderr, "leases: -cpuprofile:", err)
			os.Exit(2)
		}
	}
	clientList, err := parseList("-client", *clients, []string{clientAgent, clientClientGo}, once)
	if err == nil {
		var restartList []string
		if restartList, err = parseList("-restarts", *restarts, []string{"apiserver", "etcd"}, emptyOrRepeated); err == nil {
			err = run(context.Background(), config{counts: counts, candidates: *candidates, clients: clientList, restarts: restartList,
				window: *window, crashes: *crashes, startRate: *startRate, renewals: *renewals, runs: *runs, timeout: *timeout, down: *down, keepGoing: *keepGoing, flowControl: *flowControl})
		}
	}
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leases:", err)
		os.Exit(1)
	}
}

// profileCPU starts profiling this process's CPU into path, and returns what stops it and writes the file.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "leases: -cpuprofile:", err)
		}
	}, nil
}

// listRule says how a list flag may hold its known values.
type listRule int

const (
	once            listRule = iota // at least one value, each at most once
	emptyOrRepeated                 // none, or values named any number of times
)

// parseList reads a comma-separated flag whose values must be among known.
func parseList(flagName, value string, known []string, rule listRule) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		if rule == emptyOrRepeated {
			return nil, nil
		}
		return nil, fmt.Errorf("%s is empty: want some of %s", flagName, strings.Join(known, ","))
	}
	var list []string
	for _, v := range strings.Split(value, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(known, v) || (rule == once && slices.Contains(list, v)) {
			if rule == once {
				return nil, fmt.Errorf("%s %q: want a comma-separated list of %s, each at most once", flagName, value, strings.Join(known, ","))
			}
			return nil, fmt.Errorf("%s %q: want a comma-separated list of %s", flagName, value, strings.Join(known, ","))
		}
		list = append(list, v)
	}
	return list, nil
}

type config struct {
	counts                       []int
	candidates                   int
	clients, restarts            []string
	window                       time.Duration
	crashes, startRate, renewals int
	// runs is how many times each row runs: a single run on this shared machine varies by more than the
	// changes it is to judge (docs/scale.md), so the goals are judged on the medians of several too.
	runs    int
	timeout time.Duration
	// down is how long a killed kube-apiserver stays down before it is started again.
	down time.Duration
	// keepGoing goes on past a scenario that left leases unled, so that a client whose cold start never
	// converges still has its restart rows beside the other client's.
	keepGoing bool
	// flowControl installs the chart's flow control objects.
	flowControl bool
}

// rowKey names a row's electors and their leases: the run it is part of, its number of leases and its
// client.
type rowKey struct {
	run, leases int
	client      string
}

// namespace is lease i's: the row's own, so that a row never meets the leases of another, even while
// those of the one before are being deleted.
func (k rowKey) namespace(i int) string {
	return fmt.Sprintf("elect-%d-%d-%s-%d", k.run, k.leases, k.client, i/leasesPerNamespace)
}

// namespaces is how many namespaces the row's leases are spread over.
func (k rowKey) namespaces() int { return (k.leases + leasesPerNamespace - 1) / leasesPerNamespace }

// row is one steady-state measurement.
type row struct {
	run, leases, electors int
	client                string
	timing                lease.Timing
	// Over the steady window:
	requestsPerSecond        map[string]float64 // lease requests by verb
	guardP50, guardP99       float64            // seconds, leases.leasegate.io as the API server timed it
	renewals                 int                // renewals timed in the steady window
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

func run(ctx context.Context, cfg config) error {
	// The webhook's own election gets a timing no restart here outlasts, as its operator would give it
	// on this API server: at the default timing its elected replica, renewing every 2 s within 10 s,
	// loses its lease while the electors start or the control plane restarts, and leasegate-webhook
	// exits (its Deployment would restart it; this harness does not, and the lease guard is what every
	// elector's write goes through).
	webhookTiming, err := lease.TimingFor(2*time.Minute, lease.DefaultClockSkewMargin)
	if err != nil {
		return err
	}
	if largest, err := timingFor(slices.Max(cfg.counts), cfg.renewals); err != nil {
		return err
	} else if largest.LeaseDuration > webhookTiming.LeaseDuration {
		webhookTiming = largest
	}
	bench, err := process.StartWebhookBench(ctx,
		"--"+manager.FlagLeaseDuration+"="+webhookTiming.LeaseDuration.String(),
		"--"+manager.FlagRenewDeadline+"="+webhookTiming.RenewDeadline.String(),
		"--"+manager.FlagRetryPeriod+"="+webhookTiming.RetryPeriod.String())
	if err != nil {
		return err
	}
	defer bench.Stop()
	if err := grantLeases(ctx, bench.Client); err != nil {
		return err
	}
	if cfg.flowControl {
		if err := installFlowControl(ctx, bench.Client); err != nil {
			return err
		}
	}
	if largest, _ := timingFor(slices.Max(cfg.counts), cfg.renewals); largest.LeaseDuration > lease.DefaultTiming.LeaseDuration {
		if err := electionTiming(ctx, bench.Client, largest); err != nil {
			return err
		}
	}
	loadBefore := loadAverage()
	var rows []row
	var outcomes []outcome
	for run := 1; run <= cfg.runs; run++ {
		for _, n := range cfg.counts {
			timing, err := timingFor(n, cfg.renewals)
			if err != nil {
				return err
			}
			for _, client := range cfg.clients {
				r, o, err := measure(ctx, bench, cfg, rowKey{run: run, leases: n, client: client}, timing)
				outcomes = append(outcomes, o...)
				if err != nil {
					printOutcomes(os.Stdout, outcomes)
					printMedians(outcomes)
					return fmt.Errorf("run %d, %d leases, %s electors: %w", run, n, client, err)
				}
				rows = append(rows, r)
				// The tables so far, on stderr: a run stopped part way keeps what it measured. Their goals
				// judge against the rows run so far only.
				printTable(os.Stderr, rowsHeading, rowLines(rows))
				printOutcomes(os.Stderr, outcomes)
			}
		}
	}
	versions, _ := checkout.PinnedVersions()
	fmt.Printf("\nElections at scale, %s: kube-apiserver %s, etcd %s, %d CPUs, load average %s before and %s after; %d electors per lease in one process, every write through the lease guard; %s steady window per row; timing %s/%s/%s unless leases / P would exceed %d renewals/s; a killed kube-apiserver down %s before it is started again; the chart's flow control objects installed: %t.\n\n",
		time.Now().UTC().Format(time.DateOnly), versions["KUBERNETES_VERSION"], versions["ETCD_VERSION"], runtime.NumCPU(), loadBefore, loadAverage(),
		cfg.candidates, cfg.window, lease.DefaultTiming.LeaseDuration, lease.DefaultTiming.RenewDeadline, lease.DefaultTiming.RetryPeriod, cfg.renewals, cfg.down, cfg.flowControl)
	printTable(os.Stdout, rowsHeading, rowLines(rows))
	printOutcomes(os.Stdout, outcomes)
	printMedians(outcomes)
	return nil
}

// printOutcomes prints the scenarios' table to w.
func printOutcomes(w io.Writer, outcomes []outcome) {
	if len(outcomes) == 0 {
		return
	}
	rows := make([]string, len(outcomes))
	for i, o := range outcomes {
		rows[i] = o.markdown(outcomes)
	}
	printTable(w, outcomesHeading, rows)
}

// printTable prints a markdown table to w after a blank line: its heading, the line under it, its rows.
func printTable(w io.Writer, heading string, rows []string) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, heading)
	fmt.Fprintln(w, strings.Repeat("|---", strings.Count(heading, "|")-1)+"|")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
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

// electionTiming sets leasegate-config's election timing to t. The electors here are pods leasegate did
// not inject, and the lease guard lets such a pod claim no longer a lease duration than
// election.leaseDuration (an injected pod claims what its injection recorded): a row whose timing is
// longer than the default is one whose operator configured that timing. It is applied before the first
// row's leases are created, which gives the webhook time to load it.
func electionTiming(ctx context.Context, api kubernetes.Interface, t lease.Timing) error {
	data := fmt.Sprintf("election: {leaseDuration: %s, renewDeadline: %s, retryPeriod: %s}\n", t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
	_, err := api.CoreV1().ConfigMaps("leasegate-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: map[string]string{lgconfig.Key: data},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("setting leasegate-config's election timing to the longest row's: %w", err)
	}
	return nil
}

// grantLeases lets every service account read and write Leases, as provisioning's Roles do lease by lease
// (the lease guard, not RBAC, is what is measured here).
func grantLeases(ctx context.Context, api kubernetes.Interface) error {
	rbac := api.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-leases"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bench-leases"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}},
	}, metav1.CreateOptions{})
	return err
}

func measure(ctx context.Context, bench *process.WebhookBench, cfg config, key rowKey, timing lease.Timing) (row, []outcome, error) {
	api, n, client := bench.Client, key.leases, key.client
	r := row{run: key.run, leases: n, electors: n * cfg.candidates, client: client, timing: timing}
	var outcomes []outcome
	apiServerAlone, _ := bench.ControlPlane.RSSBytes()
	fmt.Fprintf(os.Stderr, "run %d, %d leases, %s electors: creating the leases unheld in %d namespaces, as provisioning does\n", key.run, n, client, key.namespaces())
	if err := createLeases(ctx, api, key); err != nil {
		return r, nil, err
	}
	defer deleteNamespaces(context.Background(), api, key)

	w, failed := &writes{renewals: &latencies{}}, &failures{}
	pop := &population{}
	defer func() { stopAll(pop.all()) }()
	pods, err := process.NewPodClients(bench.ControlPlane.Config)
	if err != nil {
		return r, nil, err
	}
	scenario := func(name string, round int, do event) error {
		failed.take() // what the steady window and the crashes met is not this scenario's
		before, err := transitions(ctx, api, key)
		if err != nil {
			return err
		}
		o, err := runScenario(ctx, outcome{run: key.run, leases: n, client: client, scenario: name, round: round, timing: timing}, pop, cfg.candidates, w, bench.ControlPlane, do, cfg.timeout, failed)
		if err != nil {
			return err
		}
		after, err := transitions(ctx, api, key)
		if err != nil {
			return err
		}
		o.leadersChanged = after - before
		o.outOfFiles = failed.ownLimit()
		outcomes = append(outcomes, o)
		if name != scenarioCold {
			fmt.Fprintf(os.Stderr, "  %s: %s\n", o.name(), o.startSummary())
		}
		select {
		case <-bench.Webhook.Exited():
			return fmt.Errorf("leasegate-webhook exited during the %s:\n%s", o.name(), bench.Webhook.Logs())
		default:
		}
		if o.led == 0 {
			err := fmt.Errorf("%s: %d leases not led %s after it; the electors' failures: %s", o.name(), o.unledAtEnd, cfg.timeout, failed.take())
			if o.neverAnswered {
				err = fmt.Errorf("%s: the restarted kube-apiserver was not ready within %s", o.name(), cfg.timeout)
			}
			if !cfg.keepGoing {
				return fmt.Errorf("%w\n%s", err, bench.ControlPlane.RestartLog())
			}
			fmt.Fprintf(os.Stderr, "  %v; going on (-keep-going)\n", err)
			return nil
		}
		fmt.Fprintf(os.Stderr, "  %s: every lease led after %s (API server answering after %s); the electors' failures: %s\n",
			o.name(), o.led.Round(100*time.Millisecond), o.answering.Round(100*time.Millisecond), failed.take())
		return nil
	}

	fmt.Fprintf(os.Stderr, "  starting %d electors, %d/s\n", n*cfg.candidates, cfg.startRate)
	if err := scenario(scenarioCold, 1, func(ctx context.Context) (time.Time, error) {
		start := time.Now()
		for i := range n {
			for c := range cfg.candidates {
				time.Sleep(time.Until(start.Add(time.Duration(i*cfg.candidates+c) * time.Second / time.Duration(cfg.startRate))))
				e, err := startCandidate(ctx, key, pods, i, c, timing, w, failed.logger())
				if err != nil {
					return time.Time{}, err
				}
				pop.add(e)
			}
		}
		return start, nil
	}); err != nil {
		return r, outcomes, err
	}
	electors := pop.all()
	r.startup = outcomes[0].led
	time.Sleep(timing.LeaseDuration) // the losers' first attempts are over: only the steady state counts

	fmt.Fprintf(os.Stderr, "  measuring %s of steady state\n", cfg.window)
	transitionsBefore, err := transitions(ctx, api, key)
	if err != nil {
		return r, outcomes, err
	}
	apiBefore, err := bench.ControlPlane.Metrics(ctx)
	if err != nil {
		return r, outcomes, err
	}
	webhookBefore, err := bench.Webhook.Metrics()
	if err != nil {
		return r, outcomes, err
	}
	w.renewals.record(true)
	windowStart := time.Now()
	for time.Since(windowStart) < cfg.window {
		leaders, _ := leadersPerLease(electors, cfg.candidates, time.Time{})
		_, twice := tally(leaders)
		r.doubleClaims += twice
		time.Sleep(time.Second)
	}
	elapsed := time.Since(windowStart)
	durations := w.renewals.record(false)
	apiAfter, err := bench.ControlPlane.Metrics(ctx)
	if err != nil {
		return r, outcomes, err
	}
	webhookAfter, err := bench.Webhook.Metrics()
	if err != nil {
		return r, outcomes, err
	}
	transitionsAfter, err := transitions(ctx, api, key)
	if err != nil {
		return r, outcomes, err
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
	// A window without a renewal (a server shedding every one) is the row's figure, and the restarts
	// after it are still measured.
	if r.renewals = len(durations); r.renewals > 0 {
		slices.Sort(durations)
		r.renewP50, r.renewP99, r.renewMax = durations[len(durations)/2], durations[len(durations)*99/100], durations[len(durations)-1]
	}
	r.webhookRSS, _ = bench.Webhook.RSSBytes()
	r.apiServerRSS, r.etcdRSS = bench.ControlPlane.RSSBytes()
	r.apiServerAdded = r.apiServerRSS - apiServerAlone

	if cfg.crashes > 0 {
		fmt.Fprintf(os.Stderr, "  crashing %d leaders at once\n", cfg.crashes)
		if r.takeovers, err = crashLeaders(electors, cfg.candidates, cfg.crashes, timing); err != nil {
			return r, outcomes, err
		}
	}
	rounds := map[string]int{}
	for _, restart := range cfg.restarts {
		name, do := scenarioAPIServerRestart, event(func(ctx context.Context) (time.Time, error) {
			return bench.ControlPlane.RestartAPIServerAfter(ctx, cfg.down)
		})
		if restart == "etcd" {
			name, do = scenarioEtcdRestart, bench.ControlPlane.RestartEtcd
		}
		rounds[name]++
		do = do.within(cfg.timeout)
		fmt.Fprintf(os.Stderr, "  %s, round %d\n", name, rounds[name])
		if err := scenario(name, rounds[name], do); err != nil {
			return r, outcomes, err
		}
	}
	return r, outcomes, nil
}

// crashLeaders crashes the leaders of k leases picked at random, all at once, and times until another
// candidate of each leads.
func crashLeaders(electors []candidate, candidates, k int, timing lease.Timing) ([]time.Duration, error) {
	leases := rand.Perm(len(electors) / candidates)[:k]
	crashedAt := time.Now()
	var crashed []candidate
	for _, l := range leases {
		for _, e := range electors[l*candidates : (l+1)*candidates] {
			if e.leads() {
				e.crash()
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
				if e != crashed[j] && e.leads() {
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
func createLeases(ctx context.Context, api kubernetes.Interface, key rowKey) error {
	return load.InParallel(key.leases, func(i int) error {
		ns := key.namespace(i)
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

func deleteNamespaces(ctx context.Context, api kubernetes.Interface, key rowKey) {
	_ = load.InParallel(key.namespaces(), func(j int) error {
		return api.CoreV1().Namespaces().Delete(ctx, key.namespace(j*leasesPerNamespace), metav1.DeleteOptions{})
	})
}

// transitions sums leaseTransitions over the row's leases.
func transitions(ctx context.Context, api kubernetes.Interface, key rowKey) (int, error) {
	total := 0
	var mu sync.Mutex
	err := load.InParallel(key.namespaces(), func(j int) error {
		list, err := api.CoordinationV1().Leases(key.namespace(j*leasesPerNamespace)).List(ctx, metav1.ListOptions{})
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
