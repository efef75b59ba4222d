// Command gatebench measures what the mutation gate adds to a request: an app on loopback is called
// directly and through the agent's gate (the agent leads, so every request passes) at a fixed rate, the
// two interleaved in the same run, and the latency percentiles and the agent's resident memory are printed
// as a Markdown table. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework"
)

func main() {
	rate := flag.Int("rate", 1000, "requests per second to each of the app and the gate")
	duration := flag.Duration("duration", 10*time.Second, "how long each is driven")
	flag.Parse()
	framework.QuietControllerRuntime()
	if err := run(context.Background(), *rate, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "gatebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rate int, duration time.Duration) error {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer app.Close()

	bench, err := framework.StartBench()
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
	agent, err := framework.StartAgent(binary, pod, "worker", framework.AgentOptions{
		Timing: lease.DefaultTiming, GateUpstream: strings.TrimPrefix(app.URL, "http://"),
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

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 5 * time.Second}
	direct, gated := &recorder{}, &recorder{}
	// Interleaved: every tick sends one POST to each, so both see the same machine load.
	interval := time.Second / time.Duration(rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var inflight sync.WaitGroup
	for end := time.Now().Add(duration); time.Now().Before(end); <-ticker.C {
		for _, target := range []struct {
			url string
			rec *recorder
		}{{app.URL, direct}, {agent.GateURL, gated}} {
			inflight.Go(func() { target.rec.call(client, target.url+"/orders") })
		}
	}
	inflight.Wait()
	rssAfter, err := agent.RSSBytes()
	if err != nil {
		return err
	}

	dp50, dp99, dmax := direct.percentiles()
	gp50, gp99, gmax := gated.percentiles()
	fmt.Printf("| measure (POST at %d req/s each, %s, on loopback) | direct to the app | through the gate | added |\n", rate, duration)
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| requests (failed) | %d (%d) | %d (%d) | |\n", len(direct.took), direct.failed, len(gated.took), gated.failed)
	fmt.Printf("| latency p50 | %s | %s | %s |\n", ms(dp50), ms(gp50), ms(gp50-dp50))
	fmt.Printf("| latency p99 | %s | %s | %s |\n", ms(dp99), ms(gp99), ms(gp99-dp99))
	fmt.Printf("| latency max | %s | %s | |\n", ms(dmax), ms(gmax))
	fmt.Printf("| agent RSS, before / after | | %.1f / %.1f MiB | |\n", float64(rssBefore)/(1<<20), float64(rssAfter)/(1<<20))
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

type recorder struct {
	mu     sync.Mutex
	took   []time.Duration
	failed int
}

func (r *recorder) call(client *http.Client, url string) {
	start := time.Now()
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"item":1}`))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || resp.StatusCode != http.StatusOK {
		r.failed++
		return
	}
	r.took = append(r.took, took)
}

func (r *recorder) percentiles() (p50, p99, maximum time.Duration) {
	slices.Sort(r.took)
	if len(r.took) == 0 {
		return 0, 0, 0
	}
	at := func(q float64) time.Duration { return r.took[int(q*float64(len(r.took)-1))] }
	return at(0.5), at(0.99), r.took[len(r.took)-1]
}
