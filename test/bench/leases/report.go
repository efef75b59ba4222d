package main

import (
	"fmt"
	"os"
	"strings"
	"time"
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

// outcomesHeading heads the scenarios' table, a column for each of markdown's.
const outcomesHeading = "| leases | scenario | client | timing D / R / P | API server answering after | every lease led after | leases unled at worst | 429s: peak/s / total (of requests) | 429s >= 1% until (budget D + M) | shed (peak queued): lease writes' level / workload-low | lease writes answered: ok / conflict / 429 (p99) | lease writes/s | leaders changed | two claims | API server RSS (peak) | goals |"

// markdown is the outcome's row of the scenarios' table, judged against the others of the same run.
func (o outcome) markdown(all []outcome) string {
	answering, led := "-", "not all"
	if o.scenario != scenarioCold {
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
	return fmt.Sprintf("| %d | %s | %s | %s / %s / %s | %s | %s | %d | %.0f / %.0f (%.1f%%) | %s (%s) | %.0f (%.0f) / %.0f (%.0f) | %d / %d / %d (%s) | %.0f | %d | %d | %s | %s |",
		o.leases, o.scenario, o.client, o.timing.LeaseDuration, o.timing.RenewDeadline, o.timing.RetryPeriod, answering, led, o.maxUnled,
		o.throttling.peak, o.throttling.total, share, settled, o.budget(), w.rejected, w.peakQueued, r.rejected, r.peakQueued,
		o.writes.ok, o.writes.conflicts, o.writes.shed, o.writeP99.Round(10*time.Millisecond), o.writesPerSecond, o.leadersChanged, o.twoClaims,
		mib(o.apiServerRSS), o.verdict(all))
}

// recovered is how long after the API server answered again every lease was led (for a cold start, the
// same as led).
func (o outcome) recovered() time.Duration {
	return max(o.led-o.answering, 0)
}

// verdict says whether an agent's outcome meets the scale goals (docs/scale.md), and which it misses: every lease led
// (no later than client-go's electors in the same scenario of the same run, where they ran), never two
// claims, and after a restart the 429s under 1% of requests within one takeover budget of the API
// server answering again. client-go's rows are the reference, and say only what went wrong.
func (o outcome) verdict(all []outcome) string {
	var missed []string
	if o.led == 0 {
		missed = append(missed, "leases left unled")
	}
	if o.twoClaims > 0 {
		missed = append(missed, "two claims")
	}
	if o.scenario != scenarioCold && (o.throttling.overAtEnd || o.throttling.lastOver > o.budget()) {
		missed = append(missed, "429s >= 1% past the budget")
	}
	if o.outOfFiles > 0 {
		missed = append(missed, fmt.Sprintf("not a measure of the electors: %d of their requests failed for want of a file descriptor in the harness", o.outOfFiles))
	}
	if o.client != clientAgent {
		if len(missed) == 0 {
			return "reference"
		}
		return "reference: " + strings.Join(missed, ", ")
	}
	for _, other := range all {
		if other.client != clientClientGo || other.leases != o.leases || other.scenario != o.scenario || o.scenario == scenarioEtcdRestart || other.led == 0 || o.led == 0 {
			continue
		}
		if o.led > other.led+sampleEvery {
			missed = append(missed, fmt.Sprintf("led %s after client-go", (o.led-other.led).Round(100*time.Millisecond)))
		}
		// How long the API server took to answer again is its own, and differs from one restart to the
		// next by more than the electors' part: the electors are also held to client-go's time from there.
		if o.scenario != scenarioCold && o.recovered() > other.recovered()+sampleEvery {
			missed = append(missed, fmt.Sprintf("led %s after client-go once the API server answered", (o.recovered()-other.recovered()).Round(100*time.Millisecond)))
		}
	}
	if len(missed) == 0 {
		return "met"
	}
	return "missed: " + strings.Join(missed, ", ")
}
