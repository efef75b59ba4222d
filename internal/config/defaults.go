package config

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/version"
)

// DefaultConfig is the configuration in force when there is no ConfigMap: every default, and no file to warn
// about.
func DefaultConfig() *Config {
	c := &Config{}
	SetDefaults(c)
	return c
}

// SetDefaults fills every unset field of c. It is the only place defaults live.
func SetDefaults(c *Config) {
	if c.APIVersion == "" && c.Kind == "" {
		c.APIVersion, c.Kind = APIVersion, Kind
	}
	defaultDuration(&c.Election.LeaseDuration, lease.DefaultTiming.LeaseDuration)
	defaultDuration(&c.Election.RenewDeadline, lease.DefaultTiming.RenewDeadline)
	defaultDuration(&c.Election.RetryPeriod, lease.DefaultTiming.RetryPeriod)
	defaultDuration(&c.Election.ClockSkewMargin, DefaultClockSkewMargin)

	if c.Agent.Image == "" {
		c.Agent.Image = DefaultImageRepository + ":" + version.Version
	}
	if c.Agent.ImagePullPolicy == "" {
		c.Agent.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.Agent.NativeSidecar == "" {
		c.Agent.NativeSidecar = NativeSidecarAuto
	}
	if c.Agent.Port == 0 {
		c.Agent.Port = DefaultAgentPort
	}
	if c.Agent.SecurityContext == nil {
		c.Agent.SecurityContext = AgentSecurityContext()
	}
	if c.MissingPodIdentity == "" {
		c.MissingPodIdentity = EnforcementDeny
	}
	if c.Exempt.Groups == nil {
		c.Exempt.Groups = []string{"system:masters"}
	}
	for i := range c.Guards {
		g := &c.Guards[i]
		if g.Enforcement == "" {
			g.Enforcement = EnforcementDeny
		}
		for j := range g.Resources {
			if len(g.Resources[j].Operations) == 0 {
				g.Resources[j].Operations = []string{"CREATE", "UPDATE", "DELETE"}
			}
		}
	}
	// The request covers, with room, the largest agent memory docs/performance.md measured (after many
	// failovers, with 16 elections, serving the mutation gate at 1,000 requests a second); the limit is for what grows with traffic, as a gate's
	// heap does with its requests' sizes and concurrency, and bursts of watch events. An empty block
	// (resources: {limits: {}}) asks for nothing, so it gets these too, as no block does.
	if len(c.Agent.Resources.Requests) == 0 && len(c.Agent.Resources.Limits) == 0 {
		c.Agent.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("24Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}
	}
}

func defaultDuration(d **metav1.Duration, value time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: value}
	}
}
