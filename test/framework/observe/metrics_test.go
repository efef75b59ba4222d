package observe

import (
	"math"
	"testing"
)

const scraped = `# TYPE decisions_total counter
decisions_total{webhook="guarded",outcome="allowed"} 7
decisions_total{webhook="guarded",outcome="denied"} 3
decisions_total{webhook="lease",outcome="denied"} 1
# TYPE latency_seconds histogram
latency_seconds_bucket{name="a",le="0.01"} 50
latency_seconds_bucket{name="a",le="0.1"} 90
latency_seconds_bucket{name="a",le="1"} 100
latency_seconds_bucket{name="a",le="+Inf"} 100
latency_seconds_sum{name="a"} 4
latency_seconds_count{name="a"} 100
latency_seconds_bucket{name="b",le="0.01"} 0
latency_seconds_bucket{name="b",le="0.1"} 0
latency_seconds_bucket{name="b",le="1"} 0
latency_seconds_bucket{name="b",le="+Inf"} 4
latency_seconds_sum{name="b"} 40
latency_seconds_count{name="b"} 4
`

func TestMetricsSum(t *testing.T) {
	m, err := ParseMetrics([]byte(scraped))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		family string
		labels map[string]string
		want   float64
	}{
		{"every series of the family", "decisions_total", nil, 11},
		{"series with one label", "decisions_total", map[string]string{"outcome": "denied"}, 4},
		{"series with both labels", "decisions_total", map[string]string{"webhook": "guarded", "outcome": "denied"}, 3},
		{"no series has the label value", "decisions_total", map[string]string{"webhook": "config"}, 0},
		{"a family not scraped", "missing_total", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Sum(tc.family, tc.labels); got != tc.want {
				t.Errorf("Sum = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMetricsQuantile(t *testing.T) {
	m, err := ParseMetrics([]byte(scraped))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		labels           map[string]string
		q                float64
		want             float64
		wantObservations uint64
	}{
		{"median at a bucket's upper bound", map[string]string{"name": "a"}, 0.5, 0.01, 100},
		{"interpolated inside a bucket", map[string]string{"name": "a"}, 0.7, 0.01 + 0.09*0.5, 100},
		{"rank in the +Inf bucket: the highest finite bound", map[string]string{"name": "b"}, 0.5, 1, 4},
		{"merged histograms", nil, 0.5, 0.01 + 0.09*(52-50)/40.0, 104},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, observations := m.Quantile("latency_seconds", tc.labels, tc.q)
			if math.Abs(got-tc.want) > 1e-9 || observations != tc.wantObservations {
				t.Errorf("Quantile = %v over %d observations, want %v over %d", got, observations, tc.want, tc.wantObservations)
			}
		})
	}
	if q, n := m.Quantile("latency_seconds", map[string]string{"name": "c"}, 0.5); !math.IsNaN(q) || n != 0 {
		t.Errorf("no observations: got %v over %d, want NaN over 0", q, n)
	}
}

func TestMetricsQuantileSince(t *testing.T) {
	before, err := ParseMetrics([]byte(scraped))
	if err != nil {
		t.Fatal(err)
	}
	// Since the first scrape, a's 100 more observations all fell between 0.1 and 1.
	after, err := ParseMetrics([]byte(`# TYPE latency_seconds histogram
latency_seconds_bucket{name="a",le="0.01"} 50
latency_seconds_bucket{name="a",le="0.1"} 90
latency_seconds_bucket{name="a",le="1"} 200
latency_seconds_bucket{name="a",le="+Inf"} 200
latency_seconds_sum{name="a"} 54
latency_seconds_count{name="a"} 200
`))
	if err != nil {
		t.Fatal(err)
	}
	got, observations := after.QuantileSince(before, "latency_seconds", map[string]string{"name": "a"}, 0.5)
	if want := 0.1 + 0.9*0.5; math.Abs(got-want) > 1e-9 || observations != 100 {
		t.Errorf("QuantileSince = %v over %d observations, want %v over 100 (the window's alone)", got, observations, want)
	}
	if whole, n := after.Quantile("latency_seconds", map[string]string{"name": "a"}, 0.5); n != 200 || math.Abs(whole-(0.1+0.9*10/110)) > 1e-9 {
		t.Errorf("Quantile over every observation = %v over %d, want %v over 200", whole, n, 0.1+0.9*10/110)
	}
}
