package manager

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/inject"
)

// slimPod is the cache's transform for injected pods: it keeps only what leasegate's readers of that
// cache look at, so the webhook holds a few hundred bytes per pod instead of tens of kilobytes (the whole spec
// with the agent's env, probes and volumes, every annotation, the container statuses). The readers:
//   - provisioning: the agent container's election variables (the pod's leases, on-loss; see
//     inject.GivenTo), the service account;
//   - the leader Service: UID, labels, deletion, node, the containers' and native sidecars' ports (a
//     gated pod's named port is on the agent, a native sidecar), the addresses and the Ready condition;
//   - evictions and the lease guard: name, UID, the agent container's election variables;
//   - the fence's Event budget: name, namespace, UID (a requester that is a pod leasegate injected).
//
// The leasegate.io/status annotation is not kept: anyone who may update a pod can rewrite it, so no
// reader may judge by it.
//
// A reader that needs another field must add it here (TestSlimPodKeepsWhatReadersRead fails otherwise
// for the fields it checks). Nothing may write a cached pod back: the rest is gone.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone (cache.DeletedFinalStateUnknown) carries an already slimmed pod
	}
	slim := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: pod.Spec.ServiceAccountName,
			NodeName:           pod.Spec.NodeName,
			Containers:         containerPorts(pod.Spec.Containers),
			InitContainers:     containerPorts(pod.Spec.InitContainers),
		},
		Status: corev1.PodStatus{PodIP: pod.Status.PodIP, PodIPs: pod.Status.PodIPs},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// containerPorts keeps each container's name, restart policy (a native sidecar's is Always) and ports,
// and of the agent container the variables inject.GivenTo reads.
func containerPorts(containers []corev1.Container) []corev1.Container {
	if len(containers) == 0 {
		return nil
	}
	kept := make([]corev1.Container, len(containers))
	for i, c := range containers {
		kept[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Ports: c.Ports}
		if c.Name == inject.AgentContainer {
			for _, v := range c.Env {
				if slices.Contains(inject.GivenEnv[:], v.Name) {
					kept[i].Env = append(kept[i].Env, v)
				}
			}
		}
	}
	return kept
}
