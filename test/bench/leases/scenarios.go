package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/observe"
	"github.com/leasegate/leasegate/test/framework/process"
)

// The scenarios of a row, in the order they run on the same electors.
const (
	scenarioCold             = "cold start"
	scenarioAPIServerRestart = "kube-apiserver restart"
	scenarioEtcdRestart      = "etcd restart"
)

// outcome is what one scenario did to one client's electors.
type outcome struct {
	run      int // 1 for the first run of the row (-runs)
	leases   int
	client   string
	scenario string
	// round is which of the row's restarts of this kind it is, from 1 (-restarts may name one more than
	// once): it is raced against client-go's of the same run and round.
	round  int
	timing lease.Timing
	// answering is how long after the event the API server answered ready again (0 for a cold start, and
	// for a restart it never answered within the timeout: neverAnswered).
	answering     time.Duration
	neverAnswered bool
	// start is how the restarted process came back (zero for a cold start), and electorsCPUToAnswer the
	// CPU this process spent from the event until the API server answered ready.
	start               process.StartReport
	electorsCPUToAnswer time.Duration
	// led is how long after the event every lease had exactly one elector saying it leads, which wrote the
	// lease after the API server answered again; 0 when that never happened within the timeout.
	led time.Duration
	// unledAtEnd is how many leases were not so led when the wait gave up.
	unledAtEnd int
	maxUnled   int
	throttling throttling
	// writesPerSecond are the electors' successful lease writes (acquisitions and renewals) per second,
	// from the event until every lease was led.
	writesPerSecond float64
	leadersChanged  int
	// twoClaims are the leases seen with two electors saying they lead at once.
	twoClaims    int
	apiServerRSS int64 // peak while the scenario ran
	// writes are the electors' lease writes the API server answered during the scenario, by answer, and
	// writeP99 how long the 99th percentile of them took.
	writes   writeCounts
	writeP99 time.Duration
	// apiServerCPU and electorsCPU are the CPU time kube-apiserver and this process (the electors, and
	// the harness's own sampling, alike for both clients) spent from the event until every lease was led:
	// on a machine they share, what one side spends the other cannot.
	apiServerCPU, electorsCPU time.Duration
	// outOfFiles are the electors' requests that failed because the harness had no file descriptor left
	// (failures.outOfFiles): when any did, the scenario measured the harness's limit.
	outOfFiles int
}

// name is the scenario's, with its round after the first.
func (o outcome) name() string {
	if o.round > 1 {
		return fmt.Sprintf("%s %d", o.scenario, o.round)
	}
	return o.scenario
}

// startSummary says how the restarted process came back, and what this process spent meanwhile: whether
// the restart's own start or the electors coming back held the API server's answer.
func (o outcome) startSummary() string {
	s := o.start
	if s.Ready.IsZero() {
		return "no restart answered"
	}
	failing := "none"
	if len(s.Failing) > 0 {
		failing = strings.Join(s.Failing, ", ")
	}
	round := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	summary := fmt.Sprintf("started %s after the event; the API server first answered a readiness poll (any answer within its second) %s and ready %s after that start, the restarted process's CPU by then %s, its readiness checks still failing before: %s; the electors' CPU from the event until ready %s",
		round(o.answering-s.Ready.Sub(s.Started)), round(s.FirstAnswer.Sub(s.Started)), round(s.Ready.Sub(s.Started)), round(s.CPU), failing, round(o.electorsCPUToAnswer))
	if s.Served != nil {
		summary += "; " + servedBeforeReady(s.Served, servedShown)
	}
	return summary
}

// servedShown is how many kinds of request servedBeforeReady names.
const servedShown = 6

// servedBeforeReady says which requests a restarted kube-apiserver answered before it was ready, from its
// metrics scraped then (its counters start with the process): the kinds (verb, resource, answer) it
// answered most, up to top of them, with their counts, and the total.
func servedBeforeReady(metrics observe.Metrics, top int) string {
	type kind struct {
		name  string
		count float64
	}
	var kinds []kind
	var total float64
	byName := map[string]int{}
	for _, m := range metrics["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		// A request for a path outside the API's resources (/readyz) is counted with its path as the
		// subresource and no resource.
		resource, sub := labels["resource"], labels["subresource"]
		switch {
		case resource == "":
			resource = sub
		case sub != "":
			resource += "/" + sub
		}
		name := strings.TrimSpace(labels["verb"] + " " + resource + " " + labels["code"])
		count := m.GetCounter().GetValue()
		total += count
		if i, ok := byName[name]; ok {
			kinds[i].count += count
			continue
		}
		byName[name] = len(kinds)
		kinds = append(kinds, kind{name, count})
	}
	if len(kinds) == 0 {
		return "before ready it answered no requests"
	}
	slices.SortFunc(kinds, func(a, b kind) int { return cmp.Or(cmp.Compare(b.count, a.count), strings.Compare(a.name, b.name)) })
	shown := make([]string, 0, top)
	for _, k := range kinds[:min(top, len(kinds))] {
		shown = append(shown, fmt.Sprintf("%.0f %s", k.count, k.name))
	}
	return fmt.Sprintf("before ready it answered %.0f requests, most: %s", total, strings.Join(shown, ", "))
}

// budget is the takeover budget of the scenario's timing.
func (o outcome) budget() time.Duration {
	return lease.TakeoverBudget(o.timing.LeaseDuration, lease.DefaultClockSkewMargin)
}

// sample is one scrape of the API server's request counters.
type sample struct {
	at                  time.Time
	requests, throttled float64 // answered in all, and answered 429, since the API server started
	cpu                 float64 // the API server's CPU seconds since it started
	// writes and reads are the priority levels of the electors' lease writes and of their reads and
	// watches (leaseWritesLevel, readsLevel).
	writes, reads levelSample
}

// levelSample is one priority level's rejections since the API server started, and its requests waiting
// in its queues at the scrape.
type levelSample struct{ rejected, queued float64 }

func levelOf(metrics observe.Metrics, level string) levelSample {
	labels := map[string]string{"priority_level": level}
	return levelSample{
		rejected: metrics.Sum("apiserver_flowcontrol_rejected_requests_total", labels),
		queued:   metrics.Sum("apiserver_flowcontrol_current_inqueue_requests", labels),
	}
}

// throttling sums the API server's 429s over a scenario.
type throttling struct {
	peak     float64 // 429s per second, the highest over one interval between scrapes
	total    float64 // 429s
	requests float64 // every request answered
	// writes and reads are what the priority levels of the lease writes and of the reads shed over the
	// scenario, and the most requests waiting in their queues at a scrape: which of them held the
	// electors back.
	writes, reads levelThrottling
	lastOver      time.Duration
	overAtEnd     bool
}

// sampleEvery is how often a scenario counts the leases led: "every lease led after" is known to within
// it, and two clients led within it of each other led at the same time as far as the harness can tell.
const sampleEvery = 250 * time.Millisecond

// throttledShare is the share of requests a second may answer 429 and still count as settled.
const throttledShare = 0.01

// levelThrottling is one priority level's part in a scenario's throttling.
type levelThrottling struct{ rejected, peakQueued float64 }

func (l *levelThrottling) add(prev, cur levelSample) {
	l.rejected += increase(prev.rejected, cur.rejected)
	l.peakQueued = max(l.peakQueued, cur.queued)
}

// throttle sums the samples' intervals. A counter lower than the sample before it was reset by a restart
// of the API server: the interval then counts what the new one answered. lastOver is how long after
// answering the last interval in which at least 1% of the requests were answered 429 ended (0 if none
// did); overAtEnd says the last interval was such an interval, so the 429s had not settled at all.
func throttle(samples []sample, answering time.Time) throttling {
	var t throttling
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		throttled, requests := increase(prev.throttled, cur.throttled), increase(prev.requests, cur.requests)
		t.total += throttled
		t.requests += requests
		t.writes.add(prev.writes, cur.writes)
		t.reads.add(prev.reads, cur.reads)
		if seconds := cur.at.Sub(prev.at).Seconds(); seconds > 0 {
			t.peak = max(t.peak, throttled/seconds)
		}
		over := requests > 0 && throttled >= throttledShare*requests
		if over && cur.at.After(answering) {
			t.lastOver = cur.at.Sub(answering)
		}
		t.overAtEnd = over && i == len(samples)-1
	}
	return t
}

// cpuUntil is the API server's CPU time over the samples up to until, across restarts.
func cpuUntil(samples []sample, until time.Time) time.Duration {
	var seconds float64
	for i := 1; i < len(samples) && !samples[i].at.After(until); i++ {
		seconds += increase(samples[i-1].cpu, samples[i].cpu)
	}
	return time.Duration(seconds * float64(time.Second))
}

// processCPU is this process's CPU time, user and system, so far.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// increase is a counter's increase between two scrapes, the new value when it was reset in between.
func increase(before, after float64) float64 {
	if after < before {
		return after
	}
	return after - before
}

// tally counts the leases with no elector saying it leads, and those with more than one.
func tally(leaders []int) (unled, claimedTwice int) {
	for _, n := range leaders {
		switch {
		case n == 0:
			unled++
		case n > 1:
			claimedTwice++
		}
	}
	return unled, claimedTwice
}

// leadersPerLease counts, lease by lease, the electors that say they lead it, and those of them that
// wrote their lease since when. A lease counts once all its candidates have started: during a cold
// start the electors are a prefix of the row's, which may end part way through a lease.
func leadersPerLease(electors []candidate, candidates int, since time.Time) (leaders, fresh []int) {
	leases := len(electors) / candidates
	leaders, fresh = make([]int, leases), make([]int, leases)
	for i, e := range electors[:leases*candidates] {
		if e.leads() {
			leaders[i/candidates]++
			if !e.wrote().Before(since) {
				fresh[i/candidates]++
			}
		}
	}
	return leaders, fresh
}

// monitor scrapes the API server's request counters and resident memory every second.
type monitor struct {
	cp       *process.ControlPlane
	stopping chan struct{}
	done     chan struct{}
	samples  []sample
	peakRSS  int64
}

func startMonitor(cp *process.ControlPlane) *monitor {
	m := &monitor{cp: cp, stopping: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			m.scrape()
			select {
			case <-m.stopping:
				m.scrape()
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return m
}

func (m *monitor) scrape() {
	if rss, _ := m.cp.RSSBytes(); rss > m.peakRSS {
		m.peakRSS = rss
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	metrics, err := m.cp.Metrics(ctx)
	if err != nil {
		return // down or restarting: the next scrape's interval spans the gap
	}
	m.samples = append(m.samples, sample{at: time.Now(),
		requests:  metrics.Sum("apiserver_request_total", nil),
		throttled: metrics.Sum("apiserver_request_total", map[string]string{"code": "429"}),
		cpu:       metrics.Sum("process_cpu_seconds_total", nil),
		writes:    levelOf(metrics, leaseWritesLevel),
		reads:     levelOf(metrics, readsLevel)})
}

func (m *monitor) stop() ([]sample, int64) {
	close(m.stopping)
	<-m.done
	return m.samples, m.peakRSS
}

// event is what a scenario does; it returns when it is over, with the instant from which a leader must
// have written its lease to count as leading again (for a restart, when the API server answered again).
type event func(context.Context) (time.Time, error)

// within is the event given at most timeout: a restart waits for the API server's readiness no longer
// than its scenario waits for the leases. Not for a cold start, whose electors live on the context it is
// given.
func (e event) within(timeout time.Duration) event {
	return func(ctx context.Context) (time.Time, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return e(ctx)
	}
}

// population is the electors of a row, which a cold start adds to while they are being watched.
type population struct {
	mu   sync.Mutex
	list []candidate
}

func (p *population) add(c candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, c)
}

// all is the electors started so far; appending later does not change the ones it holds.
func (p *population) all() []candidate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list[:len(p.list):len(p.list)]
}

// runScenario starts at event's start, and watches the electors until every lease is led by one that
// wrote it since the API server answered again, and for at least one takeover budget after that answer
// (the 429s must have settled by then), for at most timeout.
func runScenario(ctx context.Context, o outcome, pop *population, candidates int, w *writes, cp *process.ControlPlane, do event, timeout time.Duration, failed *failures) (outcome, error) {
	m := startMonitor(cp)
	writesBefore, outcomesBefore := w.count.Load(), w.outcomes.counts()
	w.outcomes.took.restart()
	start, cpuBefore := time.Now(), processCPU()
	type answer struct {
		at  time.Time
		cpu time.Duration // this process's, when the event returned
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		at, err := do(ctx) // not bounded here: a cold start starts its electors on ctx, which outlives the scenario
		answered <- answer{at, processCPU(), err}
	}()
	var answering time.Time
	returned := false // the event's answer was received
	twice := map[int]bool{}
	const progressEvery = 30 * time.Second
	nextProgress := start.Add(progressEvery)
	for {
		select {
		case a := <-answered:
			returned = true
			// A restarted API server not ready within the timeout (the restart's own deadline) is the
			// scenario's row, not the harness's failure: the timeout below ends the wait.
			if notReady := errors.Is(a.err, context.DeadlineExceeded) && ctx.Err() == nil; notReady {
				break
			}
			if a.err != nil {
				m.stop()
				return o, a.err
			}
			answering = a.at
			if o.scenario != scenarioCold {
				o.answering = a.at.Sub(start)
				o.start, o.electorsCPUToAnswer = cp.LastStart(), a.cpu-cpuBefore
			}
		default:
		}
		electors := pop.all()
		leaders, fresh := leadersPerLease(electors, candidates, answering)
		unled, _ := tally(leaders)
		for l, n := range leaders {
			if n > 1 {
				twice[l] = true
			}
		}
		o.maxUnled = max(o.maxUnled, unled)
		if !answering.IsZero() && o.led == 0 {
			if notFresh, claimedTwice := tally(fresh); notFresh == 0 && claimedTwice == 0 {
				o.led = time.Since(start)
				o.electorsCPU = processCPU() - cpuBefore
				o.writesPerSecond = float64(w.count.Load()-writesBefore) / o.led.Seconds()
			}
		}
		if o.led != 0 && time.Since(answering) >= o.budget() {
			break
		}
		if time.Since(start) > timeout {
			o.unledAtEnd = unled
			o.neverAnswered = answering.IsZero() && o.scenario != scenarioCold
			if !answering.IsZero() {
				notFresh, _ := tally(fresh)
				o.unledAtEnd = notFresh
			}
			break
		}
		if time.Now().After(nextProgress) {
			nextProgress = nextProgress.Add(progressEvery)
			fmt.Fprintf(os.Stderr, "  %s after %s: %d leases without a leader, %d ever with two; %d electors never read their lease; failures: %s\n",
				o.name(), time.Since(start).Round(time.Second), unled, len(twice), unsynced(pop.all()), failed)
		}
		time.Sleep(sampleEvery)
	}
	if !returned {
		// A restart the timeout above ended before it returned is still polling the API server's
		// readiness until its own deadline (the same timeout, counted a moment later): the next restart
		// must not start while it polls.
		<-answered
	}
	samples, rss := m.stop()
	o.writes = w.outcomes.counts().since(outcomesBefore)
	if took := w.outcomes.took.record(false); len(took) > 0 {
		slices.Sort(took)
		o.writeP99 = took[len(took)*99/100]
	}
	if answering.IsZero() {
		answering = start
	}
	o.throttling, o.apiServerRSS, o.twoClaims = throttle(samples, answering), rss, len(twice)
	if o.led != 0 {
		// The scrape after the moment counts: it holds the CPU spent up to it, within a second.
		o.apiServerCPU = cpuUntil(samples, start.Add(o.led+time.Second))
	}
	return o, nil
}

// unsynced counts the electors that have not yet read their lease.
func unsynced(electors []candidate) int {
	n := 0
	for _, e := range electors {
		if !e.synced() {
			n++
		}
	}
	return n
}

// stopAll stops the electors, all at once.
func stopAll(electors []candidate) {
	var wg sync.WaitGroup
	for _, e := range electors {
		wg.Go(e.stop)
	}
	wg.Wait()
}
