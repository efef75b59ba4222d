// Package config is leasegate's runtime configuration: the `config.yaml` key of the leasegate-config
// ConfigMap. It is decoded, defaulted and validated in one place (Load), and kept live by a Store that
// never gives up the last good configuration for a bad edit.
package config

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// Key is the ConfigMap key that holds the configuration.
const Key = "config.yaml"

// APIVersion and Kind name the shape of config.yaml, so that it can evolve: fields are only added within
// a version. A file without them is read as this version, with a warning (earlier releases wrote none).
const (
	APIVersion = "config.leasegate.io/v1alpha1"
	Kind       = "LeasegateConfiguration"
)

// Config is the whole configuration. Every field is optional; SetDefaults fills what is left out.
type Config struct {
	metav1.TypeMeta `json:",inline"`
	// Election is the timing injected agents use unless a pod's annotations say otherwise.
	Election Election `json:"election"`
	// Agent is how the injected agent container is built.
	Agent Agent `json:"agent"`
	// Guards are the fences: writes they match are admitted only from the holder of their lease.
	Guards []Guard `json:"guards,omitempty"`
	// MissingPodIdentity decides gated requests that carry no pod identity (a legacy service account
	// token, say): they cannot prove they hold anything.
	MissingPodIdentity Enforcement `json:"missingPodIdentity,omitempty"`
	// Exempt requesters are never fenced.
	Exempt Exempt `json:"exempt"`
	// AdoptLeases are leases, as "<namespace>/<name>", that leasegate does not manage (another
	// controller's election) and that injected pods may elect on all the same: leasegate then provisions
	// them and marks them as its own. A pod naming any other such lease is refused at admission.
	AdoptLeases []string `json:"adoptLeases,omitempty"`

	// Warnings are what Load found deprecated: the configuration applies, and the user should hear of it.
	Warnings []string `json:"-"`
}

// Enforcement is what a guard does with a write from a requester that does not hold its lease, in
// Gatekeeper's vocabulary.
type Enforcement string

const (
	// EnforcementDeny refuses the write (HTTP 403).
	EnforcementDeny Enforcement = "deny"
	// EnforcementWarn admits it with a warning to the client and an Event.
	EnforcementWarn Enforcement = "warn"
	// EnforcementDryRun admits it silently to the client, with an Event: to see what deny would do.
	EnforcementDryRun Enforcement = "dryrun"
	// EnforcementAllow admits it (missingPodIdentity only).
	EnforcementAllow Enforcement = "allow"
)

// Guard fences writes to some resources by the holder of one lease.
type Guard struct {
	// Name identifies the guard in messages, Events and metrics.
	Name string `json:"name"`
	// Lease is "<name>", in the namespace of the request, or "<namespace>/<name>".
	Lease string `json:"lease"`
	// LeaseKind is Lease (default: a coordination.k8s.io/v1 Lease) or MultiClusterLease: then a write
	// passes only from the pod this cluster's status names as global leader, before its validUntil.
	LeaseKind string `json:"leaseKind,omitempty"`
	// ServiceAccounts are the requesters this guard gates, as "<name>" (any namespace) or
	// "<namespace>/<name>". Empty: every service account. Users that are not service accounts (people)
	// are never gated; exempt them from RBAC instead.
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
	// Resources are the writes guarded.
	Resources []GuardedResource `json:"resources"`
	// Namespaces limits the guard to requests in these namespaces. Empty: all (except the system
	// namespaces and leasegate's own, which are never fenced).
	Namespaces []string `json:"namespaces,omitempty"`
	// Enforcement defaults to deny.
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// HolderFormat says how the lease's holder names a pod: a preset (leasegate-agent, client-go,
	// cert-manager, pod-name) or a template such as "{pod}-{uid}" (lease.HolderFormat). Empty: the agent's
	// "{pod}_{uid}" on leases leasegate manages, client-go's "{pod}_{any}" on others.
	HolderFormat string `json:"holderFormat,omitempty"`
}

// Adopts reports whether injected pods may elect on the lease namespace/name although leasegate does not
// manage it (adoptLeases).
func (c *Config) Adopts(namespace, name string) bool {
	for _, l := range c.AdoptLeases {
		if ns, n, _ := strings.Cut(l, "/"); ns == namespace && n == name {
			return true
		}
	}
	return false
}

// GuardedResource is a group, some of its resources, and the operations on them. A guard on a resource
// covers the writes that reach it through its subresources too (deployments/scale, deployments/status, and
// any other the API server serves with a write verb), except those ExcludeSubresources names.
type GuardedResource struct {
	// Group is one API group ("" for the core group); no wildcards.
	Group string `json:"group"`
	// Resources are names as the API serves them: plural, lowercase, namespaced (kubectl api-resources).
	Resources []string `json:"resources"`
	// Operations defaults to CREATE, UPDATE and DELETE (a PATCH is an UPDATE).
	Operations []string `json:"operations,omitempty"`
	// ExcludeSubresources leaves these subresources of the Resources unguarded, for a write another
	// controller makes (a status that an operator outside the election writes, say).
	ExcludeSubresources []string `json:"excludeSubresources,omitempty"`
}

// Exempt lists requesters that are never fenced.
type Exempt struct {
	Users []string `json:"users,omitempty"`
	// Groups defaults to system:masters; an explicit empty list exempts no group, so it is written out
	// as one (omitempty would turn it back into the default).
	Groups []string `json:"groups"`
}

// Election is an election's timing. Pointers tell "unset" from an explicit zero (a clock skew margin of
// 0s is a legitimate choice).
type Election struct {
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`
	RenewDeadline *metav1.Duration `json:"renewDeadline,omitempty"`
	RetryPeriod   *metav1.Duration `json:"retryPeriod,omitempty"`
	// ClockSkewMargin is how much longer than its duration a lease is treated as held, to tolerate clock
	// skew between the holder that stamped renewTime and whoever judges it.
	ClockSkewMargin *metav1.Duration `json:"clockSkewMargin,omitempty"`
}

// Timing is the election's timing as the lease package uses it. Call it on a defaulted Config.
func (e Election) Timing() lease.Timing {
	return lease.Timing{
		LeaseDuration: e.LeaseDuration.Duration,
		RenewDeadline: e.RenewDeadline.Duration,
		RetryPeriod:   e.RetryPeriod.Duration,
	}
}

// NativeSidecar says whether the agent runs as a native sidecar (an init container with restartPolicy
// Always, which every supported Kubernetes has) or as a regular container.
type NativeSidecar string

const (
	// NativeSidecarAuto, the default, injects a native sidecar.
	NativeSidecarAuto NativeSidecar = "auto"
	// NativeSidecarAlways is auto's equal, accepted so that configurations written for Kubernetes
	// before 1.29 keep loading.
	NativeSidecarAlways NativeSidecar = "always"
	// NativeSidecarNever injects a regular container; `leasegate.io/start: leader` is then refused.
	NativeSidecarNever NativeSidecar = "never"
)

// Agent is the injected agent container.
type Agent struct {
	Image           string                      `json:"image,omitempty"`
	ImagePullPolicy corev1.PullPolicy           `json:"imagePullPolicy,omitempty"`
	Resources       corev1.ResourceRequirements `json:"resources,omitempty"`
	NativeSidecar   NativeSidecar               `json:"nativeSidecar,omitempty"`
	// Port is where the agent serves its endpoints, unless an app container already uses it.
	Port int32 `json:"port,omitempty"`
	// SecurityContext is the agent container's, whole: unset, AgentSecurityContext. Validation keeps it
	// within the restricted Pod Security Standard, so opting a pod in never lowers its namespace's
	// profile; leaving runAsUser unset lets a platform that assigns UIDs (OpenShift's restricted-v2
	// SCC) choose the agent's.
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
}

// Defaults, named so docs/reference.md, the chart and the tests can refer to them.
const (
	DefaultAgentPort       = contract.AgentPort
	DefaultClockSkewMargin = lease.DefaultClockSkewMargin
	DefaultImageRepository = "ghcr.io/leasegate/leasegate-agent"
	// AgentUser is the agent image's non-root user and group (distroless "nonroot").
	AgentUser = 65532
)

// AgentSecurityContext is the agent container's security context unless leasegate-config sets one:
// the restricted Pod Security Standard, the image's own user, a read-only root.
func AgentSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](AgentUser),
		RunAsGroup:               ptr.To[int64](AgentUser),
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
