package provision

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var provisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "leasegate_provisioning_total",
	Help: "Reconciliations of a lease's Lease, Role and RoleBinding, by outcome: provisioned, removed, conflict (a Role or RoleBinding of leasegate's name that it did not create) or error.",
}, []string{"outcome"})

func init() { metrics.Registry.MustRegister(provisions) }
