package gate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	outcomePassed = "passed"
	outcomeGated  = "gated"
)

// metrics are the gate's series, all in one place.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(registry prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasegate_gate_requests_total",
			Help: "Requests through the mutation gate, by class (read or mutation) and outcome (passed to the app, or gated: answered 503 or UNAVAILABLE because this pod does not lead).",
		}, []string{"class", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasegate_gate_request_duration_seconds",
			Help:    "Time from a request's arrival at the gate to the end of its answer, app time included.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5},
		}, []string{"outcome"}),
	}
	registry.MustRegister(m.requests, m.duration)
	return m
}

func (m *metrics) observe(mutates bool, outcome string, start time.Time) {
	class := "read"
	if mutates {
		class = "mutation"
	}
	m.requests.WithLabelValues(class, outcome).Inc()
	m.duration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}
