package globalelection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// requeueIf reconciles again at once: after a term ended, to campaign for a candidate that is still live.
func requeueIf(again bool) ctrl.Result {
	if !again {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: time.Millisecond}
}

// backendTimeout bounds one call to the backend, so that a black-holed path is noticed, and reported,
// well within any lease duration.
const backendTimeout = time.Second

// Controller is the election controller of one cluster. For each MultiClusterLease it contends on the
// backend on behalf of the local candidate (spec.holderIdentity) while that candidate renews, confirms the
// term on every heartbeat, gives the term up when the candidate stops, and mirrors the global outcome into
// status. It runs on the elected replica of leasegate-webhook: one writer of status per cluster.
type Controller struct {
	Client  client.Client
	Backend Backend
	// Cluster names this cluster in the backend and in every cluster's status.holderCluster.
	Cluster string
	// ClockSkewMargin is the skew allowed between clocks inside this cluster; validUntil leaves it out.
	ClockSkewMargin time.Duration
	// Clock is the controller's clock (tests skew it); nil is the real one.
	Clock clock.PassiveClock
	Log   logr.Logger

	mu        sync.Mutex
	elections map[types.NamespacedName]*election
	changed   chan event.GenericEvent
}

// election is what the controller remembers of one MultiClusterLease between reconciles.
type election struct {
	// term is the backend term this cluster holds for its candidate, nil when it holds none.
	term *Term
	// The candidate's liveness, timed on this controller's clock from when it last saw the spec change,
	// as client-go's elector does: never from the renewTime another machine wrote.
	holder               string
	renewTime, changedAt time.Time
	// yieldUntil: this cluster ended its own term (its candidate released or fell silent) and leaves the
	// free key to the other clusters until then, so that a graceful handover goes to a waiting cluster
	// whenever there is one, not to whichever of it and a local follower claims first.
	yieldUntil time.Time
}

// yieldFor is how long a cluster that ended its own term leaves the key to the other clusters: long
// enough for a waiting cluster's controller to see the key go and claim it (a watch event and three
// backend round trips), short against the term (a tenth of the TTL, at most one backend call's bound),
// since a release with no other cluster waiting hands over within the releasing cluster only after it.
func yieldFor(ttl time.Duration) time.Duration { return min(ttl/10, backendTimeout) }

// mayClaim reports whether this cluster may claim a free key at now, or else how long it still yields.
func (e *election) mayClaim(now time.Time) (time.Duration, bool) {
	if wait := e.yieldUntil.Sub(now); wait > 0 {
		return wait, false
	}
	return 0, true
}

// SetupWithManager runs the controller on the manager's elected replica, woken by MultiClusterLease
// events and by the backend's watch.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	c.elections = map[types.NamespacedName]*election{}
	c.changed = make(chan event.GenericEvent, 1024)
	if err := mgr.Add(&backendWatch{c}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("multiclusterlease").
		For(&v1alpha1.MultiClusterLease{}).
		WatchesRawSource(source.Channel(c.changed, &handler.EnqueueRequestForObject{})).
		Complete(c)
}

// Reconcile implements reconcile.Reconciler.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := c.Log.WithValues("multiclusterlease", req.NamespacedName)
	key := Key(req.Namespace, req.Name)
	mcl := &v1alpha1.MultiClusterLease{}
	if err := c.Client.Get(ctx, req.NamespacedName, mcl); err != nil {
		if apierrors.IsNotFound(err) {
			backendReachable.DeleteLabelValues(c.Cluster, req.Namespace, req.Name)
			if e := c.forget(req.NamespacedName); e != nil && e.term != nil {
				c.resign(log, *e.term)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	e := c.election(req.NamespacedName)
	now := c.Clock.Now()
	candidate, ttl := ptr.Deref(mcl.Spec.HolderIdentity, ""), time.Duration(ptr.Deref(mcl.Spec.LeaseDurationSeconds, 0))*time.Second
	if renew := ptr.Deref(mcl.Spec.RenewTime, metav1.MicroTime{}).Time; candidate != e.holder || !renew.Equal(e.renewTime) {
		e.holder, e.renewTime, e.changedAt = candidate, renew, now
	}
	live := candidate != "" && ttl > 0 && now.Sub(e.changedAt) < ttl
	lapse := e.changedAt.Add(ttl).Sub(now)

	if e.term != nil && (!live || e.term.Claim.Holder != candidate) {
		// The candidate stopped (released, or silent for its lease duration) or another local candidate
		// took over: end the term. Status first, so that this cluster's fence stops admitting the old
		// holder before another cluster can win; if status cannot be written, the term is left to expire
		// by its TTL, which is never sooner than the validUntil already published.
		term := *e.term
		e.term, e.yieldUntil = nil, now.Add(yieldFor(ttl))
		if err := c.writeStatus(ctx, mcl, statusNone(mcl)); err != nil {
			log.Error(err, "Could not withdraw the global leader from status; the term ends by its TTL", "holder", term.Claim.Holder)
			return ctrl.Result{}, err
		}
		log.Info("Global term ended", "holder", term.Claim.Holder, "token", term.Token, "candidateLive", live)
		c.resign(log, term)
		// The other clusters see the key go only now: their time to claim it counts from here, or a slow
		// status write and resign (a loaded API server or backend) would eat into it.
		e.yieldUntil = c.Clock.Now().Add(yieldFor(ttl))
		return requeueIf(live), nil
	}

	if e.term != nil {
		if mcl.Status.ObservedGeneration == mcl.Generation && mcl.Status.GlobalHolder == candidate {
			return ctrl.Result{RequeueAfter: lapse}, nil // this heartbeat is confirmed already
		}
		return c.confirm(ctx, log, mcl, e, ttl, lapse)
	}
	if !live {
		return ctrl.Result{}, c.mirror(ctx, log, mcl, key)
	}
	return c.campaign(ctx, log, mcl, e, ttl, lapse)
}

// confirm renews this cluster's term for the heartbeat in mcl's spec and publishes it.
func (c *Controller) confirm(ctx context.Context, log logr.Logger, mcl *v1alpha1.MultiClusterLease, e *election, ttl, lapse time.Duration) (ctrl.Result, error) {
	sent := c.Clock.Now()
	callCtx, cancel := context.WithTimeout(ctx, backendTimeout)
	granted, err := c.Backend.Confirm(callCtx, *e.term)
	cancel()
	switch {
	case errors.Is(err, ErrLost):
		log.Info("Global term lost in the backend", "holder", e.term.Claim.Holder, "token", e.term.Token)
		e.term = nil
		return requeueIf(true), c.writeStatus(ctx, mcl, statusNone(mcl))
	case err != nil:
		// validUntil stays as it was: the leader here stops by itself when it passes.
		log.Error(err, "Could not confirm the global term; the leader here stops at validUntil unless a retry succeeds")
		return ctrl.Result{RequeueAfter: ttl / 10}, c.writeUnreachable(ctx, mcl, err)
	}
	e.term.TTL = granted
	return ctrl.Result{RequeueAfter: lapse}, c.writeStatus(ctx, mcl, c.statusLeading(mcl, *e.term, sent))
}

// campaign contends for the global term on behalf of the live local candidate, or mirrors who holds it.
func (c *Controller) campaign(ctx context.Context, log logr.Logger, mcl *v1alpha1.MultiClusterLease, e *election, ttl, lapse time.Duration) (ctrl.Result, error) {
	candidate, key := *mcl.Spec.HolderIdentity, Key(mcl.Namespace, mcl.Name)
	callCtx, cancel := context.WithTimeout(ctx, backendTimeout)
	defer cancel()
	held, ok, err := c.Backend.Get(callCtx, key)
	if err == nil && ok && held.Claim.Cluster == c.Cluster {
		if held.Claim.Holder == candidate {
			// Our own term, from before this controller started (a restart, a new elected replica):
			// adopt it rather than making the global leader churn.
			log.Info("Adopting this cluster's global term", "holder", candidate, "token", held.Token)
			e.term = &held
			return c.confirm(ctx, log, mcl, e, ttl, lapse)
		}
		// A term of this cluster for a candidate that is no longer ours: withdraw it from status and end it.
		if err := c.writeStatus(ctx, mcl, statusNone(mcl)); err != nil {
			return ctrl.Result{}, err
		}
		c.resign(log, held)
		e.yieldUntil = c.Clock.Now().Add(yieldFor(ttl)) // from when the key went, as above
		return requeueIf(true), nil
	}
	if err == nil && !ok {
		if wait, may := e.mayClaim(c.Clock.Now()); !may {
			// The backend's watch wakes us if another cluster claims meanwhile.
			return ctrl.Result{RequeueAfter: wait}, c.writeStatus(ctx, mcl, statusNone(mcl))
		}
		sent := c.Clock.Now()
		var won bool
		held, won, err = c.Backend.Campaign(callCtx, key, Claim{Cluster: c.Cluster, Holder: candidate}, ttl)
		if err == nil && won {
			log.Info("Won the global term", "holder", candidate, "token", held.Token)
			e.term = &held
			return ctrl.Result{RequeueAfter: lapse}, c.writeStatus(ctx, mcl, c.statusLeading(mcl, held, sent))
		}
	}
	if err != nil {
		log.Error(err, "Could not reach the global backend; no candidate of this cluster can win meanwhile")
		return ctrl.Result{RequeueAfter: ttl / 10}, c.writeUnreachable(ctx, mcl, err)
	}
	// Another cluster leads. The backend's watch wakes us when its key goes; the requeue is a safety net.
	return ctrl.Result{RequeueAfter: ttl}, c.writeStatus(ctx, mcl, c.statusMirror(mcl, held))
}

// mirror publishes who leads globally while this cluster has no live candidate.
func (c *Controller) mirror(ctx context.Context, log logr.Logger, mcl *v1alpha1.MultiClusterLease, key string) error {
	callCtx, cancel := context.WithTimeout(ctx, backendTimeout)
	defer cancel()
	held, ok, err := c.Backend.Get(callCtx, key)
	if err != nil {
		log.V(1).Info("Could not read the global leader", "error", err.Error())
		return c.writeUnreachable(ctx, mcl, err)
	}
	if !ok {
		return c.writeStatus(ctx, mcl, statusNone(mcl))
	}
	return c.writeStatus(ctx, mcl, c.statusMirror(mcl, held))
}

func (c *Controller) resign(log logr.Logger, term Term) {
	ctx, cancel := context.WithTimeout(context.Background(), backendTimeout)
	defer cancel()
	if err := c.Backend.Resign(ctx, term); err != nil {
		log.Error(err, "Could not resign the global term; it ends by its TTL", "token", term.Token)
	}
}

// statusLeading is the status of a term this cluster holds, confirmed by a backend call sent at sent.
// Its validUntil counts from the TTL the backend keeps the term's lease for, or the spec's duration where
// that is shorter: never from a duration the spec gained mid-term, which the backend lease does not have.
// Another cluster can win once the backend lease runs out; by then this cluster's fence must have stopped
// admitting its leader.
func (c *Controller) statusLeading(mcl *v1alpha1.MultiClusterLease, term Term, sent time.Time) v1alpha1.MultiClusterLeaseStatus {
	s := c.statusMirror(mcl, term)
	seconds := min(int64(*mcl.Spec.LeaseDurationSeconds), int64(term.TTL/time.Second))
	validUntil := sent.Add(v1alpha1.ValidFor(int32(seconds), c.ClockSkewMargin))
	s.ValidUntil = &metav1.MicroTime{Time: validUntil}
	return s
}

// statusMirror is the status naming term's holder, without leave to act here.
func (c *Controller) statusMirror(mcl *v1alpha1.MultiClusterLease, term Term) v1alpha1.MultiClusterLeaseStatus {
	s := statusNone(mcl)
	s.GlobalHolder, s.HolderCluster, s.FencingToken = term.Claim.Holder, term.Claim.Cluster, term.Token
	s.AcquireTime = mcl.Status.AcquireTime
	if mcl.Status.FencingToken != term.Token || s.AcquireTime == nil {
		s.AcquireTime = &metav1.MicroTime{Time: c.Clock.Now()}
	}
	return s
}

// statusNone is the status when nobody leads globally (as far as this controller knows).
func statusNone(mcl *v1alpha1.MultiClusterLease) v1alpha1.MultiClusterLeaseStatus {
	return v1alpha1.MultiClusterLeaseStatus{
		ObservedGeneration: mcl.Generation,
		Conditions:         append([]metav1.Condition(nil), mcl.Status.Conditions...),
	}
}

// writeStatus patches mcl's status to s, an outcome the backend answered: the Leading condition derived
// from it, BackendReachable true.
func (c *Controller) writeStatus(ctx context.Context, mcl *v1alpha1.MultiClusterLease, s v1alpha1.MultiClusterLeaseStatus) error {
	leading, reason := metav1.ConditionFalse, "OtherCluster"
	switch {
	case s.ValidUntil != nil:
		leading, reason = metav1.ConditionTrue, "Confirmed"
	case s.GlobalHolder == "":
		reason = "NoLeader"
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionLeading, Status: leading,
		Reason: reason, ObservedGeneration: mcl.Generation, Message: leadingMessage(s, c.Cluster)})
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionBackendReachable,
		Status: metav1.ConditionTrue, Reason: "Reachable", ObservedGeneration: mcl.Generation, Message: "the global backend answered"})
	backendReachable.WithLabelValues(c.Cluster, mcl.Namespace, mcl.Name).Set(1)
	return c.patchStatus(ctx, mcl, s)
}

// writeUnreachable records that the backend could not be reached, changing nothing else.
func (c *Controller) writeUnreachable(ctx context.Context, mcl *v1alpha1.MultiClusterLease, cause error) error {
	var s v1alpha1.MultiClusterLeaseStatus
	mcl.Status.DeepCopyInto(&s)
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionBackendReachable, Status: metav1.ConditionFalse,
		Reason: "Unreachable", ObservedGeneration: mcl.Generation, Message: cause.Error()})
	backendReachable.WithLabelValues(c.Cluster, mcl.Namespace, mcl.Name).Set(0)
	return c.patchStatus(ctx, mcl, s)
}

func (c *Controller) patchStatus(ctx context.Context, mcl *v1alpha1.MultiClusterLease, s v1alpha1.MultiClusterLeaseStatus) error {
	next := mcl.DeepCopy()
	next.Status = s
	if err := c.Client.Status().Patch(ctx, next, client.MergeFrom(mcl)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the status of %s/%s: %w", mcl.Namespace, mcl.Name, err)
	}
	return nil
}

func leadingMessage(s v1alpha1.MultiClusterLeaseStatus, cluster string) string {
	switch {
	case s.ValidUntil != nil:
		return fmt.Sprintf("%s of this cluster (%s) leads globally, term %d", s.GlobalHolder, cluster, s.FencingToken)
	case s.GlobalHolder != "":
		return fmt.Sprintf("%s of cluster %s leads globally, term %d", s.GlobalHolder, s.HolderCluster, s.FencingToken)
	}
	return "nobody leads globally"
}

func (c *Controller) election(key types.NamespacedName) *election {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.elections[key]
	if !ok {
		e = &election{}
		c.elections[key] = e
	}
	return e
}

func (c *Controller) forget(key types.NamespacedName) *election {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.elections[key]
	delete(c.elections, key)
	return e
}

// backendWatch turns the backend's changes into reconciles of the MultiClusterLease of the same key, so
// a waiting cluster campaigns the moment a term ends instead of at its next requeue. It runs on the
// elected replica only, with the controller.
type backendWatch struct{ c *Controller }

func (w *backendWatch) Start(ctx context.Context) error {
	w.c.Backend.Watch(ctx, func(key string) {
		namespace, name, ok := ParseKey(key)
		if !ok {
			return
		}
		obj := &v1alpha1.MultiClusterLease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		select {
		case w.c.changed <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
		}
	})
	return nil
}

func (w *backendWatch) NeedLeaderElection() bool { return true }
