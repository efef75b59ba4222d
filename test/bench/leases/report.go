package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

// loadAverage is the machine's load average over 1, 5 and 15 minutes: others' work on it shows in every
// figure.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if fields := strings.Fields(string(data)); err == nil && len(fields) >= 3 {
		return strings.Join(fields[:3], " / ")
	}
	return "unknown"
}

// rowsHeading heads the steady-state table, a column for each of row's markdown.
const rowsHeading = "| run | leases | electors | client | timing D / R / P | all led after | lease requests/s: renewals (PUT) / other | lease guard p50 / p99 (API server) | renewal p50 / p99 / max (leader) | Lease watches | leaders changed / two claims | API server RSS (added by the electors) | etcd RSS | webhook RSS | webhook's API requests/s | crash takeover median / max (budget D + M) |"

// rowLines are the rows' lines of the steady-state table.
func rowLines(rows []row) []string {
	lines := make([]string, len(rows))
	for i, r := range rows {
		lines[i] = r.markdown()
	}
	return lines
}

// markdown is the row's line of the steady-state table.
func (r row) markdown() string {
	put := r.requestsPerSecond["PUT"]
	var other float64
	for verb, v := range r.requestsPerSecond {
		if verb != "PUT" {
			other += v
		}
	}
	startup := "not all"
	if r.startup > 0 {
		startup = r.startup.Round(100 * time.Millisecond).String()
	}
	takeovers := "-"
	if len(r.takeovers) > 0 {
		sorted := slices.Sorted(slices.Values(r.takeovers))
		takeovers = fmt.Sprintf("%s / %s (%s)", sorted[len(sorted)/2].Round(10*time.Millisecond), sorted[len(sorted)-1].Round(10*time.Millisecond),
			lease.TakeoverBudget(r.timing.LeaseDuration, lease.DefaultClockSkewMargin))
	}
	renewals := "no renewal in the window"
	if r.renewals > 0 {
		renewals = fmt.Sprintf("%s / %s / %s", r.renewP50.Round(100*time.Microsecond), r.renewP99.Round(time.Millisecond), r.renewMax.Round(time.Millisecond))
	}
	return fmt.Sprintf("| %d | %d | %d | %s | %s / %s / %s | %s | %.0f / %.1f | %.1f / %.0f ms | %s | %.0f | %d / %d | %s (%s) | %s | %s | %.1f | %s |",
		r.run, r.leases, r.electors, r.client, r.timing.LeaseDuration, r.timing.RenewDeadline, r.timing.RetryPeriod, startup,
		put, other, r.guardP50*1000, r.guardP99*1000, renewals,
		r.watches, r.transitions, r.doubleClaims, mib(r.apiServerRSS), mib(r.apiServerAdded), mib(r.etcdRSS), mib(r.webhookRSS), r.webhookRequestsPerSecond,
		takeovers)
}

// outcomesHeading heads the scenarios' table, a column for each of markdown's.
const outcomesHeading = "| run | leases | scenario | client | timing D / R / P | API server answering after | every lease led after | leases unled at worst | 429s: peak/s / total (of requests) | 429s >= 1% until (budget D + M) | shed (peak queued): lease writes' level / workload-low | lease writes answered: ok / conflict / 429 (p99) | lease writes/s | leaders changed | two claims | CPU until every lease led: API server / electors | API server RSS (peak) | goals |"

// markdown is the outcome's row of the scenarios' table, judged against the others of the same run and
// round.
func (o outcome) markdown(all []outcome) string {
	answering, led := "-", "not all"
	switch {
	case o.neverAnswered:
		answering = "not ready within the timeout"
	case o.scenario != scenarioCold:
		answering = o.answering.Round(100 * time.Millisecond).String()
	}
	if o.led != 0 {
		led = o.led.Round(100 * time.Millisecond).String()
		if o.scenario != scenarioCold {
			led += fmt.Sprintf(" (%s after answering)", o.recovered().Round(100*time.Millisecond))
		}
	} else {
		led = fmt.Sprintf("%d unled after the timeout", o.unledAtEnd)
	}
	settled := "never"
	switch {
	case o.throttling.overAtEnd:
		settled = "not settled"
	case o.throttling.lastOver > 0:
		settled = o.throttling.lastOver.Round(time.Second).String()
	}
	share := 0.0
	if o.throttling.requests > 0 {
		share = 100 * o.throttling.total / o.throttling.requests
	}
	w, r := o.throttling.writes, o.throttling.reads
	return fmt.Sprintf("| %d | %d | %s | %s | %s / %s / %s | %s | %s | %d | %.0f / %.0f (%.1f%%) | %s (%s) | %.0f (%.0f) / %.0f (%.0f) | %d / %d / %d (%s) | %.0f | %d | %d | %s | %s | %s |",
		o.run, o.leases, o.name(), o.client, o.timing.LeaseDuration, o.timing.RenewDeadline, o.timing.RetryPeriod, answering, led, o.maxUnled,
		o.throttling.peak, o.throttling.total, share, settled, o.budget(), w.rejected, w.peakQueued, r.rejected, r.peakQueued,
		o.writes.ok, o.writes.conflicts, o.writes.shed, o.writeP99.Round(10*time.Millisecond), o.writesPerSecond, o.leadersChanged, o.twoClaims,
		cpu(o.apiServerCPU, o.electorsCPU), mib(o.apiServerRSS), o.verdict(all))
}

// cpu is the API server's and the electors' CPU time, or "-" when the leases were never all led.
func cpu(apiServer, electors time.Duration) string {
	if apiServer == 0 && electors == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", apiServer.Round(100*time.Millisecond), electors.Round(100*time.Millisecond))
}

// unsettled reports a restart whose 429s were still at 1% of requests or more past one takeover budget
// after the API server answered again (a cold start's are not held to it).
func (o outcome) unsettled() bool {
	return o.scenario != scenarioCold && (o.throttling.overAtEnd || o.throttling.lastOver > o.budget())
}

// recovered is how long after the API server answered again every lease was led (for a cold start, the
// same as led).
func (o outcome) recovered() time.Duration {
	return max(o.led-o.answering, 0)
}

// verdict says whether an agent's outcome meets the scale goals (docs/scale.md), and which it misses: every lease led
// (no later than client-go's electors in the same scenario, run and round, where they ran), never two
// claims, and after a restart the 429s under 1% of requests within one takeover budget of the API
// server answering again. client-go's rows are the reference, and say only what went wrong.
func (o outcome) verdict(all []outcome) string {
	var missed []string
	switch {
	case o.neverAnswered:
		missed = append(missed, "the API server never answered: not a measure of the electors")
	case o.led == 0:
		missed = append(missed, "leases left unled")
	}
	if o.twoClaims > 0 {
		missed = append(missed, "two claims")
	}
	if o.unsettled() {
		missed = append(missed, "429s >= 1% past the budget")
	}
	if o.outOfFiles > 0 {
		missed = append(missed, fmt.Sprintf("not a measure of the electors: %d of their requests failed for want of a file descriptor in the harness", o.outOfFiles))
	}
	if o.client == clientAgent {
		for _, other := range all {
			if other.client == clientClientGo && other.run == o.run && other.leases == o.leases && other.scenario == o.scenario && other.round == o.round && other.led != 0 && o.led != 0 {
				missed = append(missed, behindClientGo(o.scenario, o.led, other.led)...)
			}
		}
	}
	return judged(o.client, missed)
}

// behindClientGo says by how much an agent row's time until every lease was led trails client-go's beyond
// what the harness can tell, counted from the event (the first elector started, or the kill), as the
// goal is. A restart's time includes how long the restarted API server took to answer, and that is the
// electors' doing as much as the server's: a restarted kube-apiserver costs itself about 3 s of CPU
// before it answers, and what it spends beyond that goes to the electors at its door (each restart's
// start report, docs/scale.md). After the answer both clients' leaders renew on their own retry
// period's phase; that time is reported beside the race, not raced. etcd restarts are not raced.
func behindClientGo(scenario string, led, clientGoLed time.Duration) []string {
	if d := led - clientGoLed; scenario != scenarioEtcdRestart && d > sampleEvery {
		return []string{fmt.Sprintf("led %s after client-go", d.Round(100*time.Millisecond))}
	}
	return nil
}

// judged words a verdict: client-go's rows are the reference and say only what went wrong; an agent's
// meet the goals or say which they missed.
func judged(client string, missed []string) string {
	switch {
	case client != clientAgent && len(missed) == 0:
		return "reference"
	case client != clientAgent:
		return "reference: " + strings.Join(missed, ", ")
	case len(missed) == 0:
		return "met"
	}
	return "missed: " + strings.Join(missed, ", ")
}

// mediansHeading heads the table of medians over the runs and rounds, a column for each of median's markdown.
const mediansHeading = "| leases | scenario | client | times | every lease led after: median (fastest - slowest) | after the answer: median (fastest - slowest) | times with leases unled / two claims / 429s >= 1% past the budget | goals, on the medians |"

// median is one scenario of one row size and client over the times it ran: the runs, and a restart's
// rounds in each run.
type median struct {
	leases           int
	scenario, client string
	times            int
	// led and recovered are over the times every lease was led (outcome.led, outcome.recovered).
	led, recovered []time.Duration
	// unled, twoClaims and unsettled count the times with leases left unled, with two claims, and with
	// 429s at 1% or more past the budget after a restart.
	unled, twoClaims, unsettled int
}

// medians gathers the outcomes of each scenario, row size and client over the runs and rounds, in the
// order they first ran.
func medians(outcomes []outcome) []median {
	var ms []median
	for _, o := range outcomes {
		i := slices.IndexFunc(ms, func(m median) bool { return m.leases == o.leases && m.scenario == o.scenario && m.client == o.client })
		if i < 0 {
			ms = append(ms, median{leases: o.leases, scenario: o.scenario, client: o.client})
			i = len(ms) - 1
		}
		m := &ms[i]
		m.times++
		if o.led == 0 {
			m.unled++
		} else {
			m.led = append(m.led, o.led)
			m.recovered = append(m.recovered, o.recovered())
		}
		if o.twoClaims > 0 {
			m.twoClaims++
		}
		if o.unsettled() {
			m.unsettled++
		}
	}
	return ms
}

// middle is the median of ds (the mean of the two in the middle of an even count), 0 for none.
func middle(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is a median with its fastest and slowest, or "-".
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	round := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	return fmt.Sprintf("%s (%s - %s)", round(middle(ds)), round(slices.Min(ds)), round(slices.Max(ds)))
}

// markdown is the median's row of the medians' table, judged against client-go's of the same scenario
// and row size.
func (m median) markdown(all []median) string {
	recovered := "-"
	if m.scenario != scenarioCold {
		recovered = spread(m.recovered)
	}
	return fmt.Sprintf("| %d | %s | %s | %d | %s | %s | %d / %d / %d | %s |", m.leases, m.scenario, m.client, m.times,
		spread(m.led), recovered, m.unled, m.twoClaims, m.unsettled, m.verdict(all))
}

// verdict holds the medians to the goals as outcome.verdict holds one run: every run led every lease,
// never with two claims, and its 429s settled within the budget; the agents' median no later than
// client-go's, counted from the event (the kill, for a restart), as behindClientGo races one run.
func (m median) verdict(all []median) string {
	var missed []string
	for _, c := range []struct {
		times int
		what  string
	}{{m.unled, "leases left unled"}, {m.twoClaims, "two claims"}, {m.unsettled, "429s >= 1% past the budget"}} {
		if c.times > 0 {
			missed = append(missed, fmt.Sprintf("%s %d of %d times", c.what, c.times, m.times))
		}
	}
	if m.client == clientAgent {
		for _, other := range all {
			if other.client == clientClientGo && other.leases == m.leases && other.scenario == m.scenario && len(other.led) > 0 && len(m.led) > 0 {
				missed = append(missed, behindClientGo(m.scenario, middle(m.led), middle(other.led))...)
			}
		}
	}
	return judged(m.client, missed)
}

// printMedians prints the medians' table, when some scenario ran more than once.
func printMedians(outcomes []outcome) {
	ms := medians(outcomes)
	if !slices.ContainsFunc(ms, func(m median) bool { return m.times > 1 }) {
		return
	}
	rows := make([]string, len(ms))
	for i, m := range ms {
		rows[i] = m.markdown(ms)
	}
	printTable(os.Stdout, mediansHeading, rows)
}
