package inject

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// GivenEnv are the agent's variables GivenTo reads: what it elects on, for how long, on which kind
// of lock, and what it does on loss. The cache of injected pods keeps these of the agent container.
var GivenEnv = [...]string{
	contract.EnvLease, contract.EnvLeaseDuration, contract.EnvElections,
	contract.EnvLeaseKind, contract.EnvOnLoss, contract.EnvOnLossElection,
}

// AgentOf is pod's agent container: the one named AgentContainer, where injection puts it, among the
// init containers as a native sidecar (restartPolicy Always) or among the app containers. Names are
// unique within a pod, so there is at most one; ephemeral containers, which anyone who may update the
// pod's ephemeralcontainers can add, never count.
func AgentOf(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.Name == AgentContainer {
			if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				return nil // an init container that runs to completion is no agent
			}
			return c
		}
	}
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == AgentContainer {
			return c
		}
	}
	return nil
}

// Given is what injection gave a pod, as GivenTo reads it from the agent container's environment: the
// one reading of an injected pod that decisions trust. The leasegate.io/status annotation (StatusOf, a
// Status) is a record for people and tools, which anyone who may update the pod can rewrite; the two
// are different types so that a decision cannot be handed the record.
type Given struct {
	// Lease is the pod's lease; Leases, instead, those of a pod with several elections.
	Lease  string
	Leases []string
	// LeaseKind is contract.LeaseKindMultiClusterLease when the pod elects across clusters; empty: Leases.
	LeaseKind string
	// RestartOnLoss is the lease whose loss makes the pod evict itself; empty when none does.
	RestartOnLoss string
	// LeaseSeconds is the lease duration of each of the pod's leases, in whole seconds as the agent
	// writes leaseDurationSeconds.
	LeaseSeconds map[string]int32
}

// LeaseNames are the leases the pod elects on: its lease, or those of its elections.
func (g Given) LeaseNames() []string {
	if g.Lease != "" {
		return []string{g.Lease}
	}
	return g.Leases
}

// GivenTo is what injection gave pod, read from its agent container's environment, which is what the
// agent itself runs with: the leases it elects on and each one's lease duration in whole seconds (as the
// agent writes leaseDurationSeconds), the kind of lock, and the lease whose loss restarts the pod.
//
// Every decision about what a pod may do reads this, never the leasegate.io/status annotation: a pod's
// env cannot change after it is created, while its annotations can be rewritten by anyone who may update
// the pod (an app with patch rights on pods, a follower among them). Every version of leasegate injected
// these variables, so pods injected before the annotation recorded lease durations are read the same
// way. ok is false for a pod without an agent container in the shape injection gives it, or whose
// agent's settings the agent itself would refuse (it would not run).
func GivenTo(pod *corev1.Pod) (given Given, ok bool) {
	agent := AgentOf(pod)
	if agent == nil {
		return Given{}, false
	}
	var env [len(GivenEnv)]string // GivenEnv's values, in its order
	for _, v := range agent.Env {
		// The last of duplicate names wins, as in the container's environment. A value from a ConfigMap,
		// Secret or field (which can change) is none injection writes: it counts as unset.
		for i, name := range GivenEnv {
			if v.Name == name {
				env[i] = ""
				if v.ValueFrom == nil {
					env[i] = v.Value
				}
			}
		}
	}
	single, duration, elections, kind, onLoss, onLossElection := env[0], env[1], env[2], env[3], env[4], env[5]

	var specs []lease.ElectionSpec
	switch {
	case single != "" && elections != "":
		return Given{}, false
	case elections != "":
		var err error
		if specs, err = lease.ParseElections(elections); err != nil {
			return Given{}, false
		}
		for _, s := range specs {
			given.Leases = append(given.Leases, s.Lease)
		}
	case single != "":
		d, err := time.ParseDuration(duration)
		if err != nil || d < time.Second || d > lease.MaxLeaseDuration {
			return Given{}, false
		}
		specs = []lease.ElectionSpec{{Name: single, Lease: single, LeaseDuration: lease.Duration{Duration: d}}}
		given.Lease = single
	default:
		return Given{}, false
	}
	given.LeaseSeconds = make(map[string]int32, len(specs))
	for _, s := range specs {
		given.LeaseSeconds[s.Lease] = int32(s.LeaseDuration.Duration / time.Second)
	}

	switch kind {
	case "", contract.LeaseKindLease:
	case contract.LeaseKindMultiClusterLease:
		given.LeaseKind = kind
	default:
		return Given{}, false
	}

	switch onLoss {
	case "", contract.OnLossKeep:
	case contract.OnLossRestart:
		for _, s := range specs {
			if s.Name == onLossElection || (onLossElection == "" && len(specs) == 1) {
				given.RestartOnLoss = s.Lease
			}
		}
		if given.RestartOnLoss == "" {
			return Given{}, false // the agent refuses an on-loss election it does not run
		}
	default:
		return Given{}, false
	}
	return given, true
}
