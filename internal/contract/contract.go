// Package contract holds what leasegate's parts and its users agree on by name: the labels and
// annotations users write and leasegate reads; the environment, port and HTTP paths of the agent the
// injector injects; the header that carries the fencing token to the app; the lease kinds, and the
// MultiClusterLease API's group, version and resource. Every package that reads or writes one names it
// from here, so the two ends of each cannot drift apart. It imports nothing, so the agent links it freely.
package contract

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
	// Gate names the app container port the mutation gate takes over; GateMethods, GateGRPCMethods,
	// GateElection and GateBodyTimeout tune it.
	Gate            = "leasegate.io/gate"
	GateMethods     = "leasegate.io/gate-methods"
	GateGRPCMethods = "leasegate.io/gate-grpc-methods"
	GateElection    = "leasegate.io/gate-election"
	GateBodyTimeout = "leasegate.io/gate-body-timeout"
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
	// HolderURL, on a Lease, is where the holder's agent answers its followers' waits (AgentWakePath):
	// http://<pod IP>:<port>, written by the holder with each write of the lease. Followers of a lease
	// that carries one wait there for the holder to let go instead of watching the lease.
	HolderURL = "leasegate.io/holder-url"

	// LeaderLease, on a Service, opts it in to a companion "<service>-leader" Service whose one endpoint is
	// the holder of the Lease it names (in the Service's namespace). A label, not an annotation, so that
	// leasegate caches only the Services that opted in. LeaderOf marks the companion (and its
	// EndpointSlice) with the Service it follows.
	LeaderLease = "leasegate.io/leader-lease"
	LeaderOf    = "leasegate.io/leader-of"

	// Status records what was injected, so that a re-invocation changes nothing, and the leasegate
	// release that injected it (its "version").
	Status = "leasegate.io/status"
	// WebhookVersion, on the ValidatingWebhookConfiguration, is the release of the elected webhook
	// replica, which writes it: kubectl leasegate check compares the version in each pod's status with it.
	WebhookVersion = "leasegate.io/webhook-version"
	// Injected marks injected pods, so the webhook's cache holds those pods only.
	Injected = "leasegate.io/injected"
	// Managed marks the Leases, Roles and RoleBindings leasegate provisions; only those are ever changed
	// or deleted, and only such Leases reach the lease guard.
	Managed = "leasegate.io/managed"
)

// FencingTokenHeader is the request header with which the mutation gate passes to the app, on every
// mutation it forwards on the leader, the fencing token of the term it was forwarded in; a client's own
// is dropped from every request.
const FencingTokenHeader = "Leasegate-Fencing-Token"

// Values of the annotations above that the injector passes on to the agent's settings.
const (
	// Readiness: health (followers stay Ready) or leader (only the leader is Ready).
	ReadinessHealth = "health"
	ReadinessLeader = "leader"
	// Start: immediate, or leader (the app containers start once the agent leads).
	StartImmediate = "immediate"
	StartLeader    = "leader"
	// OnLoss: keep (report the loss), or restart (the agent evicts its own pod).
	OnLossKeep    = "keep"
	OnLossRestart = "restart"
	// LeaseKind: what elections elect on, each value the kind of the object elected on.
	LeaseKindLease             = "Lease"
	LeaseKindMultiClusterLease = "MultiClusterLease"
)

// The agent's HTTP endpoints on AgentPort, which kubelet's probes, the app, kubectl leasegate and the
// suites read. AgentLeadingPath and AgentLeaderPath answer for one election of several with
// "/<election>" after them.
const (
	AgentHealthPath = "/healthz"
	// AgentReadyPath follows the readiness setting: health, or leader.
	AgentReadyPath = "/readyz"
	// AgentLeadingPath answers 200 only while this pod leads, whatever the readiness setting: the startup
	// probe of pods that start as leader.
	AgentLeadingPath = "/leaderz"
	// AgentLeaderPath is who leads, as JSON or as server-sent events.
	AgentLeaderPath  = "/leader"
	AgentMetricsPath = "/metrics"
	// AgentWakePath is where the leader's agent answers its followers' waits for it to let go of a lease.
	AgentWakePath = "/wake"
)

// The agent the injector adds: the port kubelet's probes and the app reach it on, and the environment it
// is given, which the agent reads under the same names (each with a flag of the same meaning).
const (
	AgentPort = 9440

	EnvPodName         = "POD_NAME"
	EnvPodNamespace    = "POD_NAMESPACE"
	EnvPodUID          = "POD_UID"
	EnvPodIP           = "POD_IP"
	EnvLease           = "LEASEGATE_LEASE"
	EnvLeaseDuration   = "LEASEGATE_LEASE_DURATION"
	EnvRenewDeadline   = "LEASEGATE_RENEW_DEADLINE"
	EnvRetryPeriod     = "LEASEGATE_RETRY_PERIOD"
	EnvClockSkewMargin = "LEASEGATE_CLOCK_SKEW_MARGIN"
	EnvReadiness       = "LEASEGATE_READINESS"
	EnvListen          = "LEASEGATE_LISTEN"
	EnvElections       = "LEASEGATE_ELECTIONS"
	EnvStatusFile      = "LEASEGATE_STATUS_FILE"
	EnvGateUpstream    = "LEASEGATE_GATE_UPSTREAM"
	EnvGateListen      = "LEASEGATE_GATE_LISTEN"
	EnvGateMethods     = "LEASEGATE_GATE_METHODS"
	EnvGateGRPCMethods = "LEASEGATE_GATE_GRPC_METHODS"
	EnvGateElection    = "LEASEGATE_GATE_ELECTION"
	EnvGateBodyTimeout = "LEASEGATE_GATE_BODY_TIMEOUT"
	EnvOnLoss          = "LEASEGATE_ON_LOSS"
	EnvOnLossElection  = "LEASEGATE_ON_LOSS_ELECTION"
	EnvLeaseKind       = "LEASEGATE_LEASE_KIND"

	// Given to the app containers: where the agent answers, and the lease (one election) or, with
	// several, EnvLeasePrefix + the election's name in upper case with "-" as "_".
	EnvAgentURL    = "LEASEGATE_AGENT_URL"
	EnvLeasePrefix = "LEASEGATE_LEASE_"
)

// The MultiClusterLease API's group, version and resource (its kind is LeaseKindMultiClusterLease), which
// pkg/multicluster/v1alpha1 declares its types under and the agent's client, which links no API types,
// writes in its REST paths and objects.
const (
	MultiClusterLeaseGroup    = "leasegate.io"
	MultiClusterLeaseVersion  = "v1alpha1"
	MultiClusterLeaseResource = "multiclusterleases"
)

// What the fence shows users and the plugin reads: the reason of the Event recorded for every write a
// guard fences, and the ValidatingWebhookConfiguration entry whose rules follow the guards.
const (
	EventReasonDenied = "LeaderGateDenied"
	GuardedWebhook    = "guarded.leasegate.io"
)
