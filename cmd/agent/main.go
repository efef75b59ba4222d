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
	"syscall"

	"github.com/go-logr/logr"

	"github.com/leasegate/leasegate/internal/agent"
	"github.com/leasegate/leasegate/internal/version"
)

func main() {
	// Nothing reads the agent's heap profile: without sampling, the runtime does not set up its 1.4 MiB
	// profiling hash table.
	runtime.MemProfileRate = 0
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("leasegate-agent", version.String())
		return
	}
	settings, err := agent.LoadSettings(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "Usage: leasegate-agent [flags]\n       leasegate-agent --version\n\nEvery flag may instead be set by the environment variable named beside it.")
		agent.Usage(os.Stderr)
		os.Exit(0)
	}
	if err != nil {
		exitBadSettings(err)
	}
	goRuntimeFor(os.Getenv, settings.Gate.Upstream != "").apply()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	log.Info("Starting leasegate-agent", "version", version.String())

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
