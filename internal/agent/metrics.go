package agent

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leasegate/leasegate/internal/lease"
)

// newRegistry is the agent's own registry, with the Go and process collectors: the agent serves it rather
// than the global one, so nothing a library registers leaks into a pod's /metrics.
func newRegistry() *prometheus.Registry {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return registry
}

// lockWaitBuckets span a watch round trip (a released lease) to a slow reconciler's whole lease.
var lockWaitBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}

// metrics are one election's Prometheus series, all labelled with its lease and election name.
type metrics struct {
	isLeader    prometheus.Gauge
	transitions prometheus.Counter
	lockWait    prometheus.Histogram
	takeovers   map[lease.Takeover]prometheus.Counter
	// Only the election loop touches these: the last state observed, and since when this agent has
	// wanted the lease without holding it.
	leading      bool
	waitingSince time.Time
}

// newMetrics registers an election's series. lastRenewal reads the renewTime of the lease as last
// observed; budget is the election's crash takeover budget (lease duration + clock skew margin).
func newMetrics(registry prometheus.Registerer, leaseName, election string, budget time.Duration, lastRenewal func() time.Time) *metrics {
	labels := prometheus.Labels{"lease": leaseName, "election": election}
	m := &metrics{
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
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "leasegate_agent_lock_wait_seconds",
			Help:        "How long this agent waited, from its start or its last loss, until it led.",
			ConstLabels: labels,
			Buckets:     lockWaitBuckets,
		}),
		waitingSince: time.Now(),
		takeovers:    map[lease.Takeover]prometheus.Counter{},
	}
	// Every kind is exported from the start, at 0, so a dashboard's increase() sees the first takeover.
	takeovers := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "leasegate_agent_takeovers_total",
		Help:        "Times this agent took the lease from another holder, by how that holder left: graceful (released it), crash (it expired) or handover (released it on a handover request).",
		ConstLabels: labels,
	}, []string{"kind"})
	for _, kind := range lease.Takeovers {
		m.takeovers[kind] = takeovers.WithLabelValues(string(kind))
	}
	renewAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "leasegate_agent_lease_renew_age_seconds",
		Help:        "Seconds since the lease's holder last renewed it, as this agent last observed the lease (NaN before): the leader sees each of its renewals, a follower reads the lease once a lease duration, so the lowest over a lease's agents is the freshest.",
		ConstLabels: labels,
	}, func() float64 {
		last := lastRenewal()
		if last.IsZero() {
			return math.NaN()
		}
		return time.Since(last).Seconds()
	})
	takeoverBudget := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "leasegate_agent_takeover_budget_seconds",
		Help:        "The longest a crashed leader keeps the lease from the others: lease duration + clock skew margin.",
		ConstLabels: labels,
	})
	takeoverBudget.Set(budget.Seconds())
	registry.MustRegister(m.isLeader, m.transitions, m.lockWait, takeovers, renewAge, takeoverBudget)
	return m
}

// registerLocalCandidate adds, for an election on a MultiClusterLease, whether this agent is its cluster's
// candidate (holds the spec the election controller campaigns for): leasegate_agent_is_leader is global
// leadership, so a standby cluster's candidate shows 1 here and 0 there.
func registerLocalCandidate(registry prometheus.Registerer, lease, election string, isCandidate func() bool) {
	registerBool(registry, prometheus.GaugeOpts{
		Name:        "leasegate_agent_is_local_candidate",
		Help:        "For a MultiClusterLease: 1 while this agent holds its cluster's local election (the spec), whether or not it leads globally.",
		ConstLabels: prometheus.Labels{"lease": lease, "election": election},
	}, isCandidate)
}

// registerBool adds the gauge opts names, 1 while is says so and 0 otherwise.
func registerBool(registry prometheus.Registerer, opts prometheus.GaugeOpts, is func() bool) {
	registry.MustRegister(prometheus.NewGaugeFunc(opts, func() float64 {
		if is() {
			return 1
		}
		return 0
	}))
}

// registerFencingToken adds the fencing token of the lease's current term, as this agent last observed
// it: what the gate passes on as Leasegate-Fencing-Token while this pod leads.
func registerFencingToken(registry prometheus.Registerer, lease, election string, token func() int64) {
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "leasegate_agent_fencing_token",
		Help:        "The fencing token of the lease's current term as this agent last observed it (a Lease's leaseTransitions, a MultiClusterLease's status.fencingToken): it only grows, with every new term.",
		ConstLabels: prometheus.Labels{"lease": lease, "election": election},
	}, func() float64 { return float64(token()) }))
}

// registerWatching exports whether the election holds a watch of its lease: where a follower cannot wait
// on the leader's agent (a NetworkPolicy on its port, a holder that names no URL), each watch costs the
// API server about 110 KiB, and this is where an operator finds them.
func registerWatching(registry prometheus.Registerer, lease, election string, watching func() bool) {
	registerBool(registry, prometheus.GaugeOpts{
		Name:        "leasegate_agent_lease_watched",
		Help:        "1 while this agent holds a watch of the lease open (a follower that cannot wait on the leader's agent, or a MultiClusterLease's leader), 0 otherwise.",
		ConstLabels: prometheus.Labels{"lease": lease, "election": election},
	}, watching)
}

// tookOver counts a takeover from another holder.
func (m *metrics) tookOver(kind lease.Takeover) { m.takeovers[kind].Inc() }

func (m *metrics) observe(isLeader bool) {
	if isLeader == m.leading {
		return
	}
	m.leading = isLeader
	m.transitions.Inc()
	if isLeader {
		m.isLeader.Set(1)
		m.lockWait.Observe(time.Since(m.waitingSince).Seconds())
	} else {
		m.isLeader.Set(0)
		m.waitingSince = time.Now()
	}
}
