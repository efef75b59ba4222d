// Command electionsperpod measures what several elections per pod cost: three agents, each running 1, 4 and
// 16 elections, on a real kube-apiserver and etcd, with the default timing (15s/10s/2s). For each count it
// reports the agents' resident memory and the lease API calls per minute they cause (the API server's own
// apiserver_request_total, minus what the same window counts with no agent running), which should be the
// leaders' renewals alone: followers watch, they do not poll. It prints a Markdown table; `make bench`
// runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/process"
)

func main() {
	window := flag.Duration("window", 30*time.Second, "how long API calls are counted for each election count")
	flag.Parse()
	process.QuietControllerRuntime()
	if err := run(context.Background(), *window); err != nil {
		fmt.Fprintln(os.Stderr, "electionsperpod:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, window time.Duration) error {
	bench, err := process.StartBench()
	if err != nil {
		return err
	}
	defer bench.Stop()
	cp, dir, binary := bench.ControlPlane, bench.Dir, bench.Agent

	baseline, err := leaseCallsDuring(ctx, cp, window)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "baseline (no agent): %v lease calls in %s\n", baseline, window)
	renewalsPerMinute := float64(time.Minute / lease.DefaultTiming.RetryPeriod)

	apiServerPort, err := portOf(cp.Config.Host)
	if err != nil {
		return err
	}
	fmt.Println("| elections per pod | agent RSS (largest of 3) | RSS per extra election | connections to the API server per agent | lease API calls/min (3 agents) | renewals (PUT)/min, at most elections × 60 s / 2 s | other calls/min (followers polling, re-lists) | agent CPU, 3 agents |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	var firstRSS int64
	for _, n := range []int{1, 4, 16} {
		agents, err := startAgents(ctx, cp, dir, binary, n)
		if err != nil {
			return err
		}
		if err := waitLeaders(agents, n, 30*time.Second); err != nil {
			stopAll(agents)
			return err
		}
		cpuBefore, err := cpuTime(agents)
		if err != nil {
			stopAll(agents)
			return err
		}
		calls, err := leaseCallsDuring(ctx, cp, window)
		if err != nil {
			stopAll(agents)
			return err
		}
		cpuAfter, err := cpuTime(agents)
		if err != nil {
			stopAll(agents)
			return err
		}
		var rss int64
		connections := 0
		for _, a := range agents {
			r, err := a.RSSBytes()
			if err != nil {
				stopAll(agents)
				return err
			}
			rss = max(rss, r)
			c, err := tcpConnections(a.Pid(), apiServerPort)
			if err != nil {
				stopAll(agents)
				return err
			}
			connections = max(connections, c)
		}
		stopAll(agents)
		if n == 1 {
			firstRSS = rss
		}
		perMinute := func(c float64) float64 { return c * float64(time.Minute) / float64(window) }
		total := perMinute(calls.total - baseline.total)
		renewals := perMinute(calls.byVerb["PUT"] - baseline.byVerb["PUT"])
		perExtra := "-"
		if n > 1 {
			perExtra = fmt.Sprintf("%.2f MiB", float64(rss-firstRSS)/float64(n-1)/(1<<20))
		}
		cpu := float64(cpuAfter-cpuBefore) / float64(time.Millisecond) * float64(time.Minute) / float64(window)
		fmt.Printf("| %d | %.1f MiB | %s | %d | %.0f | %.0f (at most %.0f) | %.0f | %.0f ms/min |\n",
			n, float64(rss)/(1<<20), perExtra, connections, total, renewals, renewalsPerMinute*float64(n), total-renewals, cpu)
		fmt.Fprintf(os.Stderr, "%d elections: by verb %v\n", n, calls.byVerb)
	}
	return nil
}

// cpuTime is the CPU time the agents have used, together.
func cpuTime(agents []*process.Agent) (time.Duration, error) {
	var total time.Duration
	for _, a := range agents {
		t, err := a.CPUTime()
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// startAgents starts three agents, each in a pod of a new namespace, running n elections.
func startAgents(ctx context.Context, cp *process.ControlPlane, dir, binary string, n int) ([]*process.Agent, error) {
	namespace := fmt.Sprintf("bench-%d", n)
	if err := cp.CreateNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	specs := make([]lease.ElectionSpec, n)
	for i := range specs {
		specs[i] = lease.NewElectionSpec(fmt.Sprintf("loop-%d", i), fmt.Sprintf("loop-%d", i), lease.DefaultTiming, "")
	}
	var agents []*process.Agent
	for i := range 3 {
		pod, err := cp.CreatePod(ctx, namespace, fmt.Sprintf("worker-%d", i), dir, "")
		if err != nil {
			return agents, err
		}
		a, err := process.StartAgent(binary, pod, "", process.AgentOptions{Elections: specs})
		if err != nil {
			return agents, err
		}
		agents = append(agents, a)
	}
	return agents, nil
}

// waitLeaders waits until every one of n elections has exactly one leader, then a little more so the
// losers' first attempts are over and only the steady state is counted.
func waitLeaders(agents []*process.Agent, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		led := 0
		for i := range n {
			leaders := 0
			for _, a := range agents {
				if s, err := a.Election(fmt.Sprintf("loop-%d", i)); err == nil && s.IsLeader {
					leaders++
				}
			}
			if leaders == 1 {
				led++
			}
		}
		if led == n {
			time.Sleep(3 * time.Second)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%d elections did not each get one leader within %s", n, timeout)
}

func stopAll(agents []*process.Agent) {
	for _, a := range agents {
		a.Stop()
	}
}

type leaseCalls struct {
	total  float64
	byVerb map[string]float64
}

// leaseCallsDuring counts the lease requests the API server served during window.
func leaseCallsDuring(ctx context.Context, cp *process.ControlPlane, window time.Duration) (leaseCalls, error) {
	before, err := leaseRequests(ctx, cp)
	if err != nil {
		return leaseCalls{}, err
	}
	time.Sleep(window)
	after, err := leaseRequests(ctx, cp)
	if err != nil {
		return leaseCalls{}, err
	}
	calls := leaseCalls{byVerb: map[string]float64{}}
	for verb, n := range after {
		if d := n - before[verb]; d > 0 {
			calls.byVerb[verb] = d
			calls.total += d
		}
	}
	return calls, nil
}

// leaseRequests sums apiserver_request_total for leases by verb.
func leaseRequests(ctx context.Context, cp *process.ControlPlane) (map[string]float64, error) {
	m, err := cp.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	byVerb := map[string]float64{}
	for _, verb := range []string{"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"} {
		if n := m.Sum("apiserver_request_total", map[string]string{"resource": "leases", "verb": verb}); n > 0 {
			byVerb[verb] = n
		}
	}
	return byVerb, nil
}

func portOf(host string) (int, error) {
	u, err := url.Parse(host)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}

// tcpConnections counts the established TCP connections of process pid to remotePort: its sockets
// (/proc/<pid>/fd) matched against the kernel's table (/proc/<pid>/net/tcp).
func tcpConnections(pid, remotePort int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			sockets[strings.TrimSuffix(inode, "]")] = true
		}
	}
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return 0, err
	}
	count := 0
	for _, line := range strings.Split(string(table), "\n")[1:] {
		fields := strings.Fields(line)
		// sl local_address rem_address st ... inode (the 10th field); st 01 is ESTABLISHED.
		if len(fields) < 10 || fields[3] != "01" || !sockets[fields[9]] {
			continue
		}
		_, port, _ := strings.Cut(fields[2], ":")
		if p, err := strconv.ParseInt(port, 16, 32); err == nil && int(p) == remotePort {
			count++
		}
	}
	return count, nil
}
