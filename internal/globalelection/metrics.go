package globalelection

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// backendReachable mirrors each MultiClusterLease's BackendReachable condition as this cluster's election
// controller last wrote it, so a dashboard and an alert see a cluster cut off from the global etcd without
// reading every object's status. The cluster label keeps two controllers in one process (as the e2e suite
// runs them) apart.
var backendReachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "leasegate_multicluster_backend_reachable",
	Help: "For each MultiClusterLease, 1 when this cluster's election controller last reached the global backend for it, 0 when it could not (its BackendReachable condition).",
}, []string{"cluster", "namespace", "lease"})

func init() {
	metrics.Registry.MustRegister(backendReachable)
}
