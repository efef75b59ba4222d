// Command demo shows leasegate at work on a real kube-apiserver and etcd: leasegate-webhook injects the
// leader agent into the pods of a labelled namespace and provisions their Lease RBAC; the agents, run as
// local processes with each pod's injected environment and a pod-bound token, elect a leader; the leader
// crashes and a follower takes over when the lease expires; the new leader is stopped gracefully and
// hands over at once.
// Run it with `make demo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

const (
	namespace        = "shop"
	workload         = "orders"
	leaseName        = workload // derived from the Deployment
	webhookNamespace = "leasegate-system"
)

var begin = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%6.2fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	timing := lease.Timing{}
	flag.DurationVar(&timing.LeaseDuration, "lease-duration", 4*time.Second, "lease duration of the demo's agents")
	flag.DurationVar(&timing.RenewDeadline, "renew-deadline", 3*time.Second, "renew deadline")
	flag.DurationVar(&timing.RetryPeriod, "retry-period", 500*time.Millisecond, "retry period")
	showLogs := flag.Bool("logs", false, "print every agent's log at the end")
	flag.Parse()
	process.QuietControllerRuntime()
	if err := timing.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, timing, *showLogs); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, timing lease.Timing, showLogs bool) error {
	say("starting kube-apiserver and etcd (envtest, binaries built from the Go module proxy)")
	cp, err := process.StartControlPlane()
	if err != nil {
		return err
	}
	defer cp.Stop()
	version, err := cp.Client.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	say("control plane up: kube-apiserver %s at %s", version.GitVersion, cp.Config.Host)

	dir, err := os.MkdirTemp("", "leasegate-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	say("building leasegate-agent and leasegate-webhook")
	agentBinary, err := checkout.BuildAgent(dir)
	if err != nil {
		return err
	}
	webhookBinary, err := checkout.BuildWebhook(dir)
	if err != nil {
		return err
	}
	say("starting leasegate-webhook in %q; the API server calls it over TLS (config/webhook installed)", webhookNamespace)
	webhook, err := cp.StartWebhook(ctx, webhookBinary, dir, webhookNamespace)
	if err != nil {
		return err
	}
	defer webhook.Stop()

	say("kubectl label namespace %s leasegate.io/inject=enabled", namespace)
	if err := createNamespace(ctx, cp); err != nil {
		return err
	}
	bad := workerPod(timing)
	bad.Annotations[contract.RenewDeadline] = "1h"
	_, err = cp.Client.CoreV1().Pods(namespace).Create(ctx, bad, metav1.CreateOptions{})
	say("a pod with leasegate.io/renew-deadline: 1h is refused:\n          Error from server (Forbidden): %v", err)

	say("the ReplicaSet of Deployment %q creates 3 pods (lease timing by annotation: %s / %s / %s)",
		workload, timing.LeaseDuration, timing.RenewDeadline, timing.RetryPeriod)
	injected := map[string]*corev1.Pod{}
	var pods []*process.Pod
	for range 3 {
		pod, err := cp.Client.CoreV1().Pods(namespace).Create(ctx, workerPod(timing), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		agent := pod.Spec.InitContainers[0]
		say("%s admitted: %s is a native sidecar (restartPolicy %s), status %s", pod.Name, agent.Name,
			*agent.RestartPolicy, pod.Annotations[contract.Status])
		identity, err := cp.PodIdentity(ctx, pod, dir, "")
		if err != nil {
			return err
		}
		injected[identity.Name] = pod
		pods = append(pods, identity)
	}
	if err := showProvisioned(ctx, cp); err != nil {
		return err
	}

	say("running each pod's agent as a local process, with the injected environment and a pod-bound token (standing in for kubelet)")
	started := time.Now()
	election := &process.Election{Launch: func(pod *process.Pod) (*process.Agent, error) {
		return process.StartInjectedAgent(agentBinary, injected[pod.Name], pod)
	}}
	if err := election.Start(pods); err != nil {
		return err
	}
	defer func() {
		election.Stop()
		if showLogs {
			for _, a := range election.Agents {
				fmt.Printf("\n--- %s ---\n%s", a.Pod.Name, a.Logs())
			}
			fmt.Printf("\n--- leasegate-webhook ---\n%s", webhook.Logs())
		}
	}()
	leader, err := election.SoleLeader(15 * time.Second)
	if err != nil {
		return err
	}
	say("elected %s in %s", leader.Pod.Name, time.Since(started).Round(time.Millisecond))
	if err := showState(ctx, cp, election); err != nil {
		return err
	}

	if err := showFence(ctx, cp, election, leader); err != nil {
		return err
	}

	say("SIGKILL %s: a crash, so its lease must expire (budget: lease duration %s + clock skew margin 1s after its last renewal)",
		leader.Pod.Name, timing.LeaseDuration)
	old, next, took, err := election.Failover(syscall.SIGKILL, timing.LeaseDuration+5*time.Second)
	if err != nil {
		return err
	}
	say("%s took over from %s after %s", next.Pod.Name, old.Pod.Name, took.Round(time.Millisecond))
	if _, err := election.Restart(old, 10*time.Second); err != nil {
		return err
	}
	say("%s restarted (as kubelet would restart its container) and follows", old.Pod.Name)

	say("SIGTERM %s: a graceful stop, so it steps down and releases the lease on its way out", next.Pod.Name)
	old, next, took, err = election.Failover(syscall.SIGTERM, 5*time.Second)
	if err != nil {
		return err
	}
	say("%s took over from %s after %s (exit status of %s: %d)", next.Pod.Name, old.Pod.Name,
		took.Round(time.Millisecond), old.Pod.Name, old.ExitCode())
	if _, err := election.Restart(old, 10*time.Second); err != nil {
		return err
	}
	if err := showState(ctx, cp, election); err != nil {
		return err
	}
	say("done: run `make demo ARGS=-logs` to see the agents' and the webhook's own logs")
	return nil
}

// fenceConfig guards the workload's ConfigMap writes with its lease.
const fenceConfig = `apiVersion: config.leasegate.io/v1alpha1
kind: LeasegateConfiguration
guards:
- name: orders
  lease: orders
  serviceAccounts: [orders]
  resources: [{group: "", resources: [configmaps]}]
`

// showFence turns the fence on and shows the leader's write pass and a follower's refused, with the
// Event an operator sees.
func showFence(ctx context.Context, cp *process.ControlPlane, election *process.Election, leader *process.Agent) error {
	say("kubectl apply: leasegate-config guards the ConfigMap writes of service account %q with lease %q", workload, leaseName)
	if _, err := cp.Client.CoreV1().ConfigMaps(webhookNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: map[string]string{"config.yaml": fenceConfig},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var follower *process.Agent
	for _, a := range election.Agents {
		if a != leader {
			follower = a
			break
		}
	}
	write := func(a *process.Agent) error {
		config, err := a.Pod.RESTConfig()
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			return err
		}
		_, err = client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "orders-output-"}, Data: map[string]string{"writer": a.Pod.Name},
		}, metav1.CreateOptions{})
		return err
	}
	// The guard is in force once the webhook has applied its rules; the leader's write passes either way.
	deadline := time.Now().Add(5 * time.Second)
	var denied error
	for denied == nil && time.Now().Before(deadline) {
		denied = write(follower)
		time.Sleep(50 * time.Millisecond)
	}
	if denied == nil {
		return fmt.Errorf("the follower's write was never refused")
	}
	if err := write(leader); err != nil {
		return fmt.Errorf("the leader's write was refused: %w", err)
	}
	say("the leader %s creates a ConfigMap: allowed", leader.Pod.Name)
	say("the follower %s tries the same, with its own pod-bound token:\n          Error from server (Forbidden): %v", follower.Pod.Name, denied)
	for time.Now().Before(deadline.Add(5 * time.Second)) {
		events, err := cp.Client.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "LeaderGateDenied" {
				say("kubectl get events -n %s shows: %s %s %s/%s: %s", namespace, e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note)
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no LeaderGateDenied Event")
}

func createNamespace(ctx context.Context, cp *process.ControlPlane) error {
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{contract.Inject: contract.InjectEnabled},
	}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cp.Client.CoreV1().ServiceAccounts(namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: workload}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// What the workload itself may do: write ConfigMaps. The fence decides which replica may.
	return process.GrantConfigMapWrites(ctx, cp.Client, namespace, workload)
}

// workerPod is a pod as the ReplicaSet of Deployment "orders" would create it.
func workerPod(timing lease.Timing) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: workload + "-5d8f7c9b4-",
			Labels:       map[string]string{"app.kubernetes.io/name": workload, "pod-template-hash": "5d8f7c9b4"},
			Annotations: map[string]string{
				contract.LeaseDuration: timing.LeaseDuration.String(),
				contract.RenewDeadline: timing.RenewDeadline.String(),
				contract.RetryPeriod:   timing.RetryPeriod.String(),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: workload + "-5d8f7c9b4",
				UID: "0b6a4d1f-6c4f-4f8e-8f0e-3f1b9f2d6a10", Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: workload,
			Containers:         []corev1.Container{{Name: workload, Image: "registry.example/orders:1"}},
		},
	}
}

// showProvisioned prints the Role the webhook provisioned once it exists.
func showProvisioned(ctx context.Context, cp *process.ControlPlane) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		role, err := cp.Client.RbacV1().Roles(namespace).Get(ctx, "leasegate-"+workload, metav1.GetOptions{})
		if err == nil {
			rule := role.Rules[0]
			say("provisioned Role %s: %v on %s %v, and a RoleBinding for service account %q", role.Name, rule.Verbs,
				rule.Resources[0], rule.ResourceNames, workload)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no Role provisioned for lease %s", workload)
}

// showState prints what each agent says and what the Lease says, side by side.
func showState(ctx context.Context, cp *process.ControlPlane, election *process.Election) error {
	l, err := cp.Client.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("          %-24s %-8s %-8s %s\n", "AGENT", "LEADER", "READYZ", "/leader holder")
	for _, a := range election.Agents {
		s, err := a.Leader()
		if err != nil {
			return err
		}
		_, code, _ := a.Get(contract.AgentReadyPath)
		fmt.Printf("          %-24s %-8t %-8d %s\n", a.Pod.Name, s.IsLeader, code, s.Holder)
	}
	fmt.Printf("          Lease %s/%s: holderIdentity=%s leaseTransitions=%d renewTime=%s\n", namespace, leaseName,
		*l.Spec.HolderIdentity, *l.Spec.LeaseTransitions, l.Spec.RenewTime.Format("15:04:05.000"))
	fmt.Println(strings.Repeat("-", 100))
	return nil
}
