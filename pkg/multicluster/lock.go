// Package multicluster is a client-go resourcelock.Interface over a MultiClusterLease, so any client-go or
// controller-runtime controller elects one leader across clusters by swapping its lock:
//
//	lock, err := multicluster.NewLock(cfg, "shop", "orders-controller", multicluster.LockConfig{Identity: id})
//	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{Lock: lock, ...})
//
// The replicas in one cluster elect a local candidate on the MultiClusterLease's spec, exactly as on a
// Lease. leasegate's election controller in each cluster contends on the global backend for its candidate
// and confirms each of the candidate's heartbeats in status. Create and Update signal, then confirm: they
// write the spec, then wait (bounded) until status answers that write's generation, and succeed only if it
// names this candidate as global leader, with time to spare. Returning before that would let two clusters
// lead; failing a confirmed renewal would make a healthy leader churn.
//
// Get returns the local election (spec). With client-go, leadership is what OnStartedLeading and the
// cancellation of its context say; the elector's IsLeader reports the local candidate, which may be
// waiting for the global lease.
package multicluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// LockConfig configures a Lock.
type LockConfig struct {
	// Identity is this candidate's unique identity, as in resourcelock.ResourceLockConfig.
	Identity string
	// RenewDeadline and RetryPeriod are the LeaderElectionConfig's (default client-go's 10s and 2s). A
	// renewal is confirmed only if the global term outlasts them: client-go stops acting at most a
	// retry period plus a renew deadline after its last successful renewal.
	RenewDeadline, RetryPeriod time.Duration
	// ConfirmTimeout bounds the wait for the controller's answer (default: half the renew deadline).
	ConfirmTimeout time.Duration
	// EventRecorder records leadership events, as resourcelock's (optional).
	EventRecorder resourcelock.EventRecorder
	// Clock is the candidate's clock (tests skew it); nil is the real one.
	Clock clock.PassiveClock
}

// Lock is a resourcelock.Interface over the MultiClusterLease namespace/name.
type Lock struct {
	namespace, name string
	client          rest.Interface
	params          runtime.ParameterCodec
	cfg             LockConfig

	mu      sync.Mutex
	current *v1alpha1.MultiClusterLease
	// until is when the last confirmed term lets this candidate act no longer.
	until time.Time
}

var _ resourcelock.Interface = (*Lock)(nil)

// NewLock returns the lock on namespace/name for a candidate named cfg.Identity.
func NewLock(config *rest.Config, namespace, name string, cfg LockConfig) (*Lock, error) {
	if cfg.Identity == "" || namespace == "" || name == "" {
		return nil, errors.New("multicluster: a lock needs a namespace, a name and an identity")
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.ConfirmTimeout == 0 {
		cfg.ConfirmTimeout = cfg.RenewDeadline / 2
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	config = rest.CopyConfig(config)
	config.APIPath = "/apis"
	config.GroupVersion = &v1alpha1.GroupVersion
	config.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, err
	}
	return &Lock{namespace: namespace, name: name, client: client, params: runtime.NewParameterCodec(scheme), cfg: cfg}, nil
}

// Get implements resourcelock.Interface: the local election's record.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	mcl := &v1alpha1.MultiClusterLease{}
	if err := l.client.Get().Namespace(l.namespace).Resource(v1alpha1.Resource).Name(l.name).Do(ctx).Into(mcl); err != nil {
		return nil, nil, err
	}
	l.setCurrent(mcl)
	record := recordOf(mcl.Spec)
	raw, err := json.Marshal(record)
	return &record, raw, err
}

// Create implements resourcelock.Interface: it creates the MultiClusterLease naming this candidate, then
// waits for the controller's answer.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	started := l.cfg.Clock.Now()
	created := &v1alpha1.MultiClusterLease{}
	err := l.client.Post().Namespace(l.namespace).Resource(v1alpha1.Resource).Body(&v1alpha1.MultiClusterLease{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace, Name: l.name},
		Spec:       specOf(ler),
	}).Do(ctx).Into(created)
	if err != nil {
		return err
	}
	l.setCurrent(created)
	return l.confirm(ctx, created, started)
}

// Update implements resourcelock.Interface: it writes the spec with a compare-and-swap on the version Get
// read, then waits for the controller's answer.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	current := l.current
	l.mu.Unlock()
	if current == nil {
		return errors.New("multicluster: Update before Get")
	}
	next := current.DeepCopy()
	next.Spec = specOf(ler)
	started := l.cfg.Clock.Now()
	updated := &v1alpha1.MultiClusterLease{}
	if err := l.client.Put().Namespace(l.namespace).Resource(v1alpha1.Resource).Name(l.name).Body(next).Do(ctx).Into(updated); err != nil {
		return err
	}
	l.setCurrent(updated)
	if ler.HolderIdentity == "" {
		// A release (ReleaseOnCancel): this candidate has stopped; there is nothing to confirm.
		return nil
	}
	return l.confirm(ctx, updated, started)
}

// ValidUntil is when the last confirmed term stops letting this candidate act, on its own clock: a
// controller that wants to check before a sensitive write compares it with time.Now.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// RecordEvent implements resourcelock.Interface.
func (l *Lock) RecordEvent(s string) {
	if l.cfg.EventRecorder == nil {
		return
	}
	l.mu.Lock()
	current := l.current
	l.mu.Unlock()
	if current != nil {
		l.cfg.EventRecorder.Eventf(current, "Normal", "LeaderElection", "%s %s", l.cfg.Identity, s)
	}
}

// Identity implements resourcelock.Interface.
func (l *Lock) Identity() string { return l.cfg.Identity }

// Describe implements resourcelock.Interface.
func (l *Lock) Describe() string { return l.namespace + "/" + l.name + " (MultiClusterLease)" }

// NotConfirmedError says the controller answered a heartbeat naming someone else as global leader, or
// did not answer in time. client-go treats it as a failed acquisition or renewal.
type NotConfirmedError struct{ Reason string }

func (e *NotConfirmedError) Error() string { return "multicluster: not the global leader: " + e.Reason }

// confirm waits until the status confirms written's generation. started is when the write began: the
// controller confirms with a backend renewal sent after it saw the write, so the term lasts at least
// ConfirmedFor from started.
//
// An answer naming another leader does not end the wait: the controller may win for this candidate a
// moment later (the other cluster's term ended), and a candidate still waiting takes over at once instead
// of at its next retry. Only the timeout ends it.
//
// A term won late in the wait is measured from a heartbeat written too long ago for client-go's rule (a
// retry period plus a renew deadline from now). The term is this candidate's all the same, so it writes
// another heartbeat at once and waits for that one's confirmation, which the controller sends with a
// backend renewal made after it: the term then counts from now, one round trip later, instead of being
// refused until the next retry. That round has a confirm timeout of its own for the write and another for
// the answer: a confirmation that came at the end of the first wait must not leave the heartbeat no time
// (the term counts from the new write whatever the round takes, so its length bounds only the wait). It
// happens once: a second late confirmation means a slow controller or API server, not bad luck.
func (l *Lock) confirm(ctx context.Context, written *v1alpha1.MultiClusterLease, started time.Time) error {
	need := l.cfg.RetryPeriod + l.cfg.RenewDeadline
	grants := v1alpha1.ConfirmedFor(ptr.Deref(written.Spec.LeaseDurationSeconds, 0))
	if grants < need {
		return &NotConfirmedError{Reason: fmt.Sprintf("a confirmed heartbeat lets a candidate act for %s (%s), less than a retry period plus a renew deadline (%s); lengthen the lease duration, or shorten the renew deadline or the retry period",
			grants, confirmedShare, need)}
	}
	for afresh := false; ; afresh = true {
		status, err := l.awaitConfirmationWithin(ctx, written)
		if status == nil {
			return &NotConfirmedError{Reason: fmt.Sprintf("the election controller did not answer generation %d within %s (%v)",
				written.Generation, l.cfg.ConfirmTimeout, err)}
		}
		if confirmed, _ := status.Confirms(l.cfg.Identity, written.Generation); !confirmed {
			who := "nobody"
			if status.GlobalHolder != "" {
				who = fmt.Sprintf("%s of cluster %s (term %d)", status.GlobalHolder, status.HolderCluster, status.FencingToken)
			}
			return &NotConfirmedError{Reason: who + " leads"}
		}
		until := started.Add(grants)
		now := l.cfg.Clock.Now()
		if !now.Add(need).After(until) {
			l.mu.Lock()
			l.until = until
			l.mu.Unlock()
			return nil
		}
		if afresh {
			return &NotConfirmedError{Reason: fmt.Sprintf("the election controller confirmed generation %d, written afresh for a term won late, %s after its write, later than the %s a confirmation may take (%s less a retry period and a renew deadline): the controller or the API server is slow",
				written.Generation, now.Sub(started), grants-need, confirmedShare)}
		}
		again, startedAgain, err := l.heartbeatWithin(ctx)
		if err != nil {
			return &NotConfirmedError{Reason: fmt.Sprintf("the election controller confirmed generation %d %s after its write, later than the %s a confirmation may take (%s less a retry period and a renew deadline), and the heartbeat written to be confirmed afresh failed: %v",
				written.Generation, now.Sub(started), grants-need, confirmedShare, err)}
		}
		written, started = again, startedAgain
	}
}

// confirmedShare says what share of the lease duration ConfirmedFor is, for the errors that quote it.
var confirmedShare = fmt.Sprintf("%g%% of the lease duration", 100*(1-v1alpha1.MaxClockRateError))

// awaitConfirmationWithin is awaitConfirmation bounded by the confirm timeout.
func (l *Lock) awaitConfirmationWithin(ctx context.Context, written *v1alpha1.MultiClusterLease) (*v1alpha1.MultiClusterLeaseStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.ConfirmTimeout)
	defer cancel()
	return l.awaitConfirmation(ctx, written)
}

// heartbeatWithin is heartbeat bounded by the confirm timeout.
func (l *Lock) heartbeatWithin(ctx context.Context) (*v1alpha1.MultiClusterLease, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.ConfirmTimeout)
	defer cancel()
	return l.heartbeat(ctx)
}

// heartbeat writes the spec again, as it stands, with a new renewTime: a new generation for the
// controller to confirm. It returns the written object and when the write began.
func (l *Lock) heartbeat(ctx context.Context) (*v1alpha1.MultiClusterLease, time.Time, error) {
	l.mu.Lock()
	next := l.current.DeepCopy()
	l.mu.Unlock()
	if ptr.Deref(next.Spec.HolderIdentity, "") != l.cfg.Identity {
		return nil, time.Time{}, fmt.Errorf("the spec names %q now", ptr.Deref(next.Spec.HolderIdentity, ""))
	}
	started := l.cfg.Clock.Now()
	next.Spec.RenewTime = &metav1.MicroTime{Time: started}
	updated := &v1alpha1.MultiClusterLease{}
	if err := l.client.Put().Namespace(l.namespace).Resource(v1alpha1.Resource).Name(l.name).Body(next).Do(ctx).Into(updated); err != nil {
		return nil, time.Time{}, err
	}
	l.setCurrent(updated)
	return updated, started, nil
}

// awaitConfirmation watches the object from written's version until its status confirms written's
// generation, or ctx ends. It returns the last status that answered that generation (nil if none did).
func (l *Lock) awaitConfirmation(ctx context.Context, written *v1alpha1.MultiClusterLease) (*v1alpha1.MultiClusterLeaseStatus, error) {
	var answer *v1alpha1.MultiClusterLeaseStatus
	if confirmed, decided := written.Status.Confirms(l.cfg.Identity, written.Generation); decided {
		if answer = &written.Status; confirmed {
			return answer, nil
		}
	}
	opts := metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", l.name).String(),
		ResourceVersion: written.ResourceVersion,
		Watch:           true,
	}
	w, err := l.client.Get().Namespace(l.namespace).Resource(v1alpha1.Resource).VersionedParams(&opts, l.params).Watch(ctx)
	if err != nil {
		return answer, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return answer, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return answer, errors.New("the watch closed")
			}
			if ev.Type == watch.Deleted {
				return answer, apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource(v1alpha1.Resource).GroupResource(), l.name)
			}
			mcl, isMCL := ev.Object.(*v1alpha1.MultiClusterLease)
			if !isMCL {
				continue
			}
			l.setCurrent(mcl)
			if confirmed, decided := mcl.Status.Confirms(l.cfg.Identity, written.Generation); decided {
				if answer = &mcl.Status; confirmed {
					return answer, nil
				}
			}
		}
	}
}

// setCurrent keeps the newest version seen as the base of the next compare-and-swap.
func (l *Lock) setCurrent(mcl *v1alpha1.MultiClusterLease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil || l.current.ResourceVersion != mcl.ResourceVersion {
		l.current = mcl
	}
}

func recordOf(spec v1alpha1.MultiClusterLeaseSpec) resourcelock.LeaderElectionRecord {
	r := resourcelock.LeaderElectionRecord{
		HolderIdentity:       ptr.Deref(spec.HolderIdentity, ""),
		LeaseDurationSeconds: int(ptr.Deref(spec.LeaseDurationSeconds, 0)),
		LeaderTransitions:    int(ptr.Deref(spec.LeaseTransitions, 0)),
	}
	if spec.AcquireTime != nil {
		r.AcquireTime = metav1.NewTime(spec.AcquireTime.Time)
	}
	if spec.RenewTime != nil {
		r.RenewTime = metav1.NewTime(spec.RenewTime.Time)
	}
	return r
}

func specOf(r resourcelock.LeaderElectionRecord) v1alpha1.MultiClusterLeaseSpec {
	return v1alpha1.MultiClusterLeaseSpec{
		HolderIdentity:       ptr.To(r.HolderIdentity),
		LeaseDurationSeconds: ptr.To(int32(r.LeaseDurationSeconds)),
		AcquireTime:          &metav1.MicroTime{Time: r.AcquireTime.Time},
		RenewTime:            &metav1.MicroTime{Time: r.RenewTime.Time},
		LeaseTransitions:     ptr.To(int32(r.LeaderTransitions)),
	}
}
