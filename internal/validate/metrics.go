package validate

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

var (
	decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_fence_decisions_total",
		Help: "Fence decisions by webhook (guarded, lease, eviction, endpointslice or service), guard, outcome (allowed, warned, dryrun, denied, or error for a request answered without a decision) and reason.",
	}, []string{"webhook", "guard", "outcome", "reason"})
	decisionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasegate_fence_decision_duration_seconds",
		Help:    "Time from receiving an admission request to answering it, decoding included.",
		Buckets: []float64{0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05},
	}, []string{"webhook"})
	eventsSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_fence_events_suppressed_total",
		Help: "LeaderGateDenied Events not written, by reason: budget (over the per-object-and-requester or per-source budget) or unknown_namespace (a requester the caches cannot confirm, in a namespace they do not know).",
	}, []string{"reason"})
)

func init() { metrics.Registry.MustRegister(decisions, decisionSeconds, eventsSuppressed) }

// decision is one answer of a fence webhook as its metrics count it. Each handler starts one and defers
// its observe, so every answer is counted and timed whatever path returns it: an allowance made before
// there is anything to judge, or an error, as much as a verdict.
type decision struct {
	webhook string
	start   time.Time
	verdict Verdict
	// failure, when set, is the reason label of a request answered with an error instead of a verdict.
	failure string
}

// outcomeError is the outcome label of a request answered with an error: no Outcome, since nothing was
// decided.
const outcomeError = "error"

func startDecision(webhook string) *decision {
	return &decision{webhook: webhook, start: time.Now()}
}

// fail answers with an error and counts it as one: bad_request for a body that does not decode,
// internal_error for a read that failed.
func (d *decision) fail(code int32, err error) admission.Response {
	d.failure = "internal_error"
	if code == http.StatusBadRequest {
		d.failure = "bad_request"
	}
	return admission.Errored(code, err)
}

func (d *decision) observe() {
	outcome, reason := d.verdict.Outcome.String(), d.verdict.Reason.Code()
	if d.failure != "" {
		outcome, reason = outcomeError, d.failure
	}
	decisions.WithLabelValues(d.webhook, d.verdict.Guard, outcome, reason).Inc()
	decisionSeconds.WithLabelValues(d.webhook).Observe(time.Since(d.start).Seconds())
}
