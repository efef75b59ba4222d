package validate

import (
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/leaderservice"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// Extras that the API server adds to the user info of a pod-bound service account token.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
	saPrefix     = "system:serviceaccount:"
)

// Requester is the user info of a request.
type Requester struct {
	Username string
	Groups   []string
	Extra    map[string]authenticationv1.ExtraValue
}

// Pod returns the pod a requester's token is bound to: only single-valued pod-name and pod-uid extras
// count, as the API server sets them for pod-bound tokens.
func (r *Requester) Pod() (name, uid string, ok bool) {
	names, uids := r.Extra[extraPodName], r.Extra[extraPodUID]
	if len(names) != 1 || len(uids) != 1 || names[0] == "" || uids[0] == "" {
		return "", "", false
	}
	return names[0], uids[0], true
}

// serviceAccount splits "system:serviceaccount:<namespace>:<name>".
func (r *Requester) serviceAccount() (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(r.Username, saPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ":")
}

func (p *Policy) exempt(r *Requester) bool {
	if strings.HasPrefix(r.Username, p.ownAccounts) || p.exemptUsers.has(r.Username) {
		return true
	}
	for _, g := range r.Groups {
		if p.exemptGroups.has(g) {
			return true
		}
	}
	return false
}

// Outcome is what happens to a write, from the mildest to the most severe.
type Outcome uint8

const (
	// Allowed: nothing fences the write, or the requester holds the lease.
	Allowed Outcome = iota
	// DryRun: it would be denied; admitted, recorded as an Event.
	DryRun
	// Warned: it would be denied; admitted with a warning to the client and an Event.
	Warned
	// Denied: refused with 403.
	Denied
)

var outcomeNames = [...]string{Allowed: "allowed", DryRun: "dryrun", Warned: "warned", Denied: "denied"}

func (o Outcome) String() string { return outcomeNames[o] }

// Reason says why.
type Reason uint8

const (
	NotGuarded Reason = iota
	Exempt
	NotGated
	HoldsLease
	NoPodIdentity
	LeaseMissing
	LeaseReleased
	LeaseExpired
	HeldByAnother
	HolderFormatMismatch
	ForeignHolder
	TakeUnexpired
	NotHolder
	DeleteLease
	EvictsOther
	EvictsWhileHolding
	EvictsSelf
	GlobalLeaderElsewhere
	HandoverByPod
	ForgedLeaderEndpoints
	MarkerChanged
	StatusByOthers
	NotHandoverTarget
	TimeAhead
	DurationNotGiven
	TransitionsMiscounted
	NotInjected
	KeepsOnLoss
	HolderInOtherNamespace
	LeaseByPerson
	ForgedLeaderService
)

var reasonText = [...]string{
	NotGuarded:             "no guard covers this write",
	Exempt:                 "the requester is exempt",
	NotGated:               "the guards do not gate this requester",
	HoldsLease:             "the requester holds the lease",
	NoPodIdentity:          "the requester has no pod identity (a token bound to a pod), so it cannot hold a lease",
	LeaseMissing:           "the lease does not exist, so nobody holds it",
	LeaseReleased:          "the lease is released, so nobody holds it",
	LeaseExpired:           "the lease has expired, so nobody holds it",
	HeldByAnother:          "another pod holds the lease",
	HolderFormatMismatch:   "the holder contains this pod's name, but not in the holder format the guard reads",
	ForeignHolder:          "a pod may write only its own identity as the holder",
	TakeUnexpired:          "the lease is held by another pod and has not expired",
	NotHolder:              "only the holder may renew or release the lease, and a pod writes a released lease only to take it",
	DeleteLease:            "pods may not delete a lease",
	EvictsOther:            "a pod may evict only itself",
	EvictsWhileHolding:     "the pod still holds its lease: it evicts itself only once it has lost it",
	EvictsSelf:             "a pod that lost its lease evicts itself",
	GlobalLeaderElsewhere:  "no pod of this cluster leads the MultiClusterLease now (the global leader is elsewhere, or its term here is unconfirmed or past validUntil)",
	ForgedLeaderEndpoints:  "only leasegate writes the endpoints of a <service>-leader Service: they follow the lease holder",
	HandoverByPod:          "a pod may not ask for a handover, only clear one as it takes the lease (a person or controller allowed to update the lease asks: kubectl leasegate handover)",
	MarkerChanged:          "only leasegate marks a lease as its own: a service account may not add, remove or change the label " + contract.Managed,
	StatusByOthers:         "only leasegate's election controller writes a MultiClusterLease's status",
	NotHandoverTarget:      "the lease is being handed over (" + contract.HandoverTo + "): until the released term ends only the pod it names may take it, and the pod that released it may not take it back",
	TimeAhead:              "a pod may not date renewTime or acquireTime ahead of the webhook's clock by more than the clock skew margin",
	DurationNotGiven:       "a pod may claim a lease only for the lease duration its injection gave it (leasegate.io/lease-duration or the configured election.leaseDuration)",
	TransitionsMiscounted:  "spec.leaseTransitions is the fencing token of each term: a pod that takes the lease raises it by exactly one (as client-go and the agent do), and no write lowers it or raises it by more",
	NotInjected:            "not a pod leasegate injected",
	KeepsOnLoss:            "the pod does not restart on loss",
	HolderInOtherNamespace: "the holder names a pod of this name, but the guard's holder format carries no UID, so only a pod of the lease's namespace, or of a service account the guard names with its namespace, is that holder",
	ForgedLeaderService:    "only leasegate marks a Service as a <service>-leader companion or changes one: its labels " + contract.LeaderOf + ", " + contract.LeaderLease + " and " + contract.Managed + ", and that it routes only through leasegate's EndpointSlice (type ClusterIP, no selector, no external IPs); nor may anyone else create or delete one (remove the followed Service's " + contract.LeaderLease + " label to opt out)",
	LeaseByPerson:          "a person may only ask for a handover on a lease leasegate manages (kubectl leasegate handover, or the annotations " + contract.HandoverFrom + " and " + contract.HandoverTo + "): its holder, terms, fencing token, label and existence are for leasegate and its agents; a cluster admin (an exempt requester) may break glass",
}

func (r Reason) String() string { return reasonText[r] }

var reasonCodes = [...]string{
	NotGuarded: "not_guarded", Exempt: "exempt", NotGated: "not_gated", HoldsLease: "holds_lease",
	NoPodIdentity: "no_pod_identity", LeaseMissing: "lease_missing", LeaseReleased: "lease_released",
	LeaseExpired: "lease_expired", HeldByAnother: "held_by_another", HolderFormatMismatch: "holder_format_mismatch", ForeignHolder: "foreign_holder",
	TakeUnexpired: "take_unexpired", NotHolder: "not_holder", DeleteLease: "delete_lease",
	EvictsOther: "evicts_other", EvictsWhileHolding: "evicts_while_holding", EvictsSelf: "evicts_self",
	GlobalLeaderElsewhere: "global_leader_elsewhere", HandoverByPod: "handover_by_pod",
	ForgedLeaderEndpoints: "forged_leader_endpoints", MarkerChanged: "marker_changed", StatusByOthers: "status_by_others",
	NotHandoverTarget: "not_handover_target", TimeAhead: "time_ahead", DurationNotGiven: "duration_not_given",
	TransitionsMiscounted: "transitions_miscounted", NotInjected: "not_injected", KeepsOnLoss: "keeps_on_loss",
	HolderInOtherNamespace: "holder_in_other_namespace", LeaseByPerson: "lease_by_person", ForgedLeaderService: "forged_leader_service",
}

// Code is the reason as a short identifier, for metric labels and audit annotations.
func (r Reason) Code() string { return reasonCodes[r] }

// Verdict is a decision with what a message, Event and metric need. Its strings point into the policy
// and the cached lease, so producing it allocates nothing.
type Verdict struct {
	Outcome Outcome
	Reason  Reason
	// Guard is the deciding guard's name; "" when no guard matched.
	Guard string
	// LeaseNamespace and LeaseName identify the lease the decision turned on.
	LeaseNamespace, LeaseName string
	// Holder is the lease's holder identity, when it names one.
	Holder string
	// HolderFormat is the format the guard read the holder with; set only for HolderFormatMismatch,
	// whose message suggests a better one.
	HolderFormat string
}

// Request is a write the fence decides on.
type Request struct {
	Requester *Requester
	Operation string
	Group     string
	Resource  string
	// Subresource is "" for the resource itself, or scale, status, ...: a guard on the resource covers
	// it unless the guard excludes it.
	Subresource string
	// Namespace is "" for a cluster-scoped object and, as in admission, the namespace's own name for a
	// Namespace.
	Namespace string
}

// LeaseGetter reads guarded leases from a cache.
type LeaseGetter interface {
	Get(namespace, name string) (*leaseapi.Kept, bool)
	// MultiClusterLease reads a guarded MultiClusterLease.
	MultiClusterLease(namespace, name string) (*v1alpha1.MultiClusterLease, bool)
}

// Decide says whether the write may pass: it must come from the holder of the lease of every guard that
// gates it. The most severe verdict among those guards wins.
//
// Guards cover namespaced writes only, as their rules' scope (Namespaced) does: a cluster-scoped object, or a
// Namespace, is never guarded.
func (p *Policy) Decide(req *Request, leases LeaseGetter, now time.Time) Verdict {
	if req.Namespace == "" || (req.Group == "" && req.Resource == "namespaces") {
		return Verdict{Reason: NotGuarded}
	}
	rules := p.rules.lookup(req.Group, req.Resource)
	if !slices.ContainsFunc(rules, func(r rule) bool { return !slices.Contains(r.exclude, req.Subresource) }) {
		return Verdict{Reason: NotGuarded}
	}
	if p.exempt(req.Requester) {
		return Verdict{Reason: Exempt}
	}
	// Only service accounts are gated: a person or a controller that is none passes every guard.
	saNamespace, saName, isServiceAccount := req.Requester.serviceAccount()
	if !isServiceAccount {
		return Verdict{Reason: NotGated}
	}
	op := opBit(req.Operation) | impliedOps(req)
	// Verdicts are written in place, not returned: a decision is a few dozen nanoseconds, and copying
	// an 88-byte Verdict up through each call was a quarter of it.
	worst := Verdict{Reason: NotGated}
	var who requesterPod // read from the requester once, by the first guard that gates it
	for i := range rules {
		r := &rules[i]
		g := r.guard
		if r.ops&op == 0 || slices.Contains(r.exclude, req.Subresource) || (g.namespaces != nil && !g.namespaces.has(req.Namespace)) || !g.gates(saNamespace, saName) {
			continue
		}
		if worst.Reason == NotGated { // the first guard that gates the requester
			who.saNamespace, who.saName = saNamespace, saName
			who.name, who.uid, who.ok = req.Requester.Pod()
			p.decideGuard(&worst, g, req.Namespace, &who, leases, now)
			continue
		}
		var next Verdict
		p.decideGuard(&next, g, req.Namespace, &who, leases, now)
		if next.Outcome > worst.Outcome {
			worst = next
		}
	}
	return worst
}

// requesterPod is what the guards read of a requester that is a service account: its pod (ok false when
// its token is bound to none) and its service account.
type requesterPod struct {
	name, uid           string
	ok                  bool
	saNamespace, saName string
}

// decideGuard writes into v the verdict of guard g on a write in namespace by who.
func (p *Policy) decideGuard(v *Verdict, g *guard, namespace string, who *requesterPod, leases LeaseGetter, now time.Time) {
	*v = Verdict{Guard: g.name, LeaseNamespace: g.leaseNamespace, LeaseName: g.leaseName}
	if v.LeaseNamespace == "" {
		v.LeaseNamespace = namespace
	}
	if !who.ok {
		v.Reason, v.Outcome = NoPodIdentity, outcomeOf(p.missingIdentity)
		return
	}
	if g.multiCluster {
		p.decideMultiCluster(v, g, who, leases, now)
		return
	}
	l, found := leases.Get(v.LeaseNamespace, v.LeaseName)
	if !found {
		v.Reason, v.Outcome = LeaseMissing, outcomeOf(g.enforcement)
		return
	}
	j := l.Judge(now, p.margin)
	v.Holder = j.Holder
	format := g.holderFormat
	if format == nil {
		format = defaultHolderFormat(l.Managed)
	}
	switch names := j.State == lease.Held && format.Names(j.Holder, who.name, who.uid); {
	case j.State == lease.Released:
		v.Reason = LeaseReleased
	case j.State == lease.Expired:
		v.Reason = LeaseExpired
	case names && g.namesPodOf(format, who.saNamespace, who.saName, v.LeaseNamespace):
		v.Reason = HoldsLease
		return
	case names:
		v.Reason = HolderInOtherNamespace
	case !format.Fits(j.Holder) && strings.Contains(j.Holder, who.name):
		// Likely the requester itself, written in a format the guard does not read: say so, or the
		// guard's author would see the leader fenced for no visible reason.
		v.Reason, v.HolderFormat = HolderFormatMismatch, format.String()
	default:
		v.Reason = HeldByAnother
	}
	v.Outcome = outcomeOf(g.enforcement)
}

// decideMultiCluster admits a write only from the pod that this cluster's MultiClusterLease status names
// as global leader, before its validUntil (v1alpha1's LocalLeader, the judgement the candidates use).
// Once another cluster's candidate has won, this cluster's old leader is refused by its own API server:
// its validUntil passes before the other cluster can win, whether or not this cluster heard of it.
func (p *Policy) decideMultiCluster(v *Verdict, g *guard, who *requesterPod, leases LeaseGetter, now time.Time) {
	m, found := leases.MultiClusterLease(v.LeaseNamespace, v.LeaseName)
	if !found {
		v.Reason, v.Outcome = LeaseMissing, outcomeOf(g.enforcement)
		return
	}
	v.Holder = m.Status.GlobalHolder
	if m.Status.HolderCluster != "" {
		v.Holder += " of cluster " + m.Status.HolderCluster
	}
	format := g.holderFormat
	if format == nil {
		format = lease.ClientGoFormat
	}
	holder := m.Status.LocalLeader(now)
	switch names := holder != "" && format.Names(holder, who.name, who.uid); {
	case holder == "":
		v.Reason = GlobalLeaderElsewhere
	case names && g.namesPodOf(format, who.saNamespace, who.saName, v.LeaseNamespace):
		v.Reason = HoldsLease
		return
	case names:
		v.Reason = HolderInOtherNamespace
	default:
		v.Reason = HeldByAnother
	}
	v.Outcome = outcomeOf(g.enforcement)
}

// defaultHolderFormat reads the holder of a guard's lease when the guard names no format. Leases
// leasegate manages carry agent identities, "<pod name>_<pod UID>", and must match both: a recreated pod
// of the same name (a StatefulSet replica) is not its predecessor. Other leases carry the identities of
// controllers that run their own election, by default client-go's "<hostname>_<random UUID>" with the
// pod name as hostname, and match by pod name.
func defaultHolderFormat(managed bool) *lease.HolderFormat {
	if managed {
		return lease.AgentFormat
	}
	return lease.ClientGoFormat
}

func outcomeOf(e config.Enforcement) Outcome {
	switch e {
	case config.EnforcementWarn:
		return Warned
	case config.EnforcementDryRun:
		return DryRun
	case config.EnforcementAllow:
		return Allowed
	}
	return Denied
}

// LeaseWrite is a write to a Lease or MultiClusterLease leasegate manages. A MultiClusterLease's metadata
// and spec have a Lease's shape and are read as one.
type LeaseWrite struct {
	Requester *Requester
	// Old is nil on CREATE, New nil on DELETE.
	Old, New *coordinationv1.Lease
	// MultiCluster: the lease is a MultiClusterLease (its spec read as a Lease's). Agents do not hand
	// those over, so the handover rule is not applied to them.
	MultiCluster bool
	// Status: the write is to a MultiClusterLease's status subresource.
	Status bool
	// GivenSeconds is the lease duration the requesting pod's injection gave it for this lease, as its
	// agent container's environment says (inject.GivenTo; a pod's spec cannot change, its annotations
	// can); 0 for a pod leasegate did not inject for this lease.
	GivenSeconds int32
}

// controlPlaneUsers prefixes the users the control plane authenticates as (system:kube-controller-manager,
// system:node:<name>, system:apiserver): names the cluster's own credentials carry, which a person's
// authenticator does not hand out.
const controlPlaneUsers = "system:"

// DecideLeaseWrite guards the Leases (and MultiClusterLeases) leasegate manages, so that no follower can
// hijack, pin or spoof leadership: a pod may write only its own identity as holder, may take a lease only
// when it is released or expired (and, while a handover runs, only as its target), may release only a
// lease it holds, may not delete one, may not date its terms ahead of the webhook's clock nor claim a
// longer term than its injection gave it, must count the term it takes in leaseTransitions (the fencing
// token apps hand to their stores), and no service account may change the label that makes a lease
// leasegate's (which decides what reaches this guard and how the fence reads the holder) or write a
// MultiClusterLease's status. People, namespace admins among them, may change what a lease's metadata
// says but not its spec, its label or whether it exists: they ask for a handover, and the agents move
// leadership. Exempt requesters (cluster admins), the control plane's users and kube-system's service
// accounts pass; other service accounts without a pod identity follow missingPodIdentity.
func (p *Policy) DecideLeaseWrite(w *LeaseWrite, now time.Time) Verdict {
	if p.exempt(w.Requester) {
		return Verdict{Reason: Exempt}
	}
	old, updated := w.Old, w.New
	target := updated
	if target == nil {
		target = old
	}
	v := Verdict{LeaseNamespace: target.Namespace, LeaseName: target.Name}
	if old != nil {
		v.Holder = ptr.Deref(old.Spec.HolderIdentity, "")
	}
	saNamespace, _, isServiceAccount := w.Requester.serviceAccount()
	switch {
	case !isServiceAccount && strings.HasPrefix(w.Requester.Username, controlPlaneUsers):
		// The control plane's own users (kube-controller-manager without service account credentials,
		// nodes): the namespace controller and the garbage collector delete a namespace's Leases.
		return Verdict{Reason: NotGated}
	case !isServiceAccount:
		// A person, a namespace admin among them, asks for leadership to move (a handover) and leasegate's
		// agents move it; anything more would forge a term or its token outside every rule the agents keep.
		if !w.Status && old != nil && updated != nil && markerOf(old) == markerOf(updated) && equality.Semantic.DeepEqual(old.Spec, updated.Spec) {
			return Verdict{Reason: NotGated}
		}
		v.Reason, v.Outcome = LeaseByPerson, Denied
		return v
	case saNamespace == metav1.NamespaceSystem:
		// kube-system's service accounts are the control plane's controllers: the namespace controller and
		// the garbage collector delete a namespace's Leases without a pod identity, and must never wait on
		// this.
		return Verdict{Reason: NotGated}
	}
	switch {
	case w.Status:
		v.Reason, v.Outcome = StatusByOthers, Denied
		return v
	case updated != nil && markerOf(old) != markerOf(updated):
		v.Reason, v.Outcome = MarkerChanged, Denied
		return v
	}
	podName, podUID, ok := w.Requester.Pod()
	if !ok {
		v.Reason, v.Outcome = NoPodIdentity, outcomeOf(p.missingIdentity)
		return v
	}
	if updated == nil {
		v.Reason, v.Outcome = DeleteLease, Denied
		return v
	}
	next := ptr.Deref(updated.Spec.HolderIdentity, "")
	var current lease.Judgement
	var prior lease.Spec
	if old != nil {
		prior = leaseapi.Spec(&old.Spec)
		current = lease.Judge(&prior, now, p.margin)
	}
	ownsCurrent := current.Holder != "" && lease.AgentFormat.Names(current.Holder, podName, podUID)
	switch {
	case asksHandover(old, updated):
		v.Reason = HandoverByPod
	case next != "" && !lease.AgentFormat.Names(next, podName, podUID):
		v.Reason = ForeignHolder
	case next != "" && current.State == lease.Held && !ownsCurrent:
		v.Reason = TakeUnexpired
	case next != "" && !ownsCurrent && !w.MultiCluster && handoverBars(old, current, &prior, next, now, p.margin):
		v.Reason = NotHandoverTarget
	case next == "" && !ownsCurrent:
		// A write that leaves the lease without a holder is a release, the holder's alone. On a lease
		// already released there is nothing to release: a pod that is not taking it has no write to
		// make, and one would lift a handover's bar (clear the request, date the released term back or
		// shorten it) for its take in the next write.
		v.Reason = NotHolder
	case datedAhead(old, updated, now, p.margin):
		v.Reason = TimeAhead
	case !p.durationGiven(w, next != ""):
		v.Reason = DurationNotGiven
	case miscounted(old, updated):
		v.Reason = TransitionsMiscounted
	default:
		v.Reason = HoldsLease
		return v
	}
	v.Outcome = Denied
	return v
}

// miscounted reports whether an update changes leaseTransitions other than as electors count terms: a
// new holder (a change of holderIdentity to one that is not empty) raises it by exactly one; a renewal
// or release keeps it, or raises it by one (the agent counts a term when it finds itself holder without
// an acquireTime). So nobody can reuse an earlier term's token, or lower it, and nobody can run it up to
// the int32 limit, where the next take would wrap it below every earlier one.
func miscounted(old, updated *coordinationv1.Lease) bool {
	if old == nil {
		return false
	}
	was, is := int64(ptr.Deref(old.Spec.LeaseTransitions, 0)), int64(ptr.Deref(updated.Spec.LeaseTransitions, 0))
	holder := ptr.Deref(updated.Spec.HolderIdentity, "")
	if holder != "" && holder != ptr.Deref(old.Spec.HolderIdentity, "") {
		return is != was+1
	}
	return is < was || is > was+1
}

// markerOf is the value of the label that makes a lease leasegate's; "" for none (or no lease).
func markerOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return l.Labels[contract.Managed]
}

// handoverBars reports whether a handover asked on the released lease old keeps identity from taking it:
// the agents keep that rule among themselves, and this keeps it for any pod.
func handoverBars(old *coordinationv1.Lease, current lease.Judgement, released *lease.Spec, identity string, now time.Time, margin time.Duration) bool {
	if old == nil {
		return false
	}
	h, asked := lease.HandoverOf(old.Annotations)
	if !asked {
		return false
	}
	_, barred := h.Bars(current, released, identity, now, margin)
	return barred
}

// minClockTolerance is the least skew datedAhead tolerates whatever the margin: a margin of 0 is a
// legitimate choice for judging expiry, but a holder on a node whose clock runs a few milliseconds ahead
// of the webhook's must still renew. A pod can gain no more than this per renewal.
const minClockTolerance = 2 * time.Second

// datedAhead reports whether a write sets renewTime or acquireTime later than the webhook's clock plus
// the clock skew margin (at least minClockTolerance): a holder that did could keep the lease long after
// it stopped renewing (a renewTime a year ahead holds it for a year). Times it leaves as they were are not
// judged again; times in the past only shorten the writer's own term.
func datedAhead(old, updated *coordinationv1.Lease, now time.Time, margin time.Duration) bool {
	latest := now.Add(max(margin, minClockTolerance))
	var was *coordinationv1.LeaseSpec
	if old != nil {
		was = &old.Spec
	}
	ahead := func(t, before *metav1.MicroTime) bool {
		return t != nil && t.After(latest) && (before == nil || !t.Equal(before))
	}
	if was == nil {
		return ahead(updated.Spec.RenewTime, nil) || ahead(updated.Spec.AcquireTime, nil)
	}
	return ahead(updated.Spec.RenewTime, was.RenewTime) || ahead(updated.Spec.AcquireTime, was.AcquireTime)
}

// durationGiven reports whether the write's leaseDurationSeconds is one the requester may claim. A pod
// writing itself as holder claims exactly what its injection gave it for this lease; a pod leasegate did
// not inject for this lease (one sharing the service account) claims no more than the configured
// election.leaseDuration or what the lease already had. A release may keep the term (a handover bars
// others for as long) or shorten it, never lengthen it.
func (p *Policy) durationGiven(w *LeaseWrite, claims bool) bool {
	seconds := ptr.Deref(w.New.Spec.LeaseDurationSeconds, 0)
	limit := w.GivenSeconds
	if limit == 0 {
		limit = p.defaultLeaseSeconds
		if w.Old != nil {
			limit = max(limit, ptr.Deref(w.Old.Spec.LeaseDurationSeconds, 0))
		}
	}
	if claims && w.GivenSeconds != 0 {
		return seconds == w.GivenSeconds
	}
	return seconds <= limit
}

// asksHandover reports whether a write sets or changes a handover request. Removing one is how the pod
// that takes the lease marks the request done; setting one is for people and controllers, whom RBAC on
// the Lease already decides about: otherwise any follower could make the leader step down.
func asksHandover(old, updated *coordinationv1.Lease) bool {
	next, asked := lease.HandoverOf(updated.Annotations)
	if !asked {
		return false
	}
	var prev lease.Handover
	if old != nil {
		prev, _ = lease.HandoverOf(old.Annotations)
	}
	return next != prev
}

// DecideLeaderEndpoints decides a write to an EndpointSlice that names a "<service>-leader" Service
// (kubernetes.io/service-name). Its endpoints are the lease holder's, kept by leasegate, whose own writes
// never reach the fence; anyone else's write to the slices of a leader Service leasegate keeps is a forged
// route to a pod that may not hold the lease. Exempt requesters pass, as everywhere.
func (p *Policy) DecideLeaderEndpoints(requester *Requester, leaderService bool) Verdict {
	switch {
	case p.exempt(requester):
		return Verdict{Reason: Exempt}
	case !leaderService:
		return Verdict{Reason: NotGuarded}
	}
	return Verdict{Reason: ForgedLeaderEndpoints, Outcome: Denied}
}

// LeaderServiceWrite is a write to a Service that is, or would become, a "<service>-leader" companion
// (it carries leasegate.io/leader-of before or after).
type LeaderServiceWrite struct {
	Requester *Requester
	// Old is nil on CREATE, New nil on DELETE.
	Old, New *corev1.Service
}

// DecideLeaderService keeps a companion Service leasegate's: what marks it (its leader-of, leader-lease
// and managed labels) and what it routes to (a ClusterIP Service without a selector or external
// addresses, so only leasegate's slice routes it) are changed by leasegate alone, whose own writes never
// reach the fence. Otherwise anyone who may update Services could remove the label and give it the
// workload's selector, and the endpoint slice controller would route it to every replica, leader or not.
// Nor may anyone else mark a Service as a companion. Exempt requesters and the control plane pass, as
// everywhere; a companion's other metadata (annotations, other labels) and ports are anyone's, and the
// controller sets the ports back. Nor may anyone else delete a companion.
func (p *Policy) DecideLeaderService(w *LeaderServiceWrite) Verdict {
	saNamespace, _, isServiceAccount := w.Requester.serviceAccount()
	switch {
	case p.exempt(w.Requester):
		return Verdict{Reason: Exempt}
	case !isServiceAccount && strings.HasPrefix(w.Requester.Username, controlPlaneUsers), isServiceAccount && saNamespace == metav1.NamespaceSystem:
		return Verdict{Reason: NotGated}
	}
	wasCompanion := w.Old != nil && leaderservice.IsCompanion(w.Old)
	switch {
	case wasCompanion && w.New != nil && sameCompanionMarks(w.Old, w.New) && leaderservice.RoutesAsCompanion(w.New):
		return Verdict{Reason: NotGated}
	case !wasCompanion && (w.New == nil || !leaderservice.IsCompanion(w.New)):
		return Verdict{Reason: NotGuarded}
	}
	// A delete is refused too: the name freed, a Service of it without the mark (and with the workload's
	// selector) would be neither leasegate's nor judged, and leasegate does not take a Service it did
	// not make. The garbage collector removes a companion with its followed Service.
	judged := w.New
	if wasCompanion {
		judged = w.Old
	}
	return Verdict{Reason: ForgedLeaderService, Outcome: Denied, LeaseNamespace: judged.Namespace, LeaseName: judged.Labels[contract.LeaderLease]}
}

// sameCompanionMarks reports whether a write leaves the labels that make a Service leasegate's companion
// as they were.
func sameCompanionMarks(old, updated *corev1.Service) bool {
	for _, key := range [...]string{contract.LeaderOf, contract.LeaderLease, contract.Managed} {
		was, wasSet := old.Labels[key]
		is, isSet := updated.Labels[key]
		if was != is || wasSet != isSet {
			return false
		}
	}
	return true
}

// Eviction is a request to evict a pod that restarts itself on loss (leasegate.io/on-loss: restart), whose
// service account may therefore evict it.
type Eviction struct {
	Requester *Requester
	// PodNamespace, PodName and PodUID are the pod to evict, ServiceAccount the service account it runs
	// as: one leasegate's Role lets evict it.
	PodNamespace, PodName, PodUID, ServiceAccount string
	// RequesterIsCandidate: the requesting pod is one leasegate injected for the same lease, whose
	// service account leasegate's Role lets evict the lease's pods too, even when it is not the evicted
	// pod's (the replicas of a lease may run as several accounts).
	RequesterIsCandidate bool
	// Lease is the lease whose loss restarts it; nil when it does not exist.
	Lease *leaseapi.Kept
	// MultiClusterLease, instead, is the lock of a pod that elects across clusters: it has lost once this
	// cluster's status no longer names it as the local leader (LocalLeader), whatever its local candidacy.
	MultiClusterLease *v1alpha1.MultiClusterLease
}

// DecideEviction judges the evictions whose right came from leasegate: leasegate's Role lets the service
// accounts of a lease's pods evict those that restart on loss, and the replicas share that right, so
// without this any replica could evict its neighbours, the leader among them. Such a requester (a pod
// running as the evicted pod's service account, or a candidate for the same lease) may evict only
// itself, and only once it has lost its lease. Every other
// requester got its right elsewhere and is left to RBAC and PodDisruptionBudgets: people, kubectl drain,
// and the drain tools that evict from pods of their own (cluster-autoscaler, Karpenter, the descheduler,
// kured), each with its own service account.
func DecideEviction(e *Eviction, now time.Time, margin time.Duration) Verdict {
	podName, podUID, ok := e.Requester.Pod()
	if !ok {
		return Verdict{Reason: NotGated}
	}
	namespace, account, ok := e.Requester.serviceAccount()
	if sameAccount := ok && namespace == e.PodNamespace && account == serviceAccountName(e.ServiceAccount); !sameAccount && !e.RequesterIsCandidate {
		return Verdict{Reason: NotGated}
	}
	v := Verdict{}
	switch {
	case e.Lease != nil:
		v.LeaseNamespace, v.LeaseName = e.Lease.Namespace, e.Lease.Name
	case e.MultiClusterLease != nil:
		v.LeaseNamespace, v.LeaseName = e.MultiClusterLease.Namespace, e.MultiClusterLease.Name
	}
	if podName != e.PodName || podUID != e.PodUID {
		v.Reason, v.Outcome = EvictsOther, Denied
		return v
	}
	leading := false
	switch {
	case e.Lease != nil:
		j := e.Lease.Judge(now, margin)
		v.Holder = j.Holder
		leading = j.State == lease.Held && lease.AgentFormat.Names(j.Holder, podName, podUID)
	case e.MultiClusterLease != nil:
		v.Holder = e.MultiClusterLease.Status.GlobalHolder
		leading = lease.AgentFormat.Names(e.MultiClusterLease.Status.LocalLeader(now), podName, podUID)
	}
	if leading {
		v.Reason, v.Outcome = EvictsWhileHolding, Denied
		return v
	}
	v.Reason = EvictsSelf
	return v
}

// serviceAccountName is the service account a pod runs as: spec.serviceAccountName, "default" when unset.
func serviceAccountName(name string) string {
	if name == "" {
		return "default"
	}
	return name
}
