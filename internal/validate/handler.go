package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/leaderservice"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// maxWarning is the longest warning the API server passes on unchanged.
const maxWarning = 120

// Webhooks serves the fence's admission webhooks from a Policy compiled from the configuration in force
// and a cache of the leases.
type Webhooks struct {
	// Leases is every lease a decision reads: guarded writes', evictions' and leader Services'.
	Leases LeaseGetter
	// Cluster reads injected pods and leader Services from the manager's cache.
	Cluster  client.Reader
	Recorder events.EventRecorder
	// Events bounds the Events Recorder writes per object, requester and source.
	Events       *EventBudget
	OwnNamespace string

	policy atomic.Pointer[Policy]
}

// Follow compiles every configuration the store puts in force. Call it once at setup.
func (f *Webhooks) Follow(store *config.Store) {
	store.OnChange(func(cfg *config.Config) { f.policy.Store(Compile(cfg, f.OwnNamespace)) })
}

func requesterOf(req *admission.Request) *Requester {
	return &Requester{Username: req.UserInfo.Username, Groups: req.UserInfo.Groups, Extra: req.UserInfo.Extra}
}

// Guarded decides writes to guarded resources (path /validate-guarded).
func (f *Webhooks) Guarded() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		d := startDecision("guarded")
		defer d.observe()
		d.verdict = f.policy.Load().Decide(&Request{
			Requester:   requesterOf(&req),
			Operation:   string(req.Operation),
			Group:       req.Resource.Group,
			Resource:    req.Resource.Resource,
			Subresource: req.SubResource,
			Namespace:   req.Namespace,
		}, f.Leases, d.start)
		return f.respond(ctx, &req, d.verdict)
	})
}

// LeaseWrites guards the Leases and MultiClusterLeases leasegate manages (path /validate-leases). The
// lease duration the requesting pod was given comes from the manager's cache of injected pods: no API
// call.
func (f *Webhooks) LeaseWrites() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		d := startDecision("lease")
		defer d.observe()
		// A MultiClusterLease's metadata and spec have a Lease's fields and JSON names: both decode as
		// a Lease, and the status (the election controller's) is left out.
		w := &LeaseWrite{Requester: requesterOf(&req), MultiCluster: req.Resource.Resource == v1alpha1.Resource, Status: req.SubResource == "status"}
		if req.Operation != admissionv1.Create {
			w.Old = &coordinationv1.Lease{}
			if err := json.Unmarshal(req.OldObject.Raw, w.Old); err != nil {
				return d.fail(http.StatusBadRequest, err)
			}
		}
		if req.Operation != admissionv1.Delete {
			w.New = &coordinationv1.Lease{}
			if err := json.Unmarshal(req.Object.Raw, w.New); err != nil {
				return d.fail(http.StatusBadRequest, err)
			}
			w.GivenSeconds = f.givenSeconds(ctx, w.Requester, req.Namespace, req.Name, req.Resource.Resource == v1alpha1.Resource)
		}
		d.verdict = f.policy.Load().DecideLeaseWrite(w, d.start)
		return f.respond(ctx, &req, d.verdict)
	})
}

// givenSeconds is the lease duration the injection of the requesting pod gave it for the lease
// namespace/name, read from the pod's spec (inject.GivenTo), or 0 when the requester is no pod leasegate
// injected for it.
func (f *Webhooks) givenSeconds(ctx context.Context, requester *Requester, namespace, name string, multiCluster bool) int32 {
	podName, podUID, ok := requester.Pod()
	if !ok {
		return 0
	}
	pod := &corev1.Pod{}
	if err := f.Cluster.Get(ctx, types.NamespacedName{Namespace: namespace, Name: podName}, pod); err != nil || string(pod.UID) != podUID {
		return 0
	}
	injected, ok := inject.GivenTo(pod)
	if !ok || (injected.LeaseKind == contract.LeaseKindMultiClusterLease) != multiCluster {
		return 0
	}
	return injected.LeaseSeconds[name]
}

// Evictions admits a pod's eviction of itself once it has lost its lease, and no other eviction by its
// replicas, for the pods that restart on loss (path /validate-evictions). It reads the pod from the manager's
// cache of injected pods, what it restarts on from its spec (inject.GivenTo), and its lease from the
// fence's cache: no API call.
func (f *Webhooks) Evictions() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		d := startDecision("eviction")
		defer d.observe()
		requester := requesterOf(&req)
		requesterName, requesterUID, ok := requester.Pod()
		if !ok {
			d.verdict.Reason = NotGated
			return admission.Allowed("not a pod: RBAC decides")
		}
		pod := &corev1.Pod{}
		if err := f.Cluster.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, pod); apierrors.IsNotFound(err) {
			d.verdict.Reason = NotInjected
			return admission.Allowed(NotInjected.String())
		} else if err != nil {
			return d.fail(http.StatusInternalServerError, err)
		}
		injected, _ := inject.GivenTo(pod)
		leaseName := injected.RestartOnLoss
		if leaseName == "" {
			d.verdict.Reason = KeepsOnLoss
			return admission.Allowed(KeepsOnLoss.String())
		}
		eviction := &Eviction{Requester: requester, PodNamespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), ServiceAccount: pod.Spec.ServiceAccountName,
			RequesterIsCandidate: f.candidate(ctx, req.Namespace, requesterName, requesterUID, leaseName)}
		if injected.LeaseKind == contract.LeaseKindMultiClusterLease {
			eviction.MultiClusterLease, _ = f.Leases.MultiClusterLease(req.Namespace, leaseName)
		} else {
			eviction.Lease, _ = f.Leases.Get(req.Namespace, leaseName)
		}
		d.verdict = DecideEviction(eviction, d.start, f.policy.Load().margin)
		if d.verdict.LeaseName == "" {
			d.verdict.LeaseNamespace, d.verdict.LeaseName = req.Namespace, leaseName
		}
		return f.respond(ctx, &req, d.verdict)
	})
}

// candidate reports whether the pod namespace/name with uid is one leasegate injected for lease, as its
// spec says (inject.GivenTo), from the manager's cache of injected pods: no API call.
func (f *Webhooks) candidate(ctx context.Context, namespace, name, uid, lease string) bool {
	pod := &corev1.Pod{}
	if f.Cluster.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod) != nil || string(pod.UID) != uid {
		return false
	}
	injected, ok := inject.GivenTo(pod)
	_, forLease := injected.LeaseSeconds[lease]
	return ok && forLease
}

// LeaderEndpoints refuses anyone's write to an EndpointSlice of a "<service>-leader" Service that
// leasegate keeps, or will keep once its Service exists, on the lease holder (path
// /validate-endpointslices); leasegate's own writes never reach it. The Services come from the
// manager's cache and the lease from the fence's: no API call.
func (f *Webhooks) LeaderEndpoints() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		d := startDecision("endpointslice")
		defer d.observe()
		services := func(name string) *corev1.Service {
			svc := &corev1.Service{}
			if f.Cluster.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: name}, svc) != nil {
				return nil
			}
			return svc
		}
		// The slice as written and as it was: relabelling leasegate's slice away from its Service is
		// as much a forgery as pointing it elsewhere.
		leaseName, leaderService := "", false
		for _, raw := range [][]byte{req.Object.Raw, req.OldObject.Raw} {
			if len(raw) == 0 || leaderService {
				continue
			}
			slice := &discoveryv1.EndpointSlice{}
			if err := json.Unmarshal(raw, slice); err != nil {
				return d.fail(http.StatusBadRequest, err)
			}
			leaseName, leaderService = leaderservice.CompanionLease(slice.Labels[discoveryv1.LabelServiceName], services)
		}
		d.verdict = f.policy.Load().DecideLeaderEndpoints(requesterOf(&req), leaderService)
		if leaderService {
			d.verdict.LeaseNamespace, d.verdict.LeaseName = req.Namespace, leaseName
			if l, ok := f.Leases.Get(req.Namespace, d.verdict.LeaseName); ok {
				d.verdict.Holder = ptr.Deref(l.Spec.HolderIdentity, "")
			}
		}
		return f.respond(ctx, &req, d.verdict)
	})
}

// LeaderServices keeps the "<service>-leader" Services leasegate made its own (path
// /validate-leader-services): only leasegate changes what marks them and what they route to, and only it
// marks a Service as one. leasegate's own writes never reach it.
func (f *Webhooks) LeaderServices() admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		d := startDecision("service")
		defer d.observe()
		w := &LeaderServiceWrite{Requester: requesterOf(&req)}
		for _, side := range []struct {
			raw []byte
			svc **corev1.Service
		}{{req.OldObject.Raw, &w.Old}, {req.Object.Raw, &w.New}} {
			if len(side.raw) == 0 {
				continue
			}
			*side.svc = &corev1.Service{}
			if err := json.Unmarshal(side.raw, *side.svc); err != nil {
				return d.fail(http.StatusBadRequest, err)
			}
		}
		if w.Old == nil && w.New == nil {
			return d.fail(http.StatusBadRequest, errors.New("the request carries no Service"))
		}
		d.verdict = f.policy.Load().DecideLeaderService(w)
		if d.verdict.LeaseName != "" {
			if l, ok := f.Leases.Get(d.verdict.LeaseNamespace, d.verdict.LeaseName); ok {
				d.verdict.Holder = l.Judged.HolderIdentity
			}
		}
		return f.respond(ctx, &req, d.verdict)
	})
}

// respond turns a verdict into the admission response, the audit annotations and, for a fenced write,
// an Event. Dry-run requests get the same answer but leave no Event behind.
func (f *Webhooks) respond(ctx context.Context, req *admission.Request, v Verdict) admission.Response {
	var resp admission.Response
	switch v.Outcome {
	case Allowed:
		resp = admission.Allowed(v.Reason.String())
	case Denied:
		resp = admission.Denied(message(req, v))
	default:
		resp = admission.Allowed("").WithWarnings(warning(v))
	}
	resp.AuditAnnotations = map[string]string{"decision": v.Outcome.String(), "reason": v.Reason.Code()}
	if v.Guard != "" {
		resp.AuditAnnotations["guard"] = v.Guard
	}
	if v.LeaseName != "" {
		resp.AuditAnnotations["lease"] = v.LeaseNamespace + "/" + v.LeaseName
		resp.AuditAnnotations["holder"] = v.Holder
	}
	if v.Outcome != Allowed && !dryRun(req) {
		f.recordEvent(ctx, req, v)
	}
	return resp
}

// dryRun reports whether a request changes nothing. The API server marks most dry runs in the request,
// but not an eviction's: its dry run is asked for in the Eviction's own deleteOptions, so the body says.
// An eviction body that cannot be read counts as a real write.
func dryRun(req *admission.Request) bool {
	if req.DryRun != nil && *req.DryRun {
		return true
	}
	if req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "eviction" || len(req.Object.Raw) == 0 {
		return false
	}
	var eviction struct {
		DeleteOptions *struct {
			DryRun []string `json:"dryRun"`
		} `json:"deleteOptions"`
	}
	if json.Unmarshal(req.Object.Raw, &eviction) != nil || eviction.DeleteOptions == nil {
		return false
	}
	return slices.Contains(eviction.DeleteOptions.DryRun, metav1.DryRunAll)
}

// message is what a fenced requester reads: who it is, what it tried, which lease, who holds it, why.
func message(req *admission.Request, v Verdict) string {
	holder := v.Holder
	if holder == "" {
		holder = "nobody"
	}
	guard := ""
	if v.Guard != "" {
		guard = fmt.Sprintf(" (guard %q)", v.Guard)
	}
	return fmt.Sprintf("leasegate: %s may not %s %s: lease %s/%s is held by %s%s: %s%s",
		requesterName(req), verb(req), target(req), v.LeaseNamespace, v.LeaseName, holder, guard, v.Reason, formatHint(req, v))
}

// formatHint tells the author of a guard whose lease's holder names the requester in another format
// which holderFormat would read it.
func formatHint(req *admission.Request, v Verdict) string {
	if v.Reason != HolderFormatMismatch {
		return ""
	}
	name, uid, _ := requesterOf(req).Pod()
	hint := fmt.Sprintf(" (holderFormat %q)", v.HolderFormat)
	if suggested := lease.SuggestFormat(v.Holder, name, uid); suggested != "" {
		hint += fmt.Sprintf("; if the holder is this pod, set the guard's holderFormat to %q", suggested)
	}
	return hint
}

func warning(v Verdict) string {
	w := fmt.Sprintf("leasegate %s: not the holder of lease %s/%s (%s)", v.Outcome, v.LeaseNamespace, v.LeaseName, v.Reason)
	if len(w) > maxWarning {
		w = w[:maxWarning-3] + "..."
	}
	return w
}

func requesterName(req *admission.Request) string {
	r := requesterOf(req)
	if name, _, ok := r.Pod(); ok {
		return fmt.Sprintf("pod %s/%s (%s)", req.Namespace, name, r.Username)
	}
	return r.Username
}

func verb(req *admission.Request) string {
	switch req.Operation {
	case admissionv1.Create:
		return "create"
	case admissionv1.Delete:
		return "delete"
	case admissionv1.Connect:
		return "connect to"
	}
	return "update"
}

func target(req *admission.Request) string {
	resource := req.Resource.Resource
	if req.Resource.Group != "" {
		resource += "." + req.Resource.Group
	}
	if req.SubResource != "" {
		resource = req.SubResource + " of " + resource
	}
	switch {
	case req.Name == "":
		return resource + " in namespace " + req.Namespace
	case req.Namespace == "":
		return resource + " " + req.Name
	}
	return resource + " " + req.Namespace + "/" + req.Name
}

// recordEvent records LeaderGateDenied on the object written (UPDATE, DELETE) or, for a CREATE, on its
// namespace, with the requesting pod as the related object, within the Event budget. The events library
// folds repeats of the same Event into one series with a count; it tells Events apart by regarding
// object, reason, action and related object, not by note, so without the related pod a second follower
// denied on the same object would only add to the first one's count.
func (f *Webhooks) recordEvent(ctx context.Context, req *admission.Request, v Verdict) {
	// The Namespace field is set even for the namespace itself, so the Event lands in that namespace,
	// where `kubectl get events -n <namespace>` shows it, and not in "default".
	regarding := &corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: req.Namespace, Namespace: req.Namespace}
	if req.Operation != admissionv1.Create && req.Name != "" {
		regarding = &corev1.ObjectReference{
			Kind: req.Kind.Kind, APIVersion: apiVersion(req.Kind.Group, req.Kind.Version),
			Namespace: req.Namespace, Name: req.Name,
		}
	}
	if regarding.Name == "" {
		return // a cluster-scoped create: nothing to hang the Event on
	}
	related := requestingPod(req)
	source, known := f.eventSource(ctx, related, req.Namespace)
	if !known {
		eventsSuppressed.WithLabelValues("unknown_namespace").Inc()
		return
	}
	requester := req.UserInfo.Username
	if related != nil {
		requester += "\x00" + related.Name + "\x00" + string(related.UID)
	}
	key := EventKey{Object: regarding.Kind + "\x00" + regarding.APIVersion + "\x00" + regarding.Namespace + "\x00" + regarding.Name, Requester: requester, Source: source}
	if !f.Events.Allow(key) {
		eventsSuppressed.WithLabelValues("budget").Inc()
		return
	}
	action := map[Outcome]string{Denied: "Deny", Warned: "Warn", DryRun: "DryRun"}[v.Outcome]
	f.Recorder.Eventf(regarding, related, corev1.EventTypeWarning, contract.EventReasonDenied, action, "%s", message(req, v))
}

// eventSource is the budget an Event is charged to: the requesting pod's own when the cache of injected
// pods holds that pod with that UID, or else one shared by every requester fenced in namespace, and
// only for a namespace the cache knows. A review's requester and namespace are whatever its sender
// wrote: Events for pods and namespaces that do not exist would be a flood an API server never sends.
func (f *Webhooks) eventSource(ctx context.Context, related *corev1.ObjectReference, namespace string) (source string, known bool) {
	if related != nil {
		pod := &corev1.Pod{}
		if f.Cluster.Get(ctx, types.NamespacedName{Namespace: related.Namespace, Name: related.Name}, pod) == nil && pod.UID == related.UID {
			return "pod\x00" + related.Namespace + "\x00" + related.Name + "\x00" + string(related.UID), true
		}
	}
	if namespace != "" {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if f.Cluster.Get(ctx, types.NamespacedName{Name: namespace}, ns) != nil {
			return "", false
		}
	}
	return "namespace\x00" + namespace, true
}

// requestingPod is the pod the requester's token is bound to (a pod-bound token names its pod, in its
// service account's namespace), or nil.
func requestingPod(req *admission.Request) *corev1.ObjectReference {
	requester := requesterOf(req)
	name, uid, ok := requester.Pod()
	if !ok {
		return nil
	}
	namespace, _, ok := requester.serviceAccount()
	if !ok {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: types.UID(uid)}
}

func apiVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}
