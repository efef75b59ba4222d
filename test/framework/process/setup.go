package process

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/leasegate/leasegate/test/framework/checkout"
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

// Bench is what the benchmark commands start from: a control plane, a scratch directory, and the agent
// binary built into it.
type Bench struct {
	ControlPlane *ControlPlane
	Dir, Agent   string
}

// StartBench starts the control plane and builds the agent; Stop undoes both.
func StartBench() (*Bench, error) {
	cp, err := StartControlPlane()
	if err != nil {
		return nil, err
	}
	b := &Bench{ControlPlane: cp}
	if b.Dir, err = os.MkdirTemp("", "leasegate-bench-"); err == nil {
		b.Agent, err = checkout.BuildAgent(b.Dir)
	}
	if err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// Stop stops the control plane and removes the scratch directory.
func (b *Bench) Stop() {
	b.ControlPlane.Stop()
	if b.Dir != "" {
		_ = os.RemoveAll(b.Dir)
	}
}

// WebhookBench is a control plane with leasegate-webhook running against it, and a client that sets up
// load without client-go's default rate limit: what the fence's and the injector's scale benchmarks
// measure.
type WebhookBench struct {
	ControlPlane *ControlPlane
	Webhook      *Webhook
	Client       kubernetes.Interface
	dir          string
}

// StartWebhookBench starts the control plane, then the webhook built from this tree with webhookArgs added
// to its flags; Stop undoes both.
func StartWebhookBench(ctx context.Context, webhookArgs ...string) (*WebhookBench, error) {
	cp, err := StartControlPlane()
	if err != nil {
		return nil, err
	}
	b := &WebhookBench{ControlPlane: cp}
	var binary string
	if b.dir, err = os.MkdirTemp("", "leasegate-bench-"); err == nil {
		if binary, err = checkout.BuildWebhook(b.dir); err == nil {
			b.Webhook, err = cp.StartWebhook(ctx, binary, b.dir, "leasegate-system", webhookArgs...)
		}
	}
	if err != nil {
		b.Stop()
		return nil, err
	}
	fast := rest.CopyConfig(cp.Config)
	fast.QPS, fast.Burst = 5000, 5000
	b.Client = kubernetes.NewForConfigOrDie(fast)
	return b, nil
}

// Stop stops the webhook and the control plane and removes the scratch directory.
func (b *WebhookBench) Stop() {
	if b.Webhook != nil {
		b.Webhook.Stop()
	}
	b.ControlPlane.Stop()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// QuietControllerRuntime gives controller-runtime, which envtest logs through, a logger that drops
// everything. A command that prints its own narration (the demo, the benchmarks) would otherwise get
// controller-runtime's "log.SetLogger(...) was never called" warning, with a stack trace, half a minute in.
func QuietControllerRuntime() { ctrllog.SetLogger(logr.Discard()) }
