// Command gate measures what the mutation gate adds to a request. An app on loopback is called four
// ways at a fixed rate each, the four interleaved in the same run: directly, through a bare TCP relay,
// through httputil.ReverseProxy, and through the agent's gate (the agent leads, so every request passes). It prints the latency
// percentiles as a Markdown table, and the agent's resident memory and CPU time. `make bench` runs it.
//
// The app, the relay and the ReverseProxy are processes of their own (this command run again with
// -serve-app, -relay-to or -proxy-to), as the app is in a pod: in the bench's own process a direct call would never wake another
// process, and "added" would count the waking that every proxy beside an app costs. The relay copies
// bytes without reading them: the least any proxy in a process of its own adds on this machine, the
// floor against which the gate's own cost shows. ReverseProxy (with its default Transport) is what a
// proxy written the usual way in Go costs: the gate should never be behind it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/process"
)

func main() {
	rate := flag.Int("rate", 1000, "requests per second each way (direct, relay, ReverseProxy, gate)")
	duration := flag.Duration("duration", 10*time.Second, "how long each is driven")
	serveApp := flag.Bool("serve-app", false, "be the app: serve HTTP on a free loopback port, print its address, and answer until stdin closes")
	relayTo := flag.String("relay-to", "", "be a bare TCP relay to this address: listen on a free loopback port, print its address, and copy bytes both ways until stdin closes")
	proxyTo := flag.String("proxy-to", "", "be an httputil.ReverseProxy to this address: listen on a free loopback port, print its address, and proxy until stdin closes")
	flag.Parse()
	if *serveApp || *relayTo != "" || *proxyTo != "" {
		if err := serve(*relayTo, *proxyTo); err != nil {
			fmt.Fprintln(os.Stderr, "gate:", err)
			os.Exit(1)
		}
		return
	}
	process.QuietControllerRuntime()
	if err := run(context.Background(), *rate, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "gate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rate int, duration time.Duration) error {
	app, stopApp, err := startHelper("-serve-app")
	if err != nil {
		return err
	}
	defer stopApp()
	relay, stopRelay, err := startHelper("-relay-to", app)
	if err != nil {
		return err
	}
	defer stopRelay()
	reverseProxy, stopReverseProxy, err := startHelper("-proxy-to", app)
	if err != nil {
		return err
	}
	defer stopReverseProxy()

	bench, err := process.StartBench()
	if err != nil {
		return err
	}
	defer bench.Stop()
	cp, dir, binary := bench.ControlPlane, bench.Dir, bench.Agent
	if err := cp.CreateNamespace(ctx, "bench"); err != nil {
		return err
	}
	pod, err := cp.CreatePod(ctx, "bench", "worker-0", dir, "")
	if err != nil {
		return err
	}
	agent, err := process.StartAgent(binary, pod, "worker", process.AgentOptions{
		Timing: lease.DefaultTiming, GateUpstream: app,
	})
	if err != nil {
		return err
	}
	defer agent.Stop()
	for deadline := time.Now().Add(20 * time.Second); !agent.IsLeader(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent did not lead:\n%s", agent.Logs())
		}
	}
	rssBefore, err := agent.RSSBytes()
	if err != nil {
		return err
	}
	cpuBefore, err := agent.CPUTime()
	if err != nil {
		return err
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 5 * time.Second}
	// Interleaved: the four take turns a quarter of an interval apart, the order rotating each round, so
	// all see the same machine load. Open loop: each request leaves at its time whether or not the ones
	// before it were answered. Its latency counts from when it leaves, not from its scheduled time: at
	// 1,000/s none of the three is near saturation, so no answer holds the next request back, and the
	// sender's own timer lateness (sleeps overshoot by tens of microseconds here, and the requests due
	// meanwhile leave together) is the bench's, not the target's. The first second warms up
	// (connections are opened then) and is not recorded.
	targets := []*target{
		{name: "direct to the app", url: "http://" + app}, {name: "through a bare TCP relay", url: "http://" + relay},
		{name: "through httputil.ReverseProxy", url: "http://" + reverseProxy}, {name: "through the gate", url: agent.GateURL},
	}
	direct, gated := targets[0], targets[3]
	step := time.Second / time.Duration(len(targets)*rate)
	warmup := len(targets) * rate
	var inflight sync.WaitGroup
	start := time.Now()
	for n := range warmup + int(duration.Seconds()*float64(len(targets)*rate)) {
		time.Sleep(time.Until(start.Add(time.Duration(n) * step)))
		round := n / len(targets)
		t := targets[(n+round)%len(targets)]
		inflight.Go(func() { t.call(client, n >= warmup) })
	}
	inflight.Wait()
	rssAfter, err := agent.RSSBytes()
	if err != nil {
		return err
	}
	cpuAfter, err := agent.CPUTime()
	if err != nil {
		return err
	}

	fmt.Printf("| POST at %d req/s each, %s, on loopback | requests (failed) | p50 (ms) | p99 (ms) | max (ms) | added at p50 / p99 (ms) |\n", rate, duration)
	fmt.Println("|---|---|---|---|---|---|")
	for _, t := range targets {
		p50, p99, maximum := t.percentiles()
		added := ""
		if t != direct {
			d50, d99, _ := direct.percentiles()
			added = ms(p50-d50) + " / " + ms(p99-d99)
		}
		fmt.Printf("| %s | %d (%d) | %s | %s | %s | %s |\n", t.name, len(t.took), t.failed, ms(p50), ms(p99), ms(maximum), added)
	}
	fmt.Printf("\nagent RSS before / after: %.1f / %.1f MiB; agent CPU (elections included): %.0f µs a request through the gate\n",
		float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20), float64((cpuAfter-cpuBefore).Microseconds())/float64(gated.sent))
	return nil
}

// startHelper runs this command again with args (-serve-app, -relay-to or -proxy-to) and returns the address
// it listens on (host:port).
func startHelper(args ...string) (addr string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { _ = stdin.Close(); _ = cmd.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("%s did not say where it listens: %w", args, err)
	}
	return strings.TrimSpace(line), stop, nil
}

// serve is a helper process: the app (relayTo and proxyTo empty), whose every answer is a small JSON
// document; a bare relay to relayTo, which copies bytes without reading them: the least any proxy in a
// process of its own can add; or an httputil.ReverseProxy to proxyTo, as Go proxies are usually written.
// It exits when its stdin closes, so it never outlives the bench.
func serve(relayTo, proxyTo string) error {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(listener.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if proxyTo != "" {
		target := &url.URL{Scheme: "http", Host: proxyTo}
		proxy := &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
			Transport: &http.Transport{MaxIdleConnsPerHost: 64},
		}
		return http.Serve(listener, proxy)
	}
	if relayTo == "" {
		return http.Serve(listener, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
	}
	for {
		in, err := listener.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", relayTo)
			if err != nil {
				return
			}
			defer out.Close()
			go func() {
				_, _ = io.Copy(out, in)
				_ = out.(*net.TCPConn).CloseWrite() // the client is done: so is the app's side
			}()
			_, _ = io.Copy(in, out)
		}()
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// target is one way to the app and the latencies of the calls that took it.
type target struct {
	name, url string

	mu sync.Mutex
	// sent counts every call, warm-up and failures included; took holds the recorded successes'
	// latencies, failed the recorded failures.
	sent   int
	took   []time.Duration
	failed int
}

// call POSTs to the target and, if record, keeps the outcome.
func (t *target) call(client *http.Client, record bool) {
	start := time.Now()
	resp, err := client.Post(t.url+"/orders", "application/json", strings.NewReader(`{"item":1}`))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(start)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	switch {
	case !record:
	case err != nil || resp.StatusCode != http.StatusOK:
		t.failed++
	default:
		t.took = append(t.took, took)
	}
}

func (t *target) percentiles() (p50, p99, maximum time.Duration) {
	slices.Sort(t.took)
	if len(t.took) == 0 {
		return 0, 0, 0
	}
	at := func(q float64) time.Duration { return t.took[int(q*float64(len(t.took)-1))] }
	return at(0.5), at(0.99), t.took[len(t.took)-1]
}
