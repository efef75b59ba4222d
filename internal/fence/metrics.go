package fence

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_fence_decisions_total",
		Help: "Fence decisions by webhook (guarded, lease, eviction or endpointslice), guard, outcome (allowed, warned, dryrun, denied) and reason.",
	}, []string{"webhook", "guard", "outcome", "reason"})
	decisionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasegate_fence_decision_duration_seconds",
		Help:    "Time from receiving an admission request to answering it, decoding excluded.",
		Buckets: []float64{0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05},
	}, []string{"webhook"})
	eventsSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_fence_events_suppressed_total",
		Help: "LeaderGateDenied Events not written, by reason: budget (over the per-object-and-requester or per-source budget) or unknown_namespace (a requester the caches cannot confirm, in a namespace they do not know).",
	}, []string{"reason"})
)

func init() { metrics.Registry.MustRegister(decisions, decisionSeconds, eventsSuppressed) }

func observe(v Verdict, webhook string, start time.Time) {
	decisions.WithLabelValues(webhook, v.Guard, v.Outcome.String(), v.Reason.Code()).Inc()
	decisionSeconds.WithLabelValues(webhook).Observe(time.Since(start).Seconds())
}
