// Package labels holds the labels and annotations that are leasegate's contract with its users. Every
// package that reads or writes one names it from here.
package labels

const (
	// Inject opts a Namespace or a pod (template) in ("enabled"); on a pod, "disabled" opts out and wins.
	Inject         = "leasegate.io/inject"
	InjectEnabled  = "enabled"
	InjectDisabled = "disabled"

	// Pod annotations a user may set.
	Lease         = "leasegate.io/lease"
	LeaseDuration = "leasegate.io/lease-duration"
	RenewDeadline = "leasegate.io/renew-deadline"
	RetryPeriod   = "leasegate.io/retry-period"
	Readiness     = "leasegate.io/readiness"
	Start         = "leasegate.io/start"
	// Takeover is the takeover objective the timing is derived from.
	Takeover = "leasegate.io/takeover"
	// Elections lists several named elections, each with its own lease and timing.
	Elections = "leasegate.io/elections"
	// Gate names the app container port the mutation gate takes over; GateMethods, GateGRPCMethods and
	// GateElection tune it.
	Gate            = "leasegate.io/gate"
	GateMethods     = "leasegate.io/gate-methods"
	GateGRPCMethods = "leasegate.io/gate-grpc-methods"
	GateElection    = "leasegate.io/gate-election"
	// OnLoss is what a pod does when it loses the lease it held: keep, or restart (evict itself).
	OnLoss = "leasegate.io/on-loss"
	// LeaseKind is what the pod's elections elect on: Lease (default), or MultiClusterLease (one leader
	// across clusters, confirmed by leasegate's election controller).
	LeaseKind = "leasegate.io/lease-kind"

	// HandoverFrom and HandoverTo, on a Lease, ask its holder (the identity in HandoverFrom) to step down
	// for the pod named in HandoverTo, or for any other candidate when HandoverTo is absent. Written by
	// kubectl leasegate handover; pods may only remove them (the lease guard), as they take the lease.
	HandoverFrom = "leasegate.io/handover-from"
	HandoverTo   = "leasegate.io/handover-to"

	// LeaderLease, on a Service, opts it in to a companion "<service>-leader" Service whose one endpoint is
	// the holder of the Lease it names (in the Service's namespace). A label, not an annotation, so that
	// leasegate caches only the Services that opted in. LeaderOf marks the companion (and its
	// EndpointSlice) with the Service it follows.
	LeaderLease = "leasegate.io/leader-lease"
	LeaderOf    = "leasegate.io/leader-of"

	// Status records what was injected, so that a re-invocation changes nothing.
	Status = "leasegate.io/status"
	// Injected marks injected pods, so the webhook's cache holds those pods only.
	Injected = "leasegate.io/injected"
	// Managed marks the Leases, Roles and RoleBindings leasegate provisions; only those are ever changed
	// or deleted, and only such Leases reach the lease guard.
	Managed = "leasegate.io/managed"
)
