package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/leaseelection"
	"github.com/leasegate/leasegate/test/framework/process"
)

// The electors a row can run: the agent's own, and client-go's leaderelection with its LeaseLock, the
// standard a platform team compares it with.
const (
	clientAgent    = "agent"
	clientClientGo = "client-go"
)

// candidate is one elector of either client, as the harness watches and breaks it.
type candidate interface {
	// leads is whether it says it leads, as its app would be told.
	leads() bool
	// wrote is when its last write of its lease (an acquisition or a renewal) succeeded.
	wrote() time.Time
	// synced is whether it has read its lease at least once.
	synced() bool
	// crash makes every later write fail, so that it neither renews nor releases, as a SIGKILLed process.
	crash()
	// stop ends it and waits until it has.
	stop()
}

// writes is what the electors of a row share: the renewals' latencies, every successful lease write, and
// every lease write the API server answered, by outcome, with how long each took.
type writes struct {
	renewals *latencies
	count    atomic.Int64
	outcomes writeOutcomes
}

// writeOutcomes counts the lease writes the API server answered, by answer, and times them all. Each
// client's failures are its own to log (client-go's are not the harness's to see), so the comparison of
// the two rests on these: client-go's REST client retries a 429 inside the request, after the server's
// Retry-After, up to 10 times, so its writes are never refused 429 but some take that long to succeed.
type writeOutcomes struct {
	ok, conflicts, shed atomic.Int64
	took                latencies
}

func (o *writeOutcomes) add(err error, took time.Duration) {
	switch {
	case err == nil:
		o.ok.Add(1)
	case kubeclient.IsConflict(err) || apierrors.IsConflict(err):
		o.conflicts.Add(1)
	case tooManyRequests(err):
		o.shed.Add(1)
	default:
		return // not answered (a connection cut, a request not sent within a Retry-After), or refused otherwise
	}
	o.took.add(took)
}

// tooManyRequests: the API server answered 429, as API Priority and Fairness does with a plain-text body
// (no Status, so no reason), or a Status whose reason says so.
func tooManyRequests(err error) bool {
	var status *kubeclient.StatusError
	return errors.As(err, &status) && status.Status.Code == http.StatusTooManyRequests || apierrors.IsTooManyRequests(err)
}

// writeCounts is writeOutcomes at one instant.
type writeCounts struct{ ok, conflicts, shed int64 }

func (o *writeOutcomes) counts() writeCounts {
	return writeCounts{o.ok.Load(), o.conflicts.Load(), o.shed.Load()}
}

func (c writeCounts) since(before writeCounts) writeCounts {
	return writeCounts{c.ok - before.ok, c.conflicts - before.conflicts, c.shed - before.shed}
}

// lastWrite is a candidate's last successful write, and its crash switch.
type lastWrite struct {
	at      atomic.Int64 // unix nanoseconds
	read    atomic.Bool
	crashed atomic.Bool
}

func (l *lastWrite) wrote() time.Time {
	if ns := l.at.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (l *lastWrite) crash() { l.crashed.Store(true) }

var errCrashed = errors.New("crashed")

// write runs a write unless crashed, timing it and counting it when it succeeds.
func (l *lastWrite) write(w *writes, do func() error) error {
	if l.crashed.Load() {
		return errCrashed
	}
	start := time.Now()
	err := do()
	w.outcomes.add(err, time.Since(start))
	if err != nil {
		return err
	}
	w.renewals.add(time.Since(start))
	w.count.Add(1)
	l.at.Store(time.Now().UnixNano())
	return nil
}

// agentElector is the agent's leaseelection.Elector on the agent's Lease client.
type agentElector struct {
	*leaseelection.Elector
	*lastWrite
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *agentElector) leads() bool  { return e.Status().IsLeader }
func (e *agentElector) synced() bool { return e.Synced() }
func (e *agentElector) stop()        { e.cancel(); <-e.done }

// agentStore is the agent's Lease client with its writes recorded and breakable.
type agentStore struct {
	*leaseelection.Client
	last   *lastWrite
	writes *writes
}

func (s *agentStore) Update(ctx context.Context, l *leaseelection.Lease) (updated *leaseelection.Lease, err error) {
	err = s.last.write(s.writes, func() error { updated, err = s.Client.Update(ctx, l); return err })
	return updated, err
}

func (s *agentStore) Create(ctx context.Context, l *leaseelection.Lease) (created *leaseelection.Lease, err error) {
	err = s.last.write(s.writes, func() error { created, err = s.Client.Create(ctx, l); return err })
	return created, err
}

// clientGoElector runs client-go's LeaderElector, again each time it returns, as a controller's container
// is restarted after it lost its lease (client-go's examples exit then).
type clientGoElector struct {
	*lastWrite
	// term is the number of the leadership term it is acting in, 0 while it is not: client-go tells its
	// app by OnStartedLeading's context, which ends when leadership does.
	term   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *clientGoElector) leads() bool  { return e.term.Load() != 0 }
func (e *clientGoElector) synced() bool { return e.read.Load() }
func (e *clientGoElector) stop()        { e.cancel(); <-e.done }

// recordedLock is client-go's LeaseLock with its writes recorded and breakable.
type recordedLock struct {
	resourcelock.Interface
	last   *lastWrite
	writes *writes
	// log takes the requests that failed for want of a file descriptor in this process: client-go's
	// elector logs through klog, which the harness discards, and these say the row measured the harness.
	log logr.Logger
}

func (l *recordedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.last.read.Store(true)
	}
	return record, raw, l.outOfFiles(err, "Could not read the lease")
}

func (l *recordedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.outOfFiles(l.last.write(l.writes, func() error { return l.Interface.Create(ctx, r) }), "Could not create the lease")
}

func (l *recordedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.outOfFiles(l.last.write(l.writes, func() error { return l.Interface.Update(ctx, r) }), "Could not update the lease")
}

// outOfFiles reports err to the row's failures when this process ran out of file descriptors for it,
// and returns it.
func (l *recordedLock) outOfFiles(err error, msg string) error {
	if outOfFiles(err) {
		l.log.Error(err, msg)
	}
	return err
}

// startCandidate starts candidate c of lease i of the row, as pod "w<i>-<c>" of its namespace.
func startCandidate(ctx context.Context, key rowKey, pods *process.PodClients, i, c int, timing lease.Timing, w *writes, log logr.Logger) (candidate, error) {
	namespace, leaseName := key.namespace(i), fmt.Sprintf("lease-%d", i%leasesPerNamespace)
	podName, podUID := fmt.Sprintf("w%d-%d", i, c), fmt.Sprintf("uid-%s-%d-%d-%d-%d", key.client, key.run, key.leases, i, c)
	identity := lease.Identity(podName, podUID)
	runCtx, cancel := context.WithCancel(ctx)
	last := &lastWrite{}
	if key.client == clientClientGo {
		lock := &recordedLock{Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: leaseName},
			Client:     pods.ClientGoFor(namespace, "default", podName, podUID),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		}, last: last, writes: w, log: log}
		e := &clientGoElector{lastWrite: last, cancel: cancel, done: make(chan struct{})}
		var terms atomic.Int64
		config := leaderelection.LeaderElectionConfig{
			Lock: lock, Name: leaseName,
			LeaseDuration: timing.LeaseDuration, RenewDeadline: timing.RenewDeadline, RetryPeriod: timing.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leading context.Context) {
					term := terms.Add(1)
					e.term.Store(term)
					<-leading.Done()
					e.term.CompareAndSwap(term, 0) // a later term may have begun before this one's news
				},
				OnStoppedLeading: func() {},
			},
		}
		le, err := leaderelection.NewLeaderElector(config)
		if err != nil {
			cancel()
			return nil, err
		}
		go func() {
			defer close(e.done)
			for runCtx.Err() == nil {
				le.Run(runCtx)
				if le, err = leaderelection.NewLeaderElector(config); err != nil {
					return // the same config was accepted above
				}
			}
		}()
		return e, nil
	}
	api := pods.For(namespace, "default", podName, podUID)
	// The rate limit the agent gives its client for one election (internal/agent's apiRateLimit): twice
	// its steady renewals, and a burst of 5.
	api.SetRateLimit(2/timing.RetryPeriod.Seconds(), 5)
	store := &agentStore{Client: leaseelection.NewClient(api), last: last, writes: w}
	peers, err := agentPeers()
	if err != nil {
		cancel()
		return nil, err
	}
	elector, err := leaseelection.NewElector(leaseelection.Config{
		Lock: leaseelection.LeaseLock{Store: store}, Namespace: namespace, Name: leaseName, Identity: identity,
		Timing: timing, ClockSkewMargin: lease.DefaultClockSkewMargin, Log: log,
		Wake: peers.hub, WakeURL: peers.url, PeerClient: peers.client,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	e := &agentElector{Elector: elector, lastWrite: last, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		elector.Run(runCtx)
	}()
	return e, nil
}

// latencies collects durations while on.
type latencies struct {
	mu sync.Mutex
	on bool
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.d = append(l.d, d)
	}
}

// restart forgets the durations collected so far and collects from now on.
func (l *latencies) restart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on, l.d = true, l.d[:0]
}

func (l *latencies) record(on bool) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
	return slices.Clone(l.d)
}

// peers is where the agent electors answer their followers' waits, as each agent does on its pod's
// endpoints: here one loopback server, with cleartext HTTP/2 as the agent's, shared by every elector of
// the run, and one client for their waits (an agent's elections share one too).
type peers struct {
	hub    *leaseelection.WakeHub
	url    string
	client *http.Client
}

var agentPeers = sync.OnceValues(func() (*peers, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hub := leaseelection.NewWakeHub()
	mux := http.NewServeMux()
	mux.Handle("GET "+contract.AgentWakePath, hub)
	server := &http.Server{Handler: mux, Protocols: new(http.Protocols), ReadHeaderTimeout: 5 * time.Second}
	server.Protocols.SetHTTP1(true)
	server.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = server.Serve(listener) }()
	return &peers{hub: hub, url: leaseelection.HolderURL("127.0.0.1", listener.Addr().(*net.TCPAddr).Port), client: leaseelection.NewPeerClient()}, nil
})
