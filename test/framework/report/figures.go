package report

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// FigureTable gathers what a suite's specs measure, for `make bench`'s report.
type FigureTable struct {
	rows [][2]string // measure, value
}

// Empty says whether nothing was measured.
func (f *FigureTable) Empty() bool { return len(f.rows) == 0 }

// Value records one measure as written.
func (f *FigureTable) Value(measure, value string) {
	f.rows = append(f.rows, [2]string{measure, value})
}

// Durations records the median and the maximum of samples.
func (f *FigureTable) Durations(measure string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	f.Value(fmt.Sprintf("%s (%d runs)", measure, len(sorted)),
		fmt.Sprintf("median %s, max %s", RoundDuration(sorted[len(sorted)/2]), RoundDuration(sorted[len(sorted)-1])))
}

// Latencies records the 50th and 99th percentiles and the maximum of samples.
func (f *FigureTable) Latencies(measure string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	at := func(q float64) time.Duration { return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))] }
	f.Value(measure, fmt.Sprintf("p50 %s, p99 %s, max %s", RoundDuration(at(0.5)), RoundDuration(at(0.99)), RoundDuration(sorted[len(sorted)-1])))
}

// Markdown is the table under a heading line, as `make bench` writes it.
func (f *FigureTable) Markdown(heading string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n| measure | value |\n|---|---|\n", heading)
	for _, row := range f.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	return b.String()
}

// RoundDuration keeps the digits a figure needs at its scale.
func RoundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(100 * time.Microsecond)
	}
}
