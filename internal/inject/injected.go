package inject

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// InjectedEnv are the agent's variables Injected reads: what it elects on, for how long, on which kind
// of lock, and what it does on loss. The cache of injected pods keeps these of the agent container.
var InjectedEnv = [...]string{
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

// Injected is what injection gave pod, read from its agent container's environment, which is what the
// agent itself runs with: the leases it elects on and each one's lease duration in whole seconds (as the
// agent writes leaseDurationSeconds), the kind of lock, and the lease whose loss restarts the pod. Only
// those fields of the Status are set.
//
// Every decision about what a pod may do reads this, never the leasegate.io/status annotation: a pod's
// env cannot change after it is created, while its annotations can be rewritten by anyone who may update
// the pod (an app with patch rights on pods, a follower among them). Every version of leasegate injected
// these variables, so pods injected before the annotation recorded lease durations are read the same
// way. ok is false for a pod without an agent container in the shape injection gives it, or whose
// agent's settings the agent itself would refuse (it would not run).
func Injected(pod *corev1.Pod) (status Status, ok bool) {
	agent := AgentOf(pod)
	if agent == nil {
		return Status{}, false
	}
	var env [len(InjectedEnv)]string // InjectedEnv's values, in its order
	for _, v := range agent.Env {
		// The last of duplicate names wins, as in the container's environment. A value from a ConfigMap,
		// Secret or field (which can change) is none injection writes: it counts as unset.
		for i, name := range InjectedEnv {
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
		return Status{}, false
	case elections != "":
		var err error
		if specs, err = lease.ParseElections(elections); err != nil {
			return Status{}, false
		}
		for _, s := range specs {
			status.Leases = append(status.Leases, s.Lease)
		}
	case single != "":
		d, err := time.ParseDuration(duration)
		if err != nil || d < time.Second || d > lease.MaxLeaseDuration {
			return Status{}, false
		}
		specs = []lease.ElectionSpec{{Name: single, Lease: single, LeaseDuration: lease.Duration{Duration: d}}}
		status.Lease = single
	default:
		return Status{}, false
	}
	status.LeaseSeconds = make(map[string]int32, len(specs))
	for _, s := range specs {
		status.LeaseSeconds[s.Lease] = int32(s.LeaseDuration.Duration / time.Second)
	}

	switch kind {
	case "", contract.LeaseKindLease:
	case contract.LeaseKindMultiClusterLease:
		status.LeaseKind = kind
	default:
		return Status{}, false
	}

	switch onLoss {
	case "", contract.OnLossKeep:
	case contract.OnLossRestart:
		for _, s := range specs {
			if s.Name == onLossElection || (onLossElection == "" && len(specs) == 1) {
				status.RestartOnLoss = s.Lease
			}
		}
		if status.RestartOnLoss == "" {
			return Status{}, false // the agent refuses an on-loss election it does not run
		}
	default:
		return Status{}, false
	}
	return status, true
}
