package inject

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_injection_admissions_total",
		Help: "Pod admissions by the injector, by outcome: injected, skipped, denied or error.",
	}, []string{"outcome"})
	admissionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "leasegate_injection_duration_seconds",
		Help:    "Time the injector spent on one pod admission, decoding to patch.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1},
	})
	provisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_provisioning_total",
		Help: "Reconciliations of a lease's Lease, Role and RoleBinding, by outcome: provisioned, removed, conflict (a Role or RoleBinding of leasegate's name that it did not create) or error.",
	}, []string{"outcome"})
	leaderlessSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasegate_lease_leaderless_seconds",
		Help: "For each managed lease nobody has held for longer than its takeover budget (lease duration + clock skew margin), seconds since it became free. Reported by the elected webhook replica.",
	}, []string{"namespace", "lease"})
	leaderlessLeases = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasegate_leases_leaderless_beyond_budget",
		Help: "Managed leases nobody has held for longer than their takeover budget. Reported by the elected webhook replica.",
	})
)

func init() {
	metrics.Registry.MustRegister(admissions, admissionSeconds, provisions, leaderlessSeconds, leaderlessLeases)
}
