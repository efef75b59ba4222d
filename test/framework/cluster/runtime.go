package cluster

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What the suite does to containers behind kubelet's back, through the runtime, as a crash, an OOM kill or
// a stalled node would.

// ContainerID is the runtime's ID of the container named name in pod (a sidecar or an app container), from
// the pod's status.
func ContainerID(pod *corev1.Pod, name string) (string, error) {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			if s.Name == name && s.ContainerID != "" {
				_, id, _ := strings.Cut(s.ContainerID, "://")
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("pod %s/%s has no running container %q", pod.Namespace, pod.Name, name)
}

// Kill sends signal (e.g. "SIGKILL") to the container's process, as the kernel's OOM killer or a crash
// would end it. Kubelet notices and restarts it.
func (n *Node) Kill(containerID, signal string) error {
	return n.ctr("tasks", "kill", "--signal", signal, containerID)
}

// Freeze stops every process of the container in the cgroup freezer: it keeps its memory, sockets and
// state, and runs on after Thaw as if no time had passed, like a process stalled by a long GC pause or a
// node that stopped scheduling it.
func (n *Node) Freeze(containerID string) error { return n.ctr("tasks", "pause", containerID) }

// Thaw lets a frozen container run again.
func (n *Node) Thaw(containerID string) error { return n.ctr("tasks", "resume", containerID) }

// PID is the host PID of the container's main process.
func (n *Node) PID(containerID string) (int, error) {
	out, err := exec.Command("ctr", "--address", n.socket, "--namespace", "k8s.io", "tasks", "list").Output()
	if err != nil {
		return 0, fmt.Errorf("ctr tasks list: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// TASK PID STATUS
		if fields := strings.Fields(line); len(fields) == 3 && fields[0] == containerID {
			return strconv.Atoi(fields[1])
		}
	}
	return 0, fmt.Errorf("no task for container %s", containerID)
}
