// Package agent is the leader agent's runtime: it runs the election for one pod and tells the app, through
// HTTP endpoints, an optional status file, metrics and logs, whether that pod leads.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasegate/leasegate/internal/lease"
)

// shutdownTimeout bounds how long in-flight HTTP requests may delay exit after the lease is released.
const shutdownTimeout = 200 * time.Millisecond

// Agent is one pod's leader agent, ready to run.
type Agent struct {
	settings Settings
	elector  *lease.Elector
	metrics  *metrics
	listener net.Listener
	log      logr.Logger
}

// New connects the pieces and binds the listener, so a bad LEASEGATE_LISTEN or kubeconfig fails here,
// before the agent takes part in any election.
func New(s Settings, log logr.Logger) (*Agent, error) {
	config, err := restConfig(s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := lease.NewClient(config)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	a := &Agent{settings: s, log: log, metrics: newMetrics(s.PodNamespace + "/" + s.Lease)}
	a.elector, err = lease.NewElector(lease.Config{
		Client:          client,
		Namespace:       s.PodNamespace,
		Name:            s.Lease,
		Identity:        s.Identity(),
		Timing:          s.Timing,
		ClockSkewMargin: s.ClockSkewMargin,
		OnChange:        a.onChange,
		Log:             log,
	})
	if err != nil {
		return nil, err
	}
	if a.listener, err = net.Listen("tcp", s.Listen); err != nil {
		return nil, fmt.Errorf("LEASEGATE_LISTEN=%s: %w", s.Listen, err)
	}
	return a, nil
}

// Run serves the endpoints and takes part in the election until ctx ends (SIGTERM), then stops leading,
// releases the lease and returns.
func (a *Agent) Run(ctx context.Context) error {
	server := &http.Server{
		Handler:           newMux(a.elector, a.settings.Readiness, a.metrics),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(a.listener) }()
	a.log.Info("Agent started", "identity", a.settings.Identity(), "lease", a.settings.PodNamespace+"/"+a.settings.Lease,
		"listen", a.listener.Addr().String(), "readiness", a.settings.Readiness,
		"leaseDuration", a.settings.Timing.LeaseDuration, "renewDeadline", a.settings.Timing.RenewDeadline,
		"retryPeriod", a.settings.Timing.RetryPeriod, "clockSkewMargin", a.settings.ClockSkewMargin)
	a.writeStatus(a.elector.Status())

	electionCtx, stopElection := context.WithCancel(ctx)
	elected := make(chan struct{})
	go func() { a.elector.Run(electionCtx); close(elected) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("serving %s: %w", a.listener.Addr(), err)
	}
	stopElection()
	<-elected // the lease is released before the endpoints go away

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if shutdownErr := server.Shutdown(shutdownCtx); shutdownErr != nil && !errors.Is(shutdownErr, context.DeadlineExceeded) {
		err = errors.Join(err, shutdownErr)
	}
	return err
}

// onChange publishes a new election status everywhere the app may look. It runs on the election loop.
func (a *Agent) onChange(s lease.Status) {
	a.metrics.observe(s.IsLeader)
	a.writeStatus(s)
}

func (a *Agent) writeStatus(s lease.Status) {
	if a.settings.StatusFile == "" {
		return
	}
	if err := writeStatusFile(a.settings.StatusFile, s); err != nil {
		a.log.Error(err, "Writing the status file failed", "path", a.settings.StatusFile)
	}
}

// restConfig loads KUBECONFIG when set, in-cluster config otherwise.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var config *rest.Config
	var err error
	if kubeconfig != "" {
		config, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("KUBECONFIG=%s: %w", kubeconfig, err)
		}
	} else if config, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no cluster access: set KUBECONFIG (--kubeconfig) outside a pod: %w", err)
	}
	config.UserAgent = "leasegate-agent"
	return config, nil
}
