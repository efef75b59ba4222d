// Package config is leasegate's runtime configuration: the `config.yaml` key of the leasegate-config
// ConfigMap. It is decoded, defaulted and validated in one place (Load), and kept live by a Store that
// never gives up the last good configuration for a bad edit.
package config

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/lease"
)

// Key is the ConfigMap key that holds the configuration.
const Key = "config.yaml"

// Config is the whole configuration. Every field is optional; Default fills what is left out.
type Config struct {
	// Election is the timing injected agents use unless a pod's annotations say otherwise.
	Election Election `json:"election"`
	// Agent is how the injected agent container is built.
	Agent Agent `json:"agent"`
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
// Always, Kubernetes 1.29+) or as a regular container.
type NativeSidecar string

const (
	// NativeSidecarAuto uses a native sidecar when the API server supports it.
	NativeSidecarAuto NativeSidecar = "auto"
	// NativeSidecarAlways always does; pods fail validation on API servers older than 1.29.
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
}

// Defaults, named so the README, the chart and the tests can refer to them.
const (
	DefaultAgentPort       = 9440
	DefaultClockSkewMargin = time.Second
	DefaultImageRepository = "ghcr.io/leasegate/leasegate-agent"
)
