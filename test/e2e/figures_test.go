package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// figureTable gathers what the real-cluster specs measure, for `make bench`'s report.
type figureTable struct {
	rows [][2]string // measure, value
}

func (f *figureTable) empty() bool { return len(f.rows) == 0 }

func (f *figureTable) value(measure, value string) {
	f.rows = append(f.rows, [2]string{measure, value})
}

// durations records the median and the maximum of samples.
func (f *figureTable) durations(measure string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	f.value(fmt.Sprintf("%s (%d runs)", measure, len(sorted)),
		fmt.Sprintf("median %s, max %s", roundDuration(sorted[len(sorted)/2]), roundDuration(sorted[len(sorted)-1])))
}

// latencies records the 50th and 99th percentiles and the maximum of samples.
func (f *figureTable) latencies(measure string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	at := func(q float64) time.Duration { return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))] }
	f.value(measure, fmt.Sprintf("p50 %s, p99 %s, max %s", roundDuration(at(0.5)), roundDuration(at(0.99)), roundDuration(sorted[len(sorted)-1])))
}

func (f *figureTable) markdown(runs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Real single-node cluster, %d runs per failover figure\n\n| measure | value |\n|---|---|\n", runs)
	for _, row := range f.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	return b.String()
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(100 * time.Microsecond)
	}
}
