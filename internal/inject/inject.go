// Package inject decides whether and how a pod gets the leader agent (a pure function of the pod, its
// namespace, the configuration and the cluster's capabilities), serves that decision as a mutating
// admission webhook, and provisions the Lease and RBAC the injected agents need.
package inject

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

const (
	// AgentContainer is the injected container's name.
	AgentContainer = "leasegate-agent"
	// tokenVolume carries the agent's own projected service account token. Containers added by a
	// mutating webhook miss the token mount the ServiceAccount admission plugin adds (it runs first), and
	// the pod may not automount at all; the agent needs a token either way.
	tokenVolume = "leasegate-agent-token"
	tokenPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
	// tokenExpirationSeconds is what the API server gives the default service account token volume:
	// kubelet refreshes it at 80% of its life, and 3607 (an hour and seven seconds) is recognisable in
	// audit logs as a projected, auto-rotated token.
	tokenExpirationSeconds = 3607
)

// alreadyInjected is why a pod that carries the agent or the status annotation is not injected again:
// leasegate's own output when a later webhook makes the API server call it again, or a pod made so.
const alreadyInjected = "already injected"

// neverInjected are namespaces whose pods are never touched, whatever their labels say: the control
// plane's own, so that a broken webhook can never stop a cluster from healing itself.
var neverInjected = []string{"kube-system", "kube-public", "kube-node-lease"}

// Namespace is what injection needs to know about the pod's namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Capabilities are what the API server supports, learned once at start-up.
type Capabilities struct {
	// MultiClusterLeases: the MultiClusterLease CRD is installed (the chart's crds/).
	MultiClusterLeases bool
}

// Options are the inputs that do not come from the request.
type Options struct {
	Config *config.Config
	Caps   Capabilities
	// OwnNamespace is leasegate's namespace, never injected so that leasegate can always restart itself.
	OwnNamespace string
	// Version is the leasegate release injecting (internal/version.Version), recorded in the status.
	Version string
}

// Result is a decision. Exactly one of Pod (injected copy) and Skipped (why not) is set.
type Result struct {
	Pod      *corev1.Pod
	Skipped  string
	Warnings []string
}

// Status is the value of the leasegate.io/status annotation on an injected pod: a record for people and
// tools that show pods (kubectl leasegate). Anyone who may update the pod can rewrite it, so no decision
// reads it; they read GivenTo's Given, a type of its own, from the agent container's environment.
type Status struct {
	// Lease is the pod's lease; Leases, instead, those of a pod with several elections.
	Lease   string   `json:"lease,omitempty"`
	Leases  []string `json:"leases,omitempty"`
	Sidecar string   `json:"sidecar"` // "native" or "container"
	Port    int32    `json:"port"`
	Image   string   `json:"image"`
	// Gate is the mutation gate, when there is one.
	Gate *GateStatus `json:"gate,omitempty"`
	// RestartOnLoss is the lease whose loss makes the pod evict itself (leasegate.io/on-loss: restart):
	// its service account may evict it, and the webhook lets only the pod itself do so, once it lost it.
	RestartOnLoss string `json:"restartOnLoss,omitempty"`
	// LeaseKind is MultiClusterLease when the pod elects across clusters (leasegate.io/lease-kind): its
	// leases are MultiClusterLeases, provisioned as such. Empty: Leases.
	LeaseKind string `json:"leaseKind,omitempty"`
	// LeaseSeconds is the lease duration, in whole seconds as the agent writes it, of each of the pod's
	// leases (as GivenTo reads it from the environment, which the lease guard trusts instead).
	LeaseSeconds map[string]int32 `json:"leaseSeconds,omitempty"`
	// Version is the leasegate release that injected the pod, so kubectl leasegate check can find agents
	// older than the webhook. Absent on pods injected before releases recorded it.
	Version string `json:"version,omitempty"`
}

// LeaseNames are the leases the pod elects on: its lease, or those of its elections.
func (s Status) LeaseNames() []string {
	if s.Lease != "" {
		return []string{s.Lease}
	}
	return s.Leases
}

// StatusOf reads an injected pod's status annotation, for display; the zero Status for any other pod.
// Decisions read GivenTo.
func StatusOf(pod *corev1.Pod) Status {
	var s Status
	_ = json.Unmarshal([]byte(pod.Annotations[contract.Status]), &s)
	return s
}

// Inject decides what happens to pod at admission. An error is a denial: its message is what the user
// sees, and names the annotation and the rule.
func Inject(pod *corev1.Pod, ns Namespace, opts Options) (Result, error) {
	if reason := skipReason(pod, ns, opts.OwnNamespace); reason != "" {
		return Result{Skipped: reason}, nil
	}
	if pod.Spec.HostNetwork {
		// The agent's port would be shared by every hostNetwork pod on the node and by the node's own
		// services. Skipping with a warning keeps namespace-wide opt-in from blocking node agents.
		return Result{
			Skipped:  "hostNetwork pod",
			Warnings: []string{"leasegate: hostNetwork pods are not injected (the agent's port would be shared with the node); label the pod leasegate.io/inject=disabled to silence this"},
		}, nil
	}

	plan, err := planFor(pod, opts)
	if err != nil {
		return Result{}, err
	}
	out := pod.DeepCopy()
	plan.apply(out)
	return Result{Pod: out}, nil
}

// skipReason says why a pod is not injected, or "" when it is to be.
func skipReason(pod *corev1.Pod, ns Namespace, ownNamespace string) string {
	if slices.Contains(neverInjected, ns.Name) || ns.Name == ownNamespace {
		return "namespace " + ns.Name + " is never injected"
	}
	switch pod.Labels[contract.Inject] {
	case contract.InjectDisabled:
		return "pod opted out (" + contract.Inject + "=" + contract.InjectDisabled + ")"
	case contract.InjectEnabled:
	default:
		if ns.Labels[contract.Inject] != contract.InjectEnabled {
			return "neither the pod nor its namespace opted in"
		}
	}
	if _, ok := pod.Annotations[contract.Status]; ok || hasContainer(pod, AgentContainer) {
		return alreadyInjected
	}
	return ""
}

// plan is everything injection adds, decided before anything is changed.
type plan struct {
	// elections has one election, named after its lease, unless the pod lists several (multi).
	elections []election
	multi     bool
	// gate is the mutation gate, when the pod asks for one.
	gate *gatePlan
	// restartOnLoss: the agent evicts the pod when it loses the start election's lease.
	restartOnLoss bool
	// multiCluster: every election is on a MultiClusterLease (leasegate.io/lease-kind).
	multiCluster bool
	margin       time.Duration
	native       bool
	port         int32
	agent        *config.Agent
	version      string
}

// annotationsPath is metadata.annotations, where every error of injection points. A Path is never
// changed once made (Key and Child make new ones), so one serves every request.
var annotationsPath = field.NewPath("metadata", "annotations")

var takeoverPath = annotationsPath.Key(contract.Takeover)

func planFor(pod *corev1.Pod, opts Options) (*plan, error) {
	cfg := opts.Config
	annotations := annotationsPath
	var errs field.ErrorList

	p := &plan{
		margin:  cfg.Election.ClockSkewMargin.Duration,
		agent:   &cfg.Agent,
		version: opts.Version,
	}
	baseLease, err := leaseName(pod)
	if err != nil {
		errs = append(errs, field.Required(annotations.Key(contract.Lease), err.Error()))
	} else if msgs := validation.IsDNS1123Subdomain(baseLease); len(msgs) > 0 {
		errs = append(errs, field.Invalid(annotations.Key(contract.Lease), baseLease, "must be a valid Lease name: "+msgs[0]))
	}
	podDefaults, timingErrs := podTiming(pod.Annotations, annotations)
	errs = append(errs, timingErrs...)

	if value, ok := pod.Annotations[contract.Elections]; ok {
		p.multi = true
		for _, key := range []string{contract.Readiness, contract.Start} {
			if _, set := pod.Annotations[key]; set {
				errs = append(errs, field.Forbidden(annotations.Key(key), fmt.Sprintf(
					"with %s, set %s on one election instead: a pod with several elections decides it per election",
					contract.Elections, strings.TrimPrefix(key, "leasegate.io/"))))
			}
		}
		var electionErrs field.ErrorList
		p.elections, electionErrs = planElections(value, baseLease, podDefaults, cfg.Election.Timing(), p.margin, annotations.Key(contract.Elections))
		errs = append(errs, electionErrs...)
	} else {
		e := election{name: baseLease, lease: baseLease, readiness: contract.ReadinessHealth, start: contract.StartImmediate}
		if len(timingErrs) == 0 {
			var settleErrs field.ErrorList
			e.timing, settleErrs = settleTiming(podDefaults, cfg.Election.Timing(), p.margin, func(f lease.TimingField) *field.Path {
				return annotations.Key(timingFields[f].annotation)
			}, takeoverPath)
			errs = append(errs, settleErrs...)
		}
		if v, ok := pod.Annotations[contract.Readiness]; ok {
			if v != contract.ReadinessHealth && v != contract.ReadinessLeader {
				errs = append(errs, field.NotSupported(annotations.Key(contract.Readiness), v, []string{contract.ReadinessHealth, contract.ReadinessLeader}))
			}
			e.readiness = v
		}
		if v, ok := pod.Annotations[contract.Start]; ok {
			if v != contract.StartImmediate && v != contract.StartLeader {
				errs = append(errs, field.NotSupported(annotations.Key(contract.Start), v, []string{contract.StartImmediate, contract.StartLeader}))
			}
			e.start = v
		}
		p.elections = []election{e}
	}

	// auto and always are one since every supported Kubernetes has native sidecars; both stay valid so
	// that an existing leasegate-config keeps loading.
	p.native = cfg.Agent.NativeSidecar != config.NativeSidecarNever
	switch v := pod.Annotations[contract.OnLoss]; v {
	case "", contract.OnLossKeep:
	case contract.OnLossRestart:
		p.restartOnLoss = true
		if !p.multi && pod.Annotations[contract.Start] == "" {
			p.elections[0].start = contract.StartLeader // restart implies start: leader
		}
		if p.startElection() == nil {
			errs = append(errs, field.Forbidden(annotations.Key(contract.OnLoss),
				"on-loss: restart brings the pod back as a follower that waits to lead: it needs start: leader (on one election, with several)"))
		}
	default:
		errs = append(errs, field.NotSupported(annotations.Key(contract.OnLoss), v, []string{contract.OnLossKeep, contract.OnLossRestart}))
	}
	if p.startElection() != nil && !p.native {
		key := contract.Start
		if p.multi {
			key = contract.Elections
		}
		errs = append(errs, field.Forbidden(annotations.Key(key),
			"start: leader needs the agent as a native sidecar: set agent.nativeSidecar to auto in leasegate-config (it is never)"))
	}
	var kindErrs field.ErrorList
	p.multiCluster, kindErrs = planLeaseKind(pod.Annotations, p, opts.Caps, annotations)
	errs = append(errs, kindErrs...)
	p.port = freePort(pod, cfg.Agent.Port)
	var gateErrs field.ErrorList
	p.gate, gateErrs = planGate(pod, p.elections, p.port, annotations)
	errs = append(errs, gateErrs...)

	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("leasegate cannot inject this pod: %s", strings.Join(msgs, "; "))
	}
	return p, nil
}

// planLeaseKind reads leasegate.io/lease-kind. A MultiClusterLease needs its CRD served, and a lease
// duration the CRD admits: it is the global backend's TTL, in whole seconds of at least
// v1alpha1.MinLeaseDurationSeconds.
func planLeaseKind(podAnnotations map[string]string, p *plan, caps Capabilities, annotations *field.Path) (bool, field.ErrorList) {
	path := annotations.Key(contract.LeaseKind)
	switch v, ok := podAnnotations[contract.LeaseKind]; {
	case !ok || v == contract.LeaseKindLease:
		return false, nil
	case v != contract.LeaseKindMultiClusterLease:
		return false, field.ErrorList{field.NotSupported(path, v, []string{contract.LeaseKindLease, contract.LeaseKindMultiClusterLease})}
	case !caps.MultiClusterLeases:
		return false, field.ErrorList{field.Invalid(path, v, fmt.Sprintf(
			"this API server does not serve %s: install leasegate's CRDs (the chart's crds/, or config/crd) and restart leasegate-webhook",
			v1alpha1.GroupVersion.WithResource(v1alpha1.Resource).GroupResource()))}
	}
	var errs field.ErrorList
	shortest := time.Duration(v1alpha1.MinLeaseDurationSeconds) * time.Second
	for _, e := range p.elections {
		if e.timing.LeaseDuration < shortest {
			where := annotations.Key(contract.LeaseDuration)
			if p.multi {
				where = annotations.Key(contract.Elections).Child(e.name, "leaseDuration")
			}
			errs = append(errs, field.Invalid(where, e.timing.LeaseDuration.String(), fmt.Sprintf(
				"a MultiClusterLease's lease duration is the global backend's TTL and must be at least %s; set it (or a takeover objective of at least %s plus the clock skew margin)",
				shortest, shortest)))
		}
	}
	return true, errs
}

// freePort is the first port from want upward that no container of the pod declares: the agent shares
// the pod's network namespace, so a clash would stop one of them from listening.
func freePort(pod *corev1.Pod, want int32) int32 {
	for declared(pod.Spec.InitContainers, want) || declared(pod.Spec.Containers, want) {
		want++
	}
	return want
}

// declared reports whether a container declares port.
func declared(containers []corev1.Container, port int32) bool {
	for i := range containers {
		for _, p := range containers[i].Ports {
			if p.ContainerPort == port {
				return true
			}
		}
	}
	return false
}

// startElection is the election whose leadership the app containers wait for (start: leader), or nil.
func (p *plan) startElection() *election {
	for i := range p.elections {
		if p.elections[i].start == contract.StartLeader {
			return &p.elections[i]
		}
	}
	return nil
}

func (p *plan) apply(pod *corev1.Pod) {
	agentURL := "http://127.0.0.1:" + strconv.Itoa(int(p.port))
	appEnv := downwardEnv(len(p.elections) + 1)
	if p.multi {
		for _, e := range p.elections {
			appEnv = append(appEnv, corev1.EnvVar{Name: envName(e.name), Value: e.lease})
		}
	} else {
		appEnv = append(appEnv, corev1.EnvVar{Name: contract.EnvLease, Value: p.elections[0].lease})
	}
	appEnv = append(appEnv, corev1.EnvVar{Name: contract.EnvAgentURL, Value: agentURL})
	for i := range pod.Spec.Containers {
		addEnv(&pod.Spec.Containers[i], appEnv)
	}

	agent := p.container()
	if p.gate != nil {
		p.gate.apply(pod, &agent)
	}
	if p.native {
		agent.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		// First, so that the agent runs before the other init containers and, with start: leader,
		// holds them back until this pod leads.
		initContainers := make([]corev1.Container, 1+len(pod.Spec.InitContainers))
		initContainers[0] = agent
		copy(initContainers[1:], pod.Spec.InitContainers)
		pod.Spec.InitContainers = initContainers
	} else {
		pod.Spec.Containers = append(pod.Spec.Containers, agent)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, tokenVolumeSource())
	if pod.Spec.ServiceAccountName == "" {
		// The ServiceAccount admission plugin, which runs before webhooks, sets this in a standard
		// cluster; where it is off, a projected token still needs a named account.
		pod.Spec.ServiceAccountName = "default"
	}

	sidecar := "container"
	if p.native {
		sidecar = "native"
	}
	recorded := Status{Sidecar: sidecar, Port: p.port, Image: p.agent.Image, Version: p.version}
	if p.gate != nil {
		recorded.Gate = p.gate.status()
	}
	if p.restartOnLoss {
		recorded.RestartOnLoss = p.startElection().lease
	}
	if p.multiCluster {
		recorded.LeaseKind = contract.LeaseKindMultiClusterLease
	}
	if p.multi {
		for _, e := range p.elections {
			recorded.Leases = append(recorded.Leases, e.lease)
		}
	} else {
		recorded.Lease = p.elections[0].lease
	}
	recorded.LeaseSeconds = make(map[string]int32, len(p.elections))
	for _, e := range p.elections {
		recorded.LeaseSeconds[e.lease] = int32(e.timing.LeaseDuration / time.Second)
	}
	status, _ := json.Marshal(recorded)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[contract.Status] = string(status)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[contract.Injected] = "true"
}

// container is the agent container.
func (p *plan) container() corev1.Container {
	port := intstr.FromInt32(p.port)
	// The agent's probes, allocated together: one allocation instead of two a probe.
	var probes *struct {
		probe [3]corev1.Probe
		get   [3]corev1.HTTPGetAction
	}
	n := 0
	probe := func(path string, period, failures int32) *corev1.Probe {
		if probes == nil {
			probes = &struct {
				probe [3]corev1.Probe
				get   [3]corev1.HTTPGetAction
			}{}
		}
		get, pr := &probes.get[n], &probes.probe[n]
		n++
		*get = corev1.HTTPGetAction{Path: path, Port: port}
		*pr = corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: get},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   1,
		}
		return pr
	}
	readinessPeriod := int32(5)
	if slices.ContainsFunc(p.elections, func(e election) bool { return e.readiness == contract.ReadinessLeader }) {
		// Endpoints follow leadership: probe often, so a Service points at the new leader quickly.
		readinessPeriod = 1
	}
	var resources corev1.ResourceRequirements
	p.agent.Resources.DeepCopyInto(&resources)
	c := corev1.Container{
		Name:                     AgentContainer,
		Image:                    p.agent.Image,
		ImagePullPolicy:          p.agent.ImagePullPolicy,
		Env:                      p.agentEnv(),
		Ports:                    []corev1.ContainerPort{{Name: "leasegate", ContainerPort: p.port, Protocol: corev1.ProtocolTCP}},
		Resources:                resources,
		LivenessProbe:            probe(contract.AgentHealthPath, 10, 3),
		ReadinessProbe:           probe(contract.AgentReadyPath, readinessPeriod, 1),
		VolumeMounts:             []corev1.VolumeMount{{Name: tokenVolume, MountPath: tokenPath, ReadOnly: true}},
		SecurityContext:          p.agent.SecurityContext.DeepCopy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if e := p.startElection(); e != nil {
		// kubelet starts the app containers once this passes: only on the leader. A follower waits as
		// long as it takes, so the threshold is effectively unbounded.
		path := contract.AgentLeadingPath
		if p.multi {
			path += "/" + e.name
		}
		c.StartupProbe = probe(path, 1, math.MaxInt32)
	}
	return c
}

// agentEnv configures the agent: what to elect on (one lease with its timing and readiness, or
// LEASEGATE_ELECTIONS), the clock skew margin the fence uses too, and the port.
func (p *plan) agentEnv() []corev1.EnvVar {
	// Room for the election's four, the margin, the lease kind, readiness, on loss (two), the address, and
	// the gate's six (gatePlan.apply): one allocation.
	env := append(downwardEnv(16), p.electionEnv()...)
	env = append(env, corev1.EnvVar{Name: contract.EnvClockSkewMargin, Value: p.margin.String()})
	if p.multiCluster {
		env = append(env, corev1.EnvVar{Name: contract.EnvLeaseKind, Value: contract.LeaseKindMultiClusterLease})
	}
	if !p.multi {
		env = append(env, corev1.EnvVar{Name: contract.EnvReadiness, Value: p.elections[0].readiness})
	}
	if p.restartOnLoss {
		env = append(env, corev1.EnvVar{Name: contract.EnvOnLoss, Value: contract.OnLossRestart})
		if p.multi {
			env = append(env, corev1.EnvVar{Name: contract.EnvOnLossElection, Value: p.startElection().name})
		}
	}
	return append(env, corev1.EnvVar{Name: contract.EnvListen, Value: ":" + strconv.Itoa(int(p.port))})
}

// electionEnv is what to elect on: one lease and its timing, or LEASEGATE_ELECTIONS.
func (p *plan) electionEnv() []corev1.EnvVar {
	if p.multi {
		specs := make([]lease.ElectionSpec, len(p.elections))
		for i, e := range p.elections {
			readiness := ""
			if e.readiness == contract.ReadinessLeader {
				readiness = contract.ReadinessLeader
			}
			specs[i] = lease.NewElectionSpec(e.name, e.lease, e.timing, readiness)
		}
		return []corev1.EnvVar{{Name: contract.EnvElections, Value: lease.EncodeElections(specs)}}
	}
	e := p.elections[0]
	return []corev1.EnvVar{
		{Name: contract.EnvLease, Value: e.lease},
		{Name: contract.EnvLeaseDuration, Value: e.timing.LeaseDuration.String()},
		{Name: contract.EnvRenewDeadline, Value: e.timing.RenewDeadline.String()},
		{Name: contract.EnvRetryPeriod, Value: e.timing.RetryPeriod.String()},
	}
}

// downwardEnv is the pod's identity and address from the downward API, in a slice with room for spare
// more. Its sources are allocated together, one allocation for the four.
func downwardEnv(spare int) []corev1.EnvVar {
	refs := &struct {
		source [4]corev1.EnvVarSource
		field  [4]corev1.ObjectFieldSelector
	}{}
	field := func(i int, name, path string) corev1.EnvVar {
		refs.field[i] = corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}
		refs.source[i] = corev1.EnvVarSource{FieldRef: &refs.field[i]}
		return corev1.EnvVar{Name: name, ValueFrom: &refs.source[i]}
	}
	return append(make([]corev1.EnvVar, 0, 4+spare),
		field(0, contract.EnvPodName, "metadata.name"),
		field(1, contract.EnvPodNamespace, "metadata.namespace"),
		field(2, contract.EnvPodUID, "metadata.uid"),
		field(3, contract.EnvPodIP, "status.podIP"),
	)
}

// addEnv appends each variable the container does not set itself: a user's own value wins.
func addEnv(c *corev1.Container, vars []corev1.EnvVar) {
	c.Env = slices.Grow(c.Env, len(vars))
	for _, v := range vars {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
			c.Env = append(c.Env, v)
		}
	}
}

func tokenVolumeSource() corev1.Volume {
	// Every part of the volume in one allocation, not eleven.
	v := &struct {
		projected   corev1.ProjectedVolumeSource
		mode        int32
		expiration  int64
		sources     [3]corev1.VolumeProjection
		token       corev1.ServiceAccountTokenProjection
		configMap   corev1.ConfigMapProjection
		caItems     [1]corev1.KeyToPath
		downwardAPI corev1.DownwardAPIProjection
		files       [1]corev1.DownwardAPIVolumeFile
		namespace   corev1.ObjectFieldSelector
	}{
		// Readable by the agent's non-root user whatever the pod's fsGroup; only the agent mounts it.
		mode:       0o444,
		expiration: tokenExpirationSeconds,
		caItems:    [1]corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
		namespace:  corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
	}
	v.token = corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &v.expiration}
	v.configMap = corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: v.caItems[:]}
	v.files[0] = corev1.DownwardAPIVolumeFile{Path: "namespace", FieldRef: &v.namespace}
	v.downwardAPI = corev1.DownwardAPIProjection{Items: v.files[:]}
	v.sources = [3]corev1.VolumeProjection{{ServiceAccountToken: &v.token}, {ConfigMap: &v.configMap}, {DownwardAPI: &v.downwardAPI}}
	v.projected = corev1.ProjectedVolumeSource{DefaultMode: &v.mode, Sources: v.sources[:]}
	return corev1.Volume{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Projected: &v.projected}}
}

func hasContainer(pod *corev1.Pod, name string) bool {
	isAgent := func(c corev1.Container) bool { return c.Name == name }
	return slices.ContainsFunc(pod.Spec.Containers, isAgent) || slices.ContainsFunc(pod.Spec.InitContainers, isAgent)
}
