package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the agent's Prometheus series, all in one place. The agent serves its own registry rather
// than the global one, so nothing a library registers leaks into a pod's /metrics.
type metrics struct {
	registry    *prometheus.Registry
	isLeader    prometheus.Gauge
	transitions prometheus.Counter
	// leading is the last state observed; only the election loop touches it.
	leading bool
}

func newMetrics(lease string) *metrics {
	labels := prometheus.Labels{"lease": lease}
	m := &metrics{
		registry: prometheus.NewRegistry(),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "leasegate_agent_is_leader",
			Help:        "1 while this agent holds its lease and the app may act, 0 otherwise.",
			ConstLabels: labels,
		}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "leasegate_agent_leader_transitions_total",
			Help:        "Times this agent started or stopped leading.",
			ConstLabels: labels,
		}),
	}
	m.registry.MustRegister(m.isLeader, m.transitions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(isLeader bool) {
	if isLeader == m.leading {
		return
	}
	m.leading = isLeader
	m.transitions.Inc()
	if isLeader {
		m.isLeader.Set(1)
	} else {
		m.isLeader.Set(0)
	}
}
