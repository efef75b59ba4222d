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
)

func init() {
	metrics.Registry.MustRegister(admissions, admissionSeconds)
}
