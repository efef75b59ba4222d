// Command failover measures the leader agent's failover on a real kube-apiserver and etcd: graceful
// handover (SIGTERM, the agent releases the lease) and crash takeover (SIGKILL, the lease must expire),
// each over many runs, and the agent's resident memory. It prints a Markdown table. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/process"
)

func main() {
	runs := flag.Int("runs", 20, "failovers measured per kind")
	timing := lease.Timing{}
	flag.DurationVar(&timing.LeaseDuration, "lease-duration", 3*time.Second, "lease duration of the agents")
	flag.DurationVar(&timing.RenewDeadline, "renew-deadline", 2*time.Second, "renew deadline")
	flag.DurationVar(&timing.RetryPeriod, "retry-period", 500*time.Millisecond, "retry period")
	flag.Parse()
	process.QuietControllerRuntime()
	if err := timing.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), *runs, timing); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, runs int, timing lease.Timing) error {
	bench, err := process.StartBench()
	if err != nil {
		return err
	}
	defer bench.Stop()
	election, err := bench.ControlPlane.StartElection(ctx, "bench", 3, bench.Dir, bench.Agent, "worker", process.AgentOptions{Timing: timing})
	if err != nil {
		return err
	}
	defer election.Stop()

	measure := func(sig syscall.Signal) ([]time.Duration, error) {
		var took []time.Duration
		for i := range runs {
			old, _, d, err := election.Failover(sig, timing.LeaseDuration+5*time.Second)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", sig, i+1, err)
			}
			took = append(took, d)
			fmt.Fprintf(os.Stderr, "%-10s run %2d: %s\n", sig, i+1, d.Round(100*time.Microsecond))
			if _, err := election.Restart(old, 10*time.Second); err != nil {
				return nil, err
			}
			// Let the restarted agent settle into following, then let the next signal land anywhere in the
			// leader's renewal cycle: a crash right after a renewal is the slowest takeover, one just
			// before the next renewal the fastest.
			time.Sleep(timing.RetryPeriod + rand.N(timing.RetryPeriod))
		}
		return took, nil
	}
	graceful, err := measure(syscall.SIGTERM)
	if err != nil {
		return err
	}
	crash, err := measure(syscall.SIGKILL)
	if err != nil {
		return err
	}
	var rss, private int64
	for _, a := range election.Agents {
		if r, err := a.RSSBytes(); err == nil && r > rss {
			rss = r
		}
		if r, err := a.PrivateBytes(); err == nil && r > private {
			private = r
		}
	}

	fmt.Printf("\nTiming: lease duration %s, renew deadline %s, retry period %s; 3 agents; %d runs each.\n\n",
		timing.LeaseDuration, timing.RenewDeadline, timing.RetryPeriod, runs)
	fmt.Println("| measure | median | max | budget |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| graceful handover (SIGTERM -> follower leads) | %s | %s | 1s |\n", median(graceful), slices.Max(graceful).Round(100*time.Microsecond))
	fmt.Printf("| crash takeover (SIGKILL -> follower leads) | %s | %s | %s |\n", median(crash), slices.Max(crash).Round(time.Millisecond),
		lease.TakeoverBudget(timing.LeaseDuration, lease.DefaultClockSkewMargin))
	fmt.Printf("| agent RSS (largest of 3, after the runs) | %.1f MiB | | 25 MiB |\n", float64(rss)/(1<<20))
	fmt.Printf("| ... of which private, not the binary's pages shared by every agent on a node (largest of 3) | %.1f MiB | | |\n", float64(private)/(1<<20))
	return nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(100 * time.Microsecond)
}
