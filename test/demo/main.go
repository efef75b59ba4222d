// Command demo shows leasegate's leader agent at work on a real kube-apiserver and etcd: three agents,
// each authenticating as its own pod with a pod-bound token, elect a leader; the leader crashes and a
// follower takes over when the lease expires; the new leader is stopped gracefully and hands over at once.
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework"
)

const (
	namespace = "demo"
	leaseName = "worker"
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
	cp, err := framework.StartControlPlane()
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
	say("building leasegate-agent")
	binary, err := framework.BuildAgent(dir)
	if err != nil {
		return err
	}

	say("creating pods worker-0..2 in namespace %q, each with a token bound to its pod, and starting their agents", namespace)
	say("timing: lease duration %s, renew deadline %s, retry period %s", timing.LeaseDuration, timing.RenewDeadline, timing.RetryPeriod)
	started := time.Now()
	election, err := cp.StartElection(ctx, namespace, 3, dir, binary, leaseName, framework.AgentOptions{Timing: timing})
	if err != nil {
		return err
	}
	defer func() {
		election.Stop()
		if showLogs {
			for _, a := range election.Agents {
				fmt.Printf("\n--- %s ---\n%s", a.Pod.Name, a.Logs())
			}
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

	say("SIGKILL %s: a crash, so its lease must expire (budget: lease duration %s after its last renewal)",
		leader.Pod.Name, timing.FailoverBudget(0))
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
	say("done: run `make demo ARGS=-logs` to see the agents' own transition logs")
	return nil
}

// showState prints what each agent says and what the Lease says, side by side.
func showState(ctx context.Context, cp *framework.ControlPlane, election *framework.Election) error {
	l, err := cp.Client.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("          %-10s %-8s %-8s %s\n", "AGENT", "LEADER", "READYZ", "/leader holder")
	for _, a := range election.Agents {
		s, err := a.Leader()
		if err != nil {
			return err
		}
		_, code, _ := a.Get("/readyz")
		fmt.Printf("          %-10s %-8t %-8d %s\n", a.Pod.Name, s.IsLeader, code, s.Holder)
	}
	fmt.Printf("          Lease %s/%s: holderIdentity=%s leaseTransitions=%d renewTime=%s\n", namespace, leaseName,
		*l.Spec.HolderIdentity, *l.Spec.LeaseTransitions, l.Spec.RenewTime.Format("15:04:05.000"))
	fmt.Println(strings.Repeat("-", 100))
	return nil
}
