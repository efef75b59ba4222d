package framework

import (
	"context"
	"fmt"
)

// StartElection creates namespace with a pod and pod-bound token per agent under dir, and starts n
// agents of binary on leaseName: the whole setup of the demo and the failover benchmark.
func (c *ControlPlane) StartElection(ctx context.Context, namespace string, n int, dir, binary, leaseName string, opts AgentOptions) (*Election, error) {
	if err := c.CreateNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	pods := make([]*Pod, n)
	for i := range pods {
		var err error
		if pods[i], err = c.CreatePod(ctx, namespace, fmt.Sprintf("worker-%d", i), dir, ""); err != nil {
			return nil, err
		}
	}
	e := &Election{Launch: func(pod *Pod) (*Agent, error) { return StartAgent(binary, pod, leaseName, opts) }}
	return e, e.Start(pods)
}
