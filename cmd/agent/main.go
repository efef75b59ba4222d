// Command leasegate-agent runs a leader election on a Lease for the pod it is injected into and tells the
// app whether it leads. Configuration is in the environment (as the webhook injects it) or in flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/leasegate/leasegate/internal/agent"
)

// electorMemoryLimit is the soft memory limit of an agent that only elects, unless GOMEMLIMIT sets one:
// the Go runtime collects and returns memory to the kernel harder as it nears it. Such an agent's live
// heap is 1-3 MiB; after 40 failovers the largest measured 18.3 MiB resident with the limit against
// 20.0-20.5 MiB without, and handovers kept their time. At 6 MiB handovers slowed from 7 ms to 34 ms
// (collection on every step). An agent serving the mutation gate gets no limit: its heap follows the
// app's traffic, and collecting more often would add to every request's latency.
const electorMemoryLimit = 10 << 20

func main() {
	// Nothing reads the agent's heap profile: without sampling, the runtime does not set up its 1.4 MiB
	// profiling hash table.
	runtime.MemProfileRate = 0
	settings, err := agent.LoadSettings(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "Usage: leasegate-agent [flags]\n\nEvery flag may instead be set by the environment variable named beside it.")
		agent.Usage(os.Stderr)
		os.Exit(0)
	}
	if err != nil {
		exitBadSettings(err)
	}
	if os.Getenv("GOMEMLIMIT") == "" && settings.Gate.Upstream == "" {
		debug.SetMemoryLimit(electorMemoryLimit)
	}

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))

	a, err := agent.New(settings, log)
	if err != nil {
		exitBadSettings(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := a.Run(ctx); err != nil {
		log.Error(err, "Agent failed")
		os.Exit(1)
	}
}

// exitBadSettings exits with status 2, the agent's code for "fix the configuration", so a crash-looping
// pod's last state tells a configuration error apart from a runtime failure.
func exitBadSettings(err error) {
	fmt.Fprintf(os.Stderr, "leasegate-agent: invalid settings:\n%v\n", err)
	os.Exit(2)
}
