// Package agent is the leader agent's runtime: it runs a pod's elections (one, or several each on its own
// lease and timing) and tells the app, through HTTP endpoints, an optional status file, metrics and logs,
// whether that pod leads.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/gate"
	"github.com/leasegate/leasegate/internal/gate/rules"
	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/leaseelection"
)

// shutdownTimeout bounds how long in-flight HTTP requests may delay exit after the lease is released.
const shutdownTimeout = 200 * time.Millisecond

// Agent is one pod's leader agent, ready to run.
type Agent struct {
	settings  Settings
	elections []*runningElection
	registry  *prometheus.Registry
	// listener is the endpoints', bounded by agentLimits.
	listener *limitListener
	log      logr.Logger

	// gate, when configured, serves the mutation gate (gateProxy) on gateListener, following gated's
	// elector.
	gate         *http.Server
	gateProxy    *gate.Gate
	gateListener *limitListener
	gated        *runningElection

	// client is the API client every election shares; with on-loss restart, losing restarting's lease
	// evicts this pod, unless the agent is stopping (a release on the way out is no loss).
	client     *leaseelection.Client
	restarting *runningElection
	stopping   atomic.Bool
	evicting   sync.Once

	// statusMu serializes status file writes: every election's loop reports its changes.
	statusMu sync.Mutex
	// events streams the changes to clients of /leader that accept text/event-stream.
	events *eventHub
	// wake answers the waits of the followers of the leases this agent leads (contract.AgentWakePath).
	wake *leaseelection.WakeHub
}

// runningElection is one of the pod's elections.
type runningElection struct {
	// index is the election's place among the pod's, as the event hub numbers them.
	index   int
	spec    lease.ElectionSpec
	elector *leaseelection.Elector
	metrics *metrics
	// log names the election when the pod runs several.
	log logr.Logger
}

// New connects the pieces and binds the listener, so a bad LEASEGATE_LISTEN or kubeconfig fails here,
// before the agent takes part in any election. Every election shares one API client, so their watches
// share one HTTP/2 connection to the API server.
func New(s Settings, log logr.Logger) (*Agent, error) {
	api, err := apiClient(s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	specs := s.ElectionSpecs()
	api.SetRateLimit(apiRateLimit(specs))
	client := leaseelection.NewClient(api)
	a := &Agent{settings: s, log: log, registry: newRegistry(), client: client, wake: leaseelection.NewWakeHub()}
	listener, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", contract.EnvListen, s.Listen, err)
	}
	a.listener = newLimitListener(listener, agentLimits)
	fail := func(err error) (*Agent, error) {
		a.listener.Close()
		return nil, err
	}
	// A MultiClusterLease's followers watch it: its answers come through the object.
	var wakeURL string
	peerClient := leaseelection.NewPeerClient() // the elections' waits on one holder share a connection
	if s.LeaseKind == contract.LeaseKindLease {
		wakeURL = s.wakeURL(listener.Addr().(*net.TCPAddr).Port)
	}
	// Each election has its own lock: a MultiClusterLeaseLock keeps its elector's heartbeats.
	newLock := func() leaseelection.Lock { return leaseelection.LeaseLock{Store: client} }
	if s.LeaseKind == contract.LeaseKindMultiClusterLease {
		multiClusterClient := leaseelection.NewMultiClusterClient(api)
		newLock = func() leaseelection.Lock { return &leaseelection.MultiClusterLeaseLock{Store: multiClusterClient} }
	}
	for i, spec := range specs {
		e := &runningElection{index: i, spec: spec, log: log}
		if len(specs) > 1 {
			e.log = log.WithValues("election", spec.Name)
		}
		e.elector, err = leaseelection.NewElector(leaseelection.Config{
			Lock:            newLock(),
			Namespace:       s.PodNamespace,
			Name:            spec.Lease,
			Identity:        s.Identity(),
			Timing:          spec.Timing(),
			ClockSkewMargin: s.ClockSkewMargin,
			OnChange:        func(status lease.Status) { a.onChange(e, status) },
			OnTakeover:      func(kind lease.Takeover) { e.metrics.tookOver(kind) },
			Log:             e.log,
			Wake:            a.wake,
			WakeURL:         wakeURL,
			PeerClient:      peerClient,
		})
		if err != nil {
			return fail(err)
		}
		e.metrics = newMetrics(a.registry, s.PodNamespace+"/"+spec.Lease, spec.Name,
			lease.TakeoverBudget(spec.Timing().LeaseDuration, s.ClockSkewMargin), e.elector.LastRenewal)
		registerFencingToken(a.registry, s.PodNamespace+"/"+spec.Lease, spec.Name, func() int64 { return e.elector.Status().FencingToken })
		registerWatching(a.registry, s.PodNamespace+"/"+spec.Lease, spec.Name, e.elector.Watching)
		if s.LeaseKind == contract.LeaseKindMultiClusterLease {
			registerLocalCandidate(a.registry, s.PodNamespace+"/"+spec.Lease, spec.Name, func() bool { return e.elector.Status().Holder == s.Identity() })
		}
		a.elections = append(a.elections, e)
	}
	a.events = newEventHub(a.named())
	if s.OnLoss == OnLossRestart {
		a.restarting = a.election(s.OnLossElection)
	}
	if s.Gate.Upstream != "" {
		if err := a.newGate(); err != nil {
			return fail(err)
		}
	}
	return a, nil
}

// newGate builds the mutation gate in front of the app, following the leadership of its election.
func (a *Agent) newGate() error {
	s := a.settings.Gate
	a.gated = a.election(s.Election)
	policy, err := rules.NewPolicy(s.Methods, s.GRPCMethods)
	if err != nil {
		return err
	}
	if a.gateProxy, err = gate.New(s.Upstream, policy, a.gated.elector, a.registry, s.BodyTimeout); err != nil {
		return err
	}
	listener, err := gate.Listen(s.Listen)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", contract.EnvGateListen, s.Listen, err)
	}
	a.gate, a.gateListener = gateServer(a.gateProxy, listener, gateLimits)
	return nil
}

// gateServer is the gate's server on listener, bounded by limits.
func gateServer(handler http.Handler, listener net.Listener, limits portLimits) (*http.Server, *limitListener) {
	server, limited := boundedServer(handler, listener, limits)
	// HTTP/1.1 for plain clients, cleartext HTTP/2 for gRPC: the pod's traffic is not TLS here, or the
	// gate could not read the method.
	server.Protocols = new(http.Protocols)
	server.Protocols.SetHTTP1(true)
	server.Protocols.SetUnencryptedHTTP2(true)
	return server, limited
}

// endpointsServer is the server of the agent's endpoints on listener, bounded by limits. They take no
// request body: a request with one is answered and its connection closed, without reading the body,
// which net/http would otherwise read (up to 256 KiB, with no deadline) after the answer, so that a
// body trickled byte by byte cannot hold the connection.
func endpointsServer(handler http.Handler, listener net.Listener, limits portLimits) (*http.Server, *limitListener) {
	server, limited := boundedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
			w.Header().Set("Connection", "close")
			http.Error(w, "the agent's endpoints take no request body", http.StatusRequestEntityTooLarge)
			return
		}
		handler.ServeHTTP(w, r)
	}), listener, limits)
	// Cleartext HTTP/2 beside HTTP/1.1, so that a follower agent's waits on this one share a connection;
	// the connection bounds count connections, and this bounds what one of them carries (Go's default is
	// 250 streams): those waits, one per election, with room.
	server.Protocols = new(http.Protocols)
	server.Protocols.SetHTTP1(true)
	server.Protocols.SetUnencryptedHTTP2(true)
	server.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreamsPerConnection}
	return server, limited
}

// maxStreamsPerConnection bounds the requests one HTTP/2 connection to the agent's endpoints carries at
// once.
const maxStreamsPerConnection = 32

// boundedServer serves handler on listener within limits (see portLimits).
func boundedServer(handler http.Handler, listener net.Listener, limits portLimits) (*http.Server, *limitListener) {
	limited, ok := listener.(*limitListener)
	if !ok {
		limited = newLimitListener(listener, limits)
	}
	server := &http.Server{Handler: handler}
	limits.configure(server, limited)
	return server, limited
}

// election is the running election of this name, or the only one when name is empty (LoadSettings
// checked that it exists).
func (a *Agent) election(name string) *runningElection {
	if name == "" {
		return a.elections[0]
	}
	for _, e := range a.elections {
		if e.spec.Name == name {
			return e
		}
	}
	return nil
}

// named is the elections as the endpoints serve them.
func (a *Agent) named() []namedElection {
	named := make([]namedElection, len(a.elections))
	for i, e := range a.elections {
		named[i] = namedElection{name: e.spec.Name, readiness: e.readiness(), election: e.elector}
	}
	return named
}

func (e *runningElection) readiness() Readiness {
	if e.spec.Readiness == string(ReadinessLeader) {
		return ReadinessLeader
	}
	return ReadinessHealth
}

// Run serves the endpoints and takes part in every election until ctx ends (SIGTERM), then stops
// leading and releases the leases and returns.
func (a *Agent) Run(ctx context.Context) error {
	server, _ := endpointsServer(newMux(a.named(), a.events, a.wake, a.registry), a.listener, agentLimits)
	served := make(chan error, 2)
	go func() { served <- server.Serve(a.listener) }()
	if a.gate != nil {
		go func() { served <- a.gate.Serve(a.gateListener) }()
		a.log.Info("Mutation gate started", "listen", a.gateListener.Addr().String(), "upstream", a.settings.Gate.Upstream,
			"election", a.gated.spec.Name, "methods", a.settings.Gate.Methods, "grpcMethods", a.settings.Gate.GRPCMethods)
	}
	for _, e := range a.elections {
		t := e.spec.Timing()
		e.log.Info("Agent started", "identity", a.settings.Identity(),
			"lease", a.settings.PodNamespace+"/"+e.spec.Lease, "listen", a.listener.Addr().String(), "readiness", e.readiness(),
			"leaseDuration", t.LeaseDuration, "renewDeadline", t.RenewDeadline, "retryPeriod", t.RetryPeriod,
			"clockSkewMargin", a.settings.ClockSkewMargin)
	}
	a.writeStatus()

	electionCtx, stopElections := context.WithCancel(ctx)
	var elected sync.WaitGroup
	for _, e := range a.elections {
		elected.Go(func() { e.elector.Run(electionCtx) })
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("serving %s: %w", a.listener.Addr(), err)
	}
	a.stopping.Store(true)
	stopElections()
	elected.Wait() // every lease is released before the endpoints go away
	a.wake.Close() // every wait is answered (each release did), so Shutdown finds their streams done
	// The event streams end once they have sent the last events (stopped), so Shutdown finds their
	// connections idle.
	a.events.close()

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	servers := []*http.Server{server}
	if a.gate != nil {
		servers = append(servers, a.gate)
	}
	for _, srv := range servers {
		if shutdownErr := srv.Shutdown(shutdownCtx); shutdownErr != nil && !errors.Is(shutdownErr, context.DeadlineExceeded) {
			err = errors.Join(err, shutdownErr)
		}
	}
	if a.gateProxy != nil {
		a.gateProxy.Close()
	}
	return err
}

// onChange publishes a new election status everywhere the app may look. It runs on that election's loop.
func (a *Agent) onChange(e *runningElection, s lease.Status) {
	lost := e.metrics.leading && !s.IsLeader
	e.metrics.observe(s.IsLeader)
	a.events.publish(e.index, s)
	a.writeStatus()
	if lost && e == a.restarting && !a.stopping.Load() {
		a.evicting.Do(func() { go a.evictSelf(e) })
	}
	if lost && e == a.gated {
		// Mutations are refused from this instant (the gate asks the elector on every request), and
		// those whose bodies are still streaming to the app are cut; close the idle keep-alive
		// connections too, so clients reconnect and find the new leader.
		a.gateProxy.Lost()
		a.gate.SetKeepAlivesEnabled(false)
		a.gate.SetKeepAlivesEnabled(true)
	}
}

// evictSelf evicts this pod through the Eviction API, retrying every retry period while a
// PodDisruptionBudget or the API server refuses, until the agent stops. The workload's controller
// replaces the pod, and the replacement's app waits for leadership (start: leader). The webhook admits a
// pod's eviction of itself only, and only once it no longer holds the lease.
func (a *Agent) evictSelf(e *runningElection) {
	e.log.Info("Lost the lease; evicting this pod so that it restarts as a follower (on-loss: restart)",
		"lease", a.settings.PodNamespace+"/"+e.spec.Lease, "pod", a.settings.PodName)
	retry := e.spec.Timing().RetryPeriod
	for !a.stopping.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), e.spec.Timing().RenewDeadline)
		err := a.client.EvictPod(ctx, a.settings.PodNamespace, a.settings.PodName)
		cancel()
		if err == nil {
			e.log.Info("Evicted this pod", "pod", a.settings.PodName)
			return
		}
		wait := retry
		if retryAfter, _ := kubeclient.RetryAfterOf(err); retryAfter > wait {
			wait = retryAfter
		}
		e.log.Error(err, "Evicting this pod failed; retrying", "pod", a.settings.PodName, "retryIn", wait)
		time.Sleep(wait)
	}
}

func (a *Agent) writeStatus() {
	if a.settings.StatusFile == "" {
		return
	}
	a.statusMu.Lock()
	defer a.statusMu.Unlock()
	if err := writeStatusFile(a.settings.StatusFile, report(a.named())); err != nil {
		a.log.Error(err, "Writing the status file failed", "path", a.settings.StatusFile)
	}
}

// apiBurstPerElection is how many requests an election may send at once under the client's rate limit:
// the most it sends back to back is at its start (a list, a watch, a take, a read after a lost race,
// another take) or on a renewal that conflicts (the renewal, a read, the renewal again).
const apiBurstPerElection = 5

// apiRateLimit sizes the agent's client-side rate limit for its elections: twice the steady rate (one
// renewal per retry period for each election it leads; a follower's watch sends nothing while the
// lease is renewed), so that it never binds in steady state, with apiBurstPerElection for each. What it
// caps is a storm: a watch failing as fast as its backoff allows while the follower reads the lease
// before each attempt, a loop of conflicts. At the default timing (retry period 2 s) one election gets
// 1 request/s and a burst of 5; client-go gives every client 5/s and 10.
func apiRateLimit(specs []lease.ElectionSpec) (qps float64, burst int) {
	for _, spec := range specs {
		qps += 2 / spec.Timing().RetryPeriod.Seconds()
	}
	return qps, apiBurstPerElection * len(specs)
}

// apiClient is the API client from KUBECONFIG when set, the pod's in-cluster config otherwise.
func apiClient(kubeconfig string) (*kubeclient.Client, error) {
	var config *kubeclient.Config
	var err error
	if kubeconfig != "" {
		if config, err = kubeclient.LoadKubeconfig(kubeconfig); err != nil {
			return nil, fmt.Errorf("KUBECONFIG=%s: %w", kubeconfig, err)
		}
	} else if config, err = kubeclient.InCluster(); err != nil {
		return nil, fmt.Errorf("no cluster access: set KUBECONFIG (--kubeconfig) outside a pod: %w", err)
	}
	config.UserAgent = "leasegate-agent"
	client, err := kubeclient.New(config)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	return client, nil
}
