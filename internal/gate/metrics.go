package gate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	outcomePassed = "passed"
	outcomeGated  = "gated"
	// outcomeIncomplete: the request's body did not arrive whole (the client went away, broke its
	// framing, or was slower than the body timeout), so the app never got the request whole.
	outcomeIncomplete = "incomplete"
)

// metrics are the gate's series, all in one place. The series are resolved once, not per request.
type metrics struct {
	requests map[[2]string]prometheus.Counter // by class and outcome
	duration map[string]prometheus.Observer   // by outcome
}

func newMetrics(registry prometheus.Registerer) *metrics {
	vecs := struct {
		requests *prometheus.CounterVec
		duration *prometheus.HistogramVec
	}{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasegate_gate_requests_total",
			Help: "Requests through the mutation gate, by class (read or mutation) and outcome (passed to the app; gated: stopped because this pod does not lead, answered 503 or UNAVAILABLE, or 502 when part of a streamed body had reached the app; incomplete: the body did not arrive whole, the client gone or slower than the body timeout).",
		}, []string{"class", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasegate_gate_request_duration_seconds",
			Help:    "Time from a request's arrival at the gate to the end of its answer, app time included.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5},
		}, []string{"outcome"}),
	}
	registry.MustRegister(vecs.requests, vecs.duration)
	m := &metrics{requests: map[[2]string]prometheus.Counter{}, duration: map[string]prometheus.Observer{}}
	for _, outcome := range []string{outcomePassed, outcomeGated, outcomeIncomplete} {
		for _, class := range []string{classRead, classMutation} {
			m.requests[[2]string{class, outcome}] = vecs.requests.WithLabelValues(class, outcome)
		}
		m.duration[outcome] = vecs.duration.WithLabelValues(outcome)
	}
	return m
}

const (
	classRead     = "read"
	classMutation = "mutation"
)

func (m *metrics) observe(mutates bool, outcome string, start time.Time) {
	class := classRead
	if mutates {
		class = classMutation
	}
	m.requests[[2]string{class, outcome}].Inc()
	m.duration[outcome].Observe(time.Since(start).Seconds())
}
