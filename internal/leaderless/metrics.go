package leaderless

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	leaderlessSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasegate_lease_leaderless_seconds",
		Help: "For each managed lease nobody has held for longer than its takeover budget (lease duration + clock skew margin), seconds since it became free. Reported by the elected webhook replica.",
	}, []string{"namespace", "lease"})
	leaderlessLeases = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasegate_leases_leaderless_beyond_budget",
		Help: "Managed leases nobody has held for longer than their takeover budget. Reported by the elected webhook replica.",
	})
)

func init() { metrics.Registry.MustRegister(leaderlessSeconds, leaderlessLeases) }
