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
	"github.com/leasegate/leasegate/internal/labels"
	"github.com/leasegate/leasegate/internal/lease"
)

const (
	// AgentContainer is the injected container's name.
	AgentContainer = "leasegate-agent"
	// tokenVolume carries the agent's own projected service account token. Containers added by a
	// mutating webhook miss the token mount the ServiceAccount admission plugin adds (it runs first), and
	// the pod may not automount at all; the agent needs a token either way.
	tokenVolume = "leasegate-agent-token"
	tokenPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
	// agentUser is the agent image's non-root user (distroless "nonroot").
	agentUser = 65532
)

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
	// NativeSidecars: init containers with restartPolicy Always (Kubernetes 1.29+).
	NativeSidecars bool
}

// Options are the inputs that do not come from the request.
type Options struct {
	Config *config.Config
	Caps   Capabilities
	// OwnNamespace is leasegate's namespace, never injected so that leasegate can always restart itself.
	OwnNamespace string
}

// Result is a decision. Exactly one of Pod (injected copy) and Skipped (why not) is set.
type Result struct {
	Pod      *corev1.Pod
	Skipped  string
	Warnings []string
}

// Status is the value of the leasegate.io/status annotation on an injected pod.
type Status struct {
	Lease   string `json:"lease"`
	Sidecar string `json:"sidecar"` // "native" or "container"
	Port    int32  `json:"port"`
	Image   string `json:"image"`
}

// Readiness and start modes (annotations leasegate.io/readiness and leasegate.io/start).
const (
	readinessHealth = "health"
	readinessLeader = "leader"
	startImmediate  = "immediate"
	startLeader     = "leader"
)

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
	switch pod.Labels[labels.Inject] {
	case labels.InjectDisabled:
		return "pod opted out (" + labels.Inject + "=" + labels.InjectDisabled + ")"
	case labels.InjectEnabled:
	default:
		if ns.Labels[labels.Inject] != labels.InjectEnabled {
			return "neither the pod nor its namespace opted in"
		}
	}
	if _, ok := pod.Annotations[labels.Status]; ok || hasContainer(pod, AgentContainer) {
		return "already injected"
	}
	return ""
}

// plan is everything injection adds, decided before anything is changed.
type plan struct {
	lease     string
	timing    lease.Timing
	margin    time.Duration
	readiness string
	start     string
	native    bool
	port      int32
	agent     *config.Agent
}

func planFor(pod *corev1.Pod, opts Options) (*plan, error) {
	cfg := opts.Config
	annotations := field.NewPath("metadata", "annotations")
	var errs field.ErrorList

	p := &plan{
		timing:    cfg.Election.Timing(),
		margin:    cfg.Election.ClockSkewMargin.Duration,
		readiness: readinessHealth,
		start:     startImmediate,
		agent:     &cfg.Agent,
	}
	var err error
	if p.lease, err = leaseName(pod); err != nil {
		errs = append(errs, field.Required(annotations.Key(labels.Lease), err.Error()))
	} else if msgs := validation.IsDNS1123Subdomain(p.lease); len(msgs) > 0 {
		errs = append(errs, field.Invalid(annotations.Key(labels.Lease), p.lease, "must be a valid Lease name: "+msgs[0]))
	}

	timingAnnotations := map[lease.TimingField]string{
		lease.LeaseDurationField: labels.LeaseDuration,
		lease.RenewDeadlineField: labels.RenewDeadline,
		lease.RetryPeriodField:   labels.RetryPeriod,
	}
	timingFields := map[lease.TimingField]*time.Duration{
		lease.LeaseDurationField: &p.timing.LeaseDuration,
		lease.RenewDeadlineField: &p.timing.RenewDeadline,
		lease.RetryPeriodField:   &p.timing.RetryPeriod,
	}
	timingValid := true
	for _, f := range []lease.TimingField{lease.LeaseDurationField, lease.RenewDeadlineField, lease.RetryPeriodField} {
		key := timingAnnotations[f]
		value, ok := pod.Annotations[key]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(value)
		if err != nil {
			errs = append(errs, field.Invalid(annotations.Key(key), value, "must be a Go duration such as 15s or 1m"))
			timingValid = false
			continue
		}
		*timingFields[f] = d
	}
	if timingValid {
		if fe := config.TimingFieldError(p.timing.Validate(), func(f lease.TimingField) *field.Path {
			return annotations.Key(timingAnnotations[f])
		}, "retry-period < renew-deadline < lease-duration"); fe != nil {
			fe.Detail += fmt.Sprintf(" (lease duration %s, renew deadline %s, retry period %s; unset annotations come from the leasegate-config defaults)",
				p.timing.LeaseDuration, p.timing.RenewDeadline, p.timing.RetryPeriod)
			errs = append(errs, fe)
		}
	}

	if v, ok := pod.Annotations[labels.Readiness]; ok {
		if v != readinessHealth && v != readinessLeader {
			errs = append(errs, field.NotSupported(annotations.Key(labels.Readiness), v, []string{readinessHealth, readinessLeader}))
		}
		p.readiness = v
	}
	if v, ok := pod.Annotations[labels.Start]; ok {
		if v != startImmediate && v != startLeader {
			errs = append(errs, field.NotSupported(annotations.Key(labels.Start), v, []string{startImmediate, startLeader}))
		}
		p.start = v
	}

	switch cfg.Agent.NativeSidecar {
	case config.NativeSidecarAlways:
		p.native = true
	case config.NativeSidecarAuto:
		p.native = opts.Caps.NativeSidecars
	}
	if p.start == startLeader && !p.native {
		errs = append(errs, field.Forbidden(annotations.Key(labels.Start),
			"start: leader needs the agent as a native sidecar (Kubernetes 1.29+ and agent.nativeSidecar auto or always in leasegate-config)"))
	}
	p.port = freePort(pod, cfg.Agent.Port)

	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("leasegate cannot inject this pod: %s", strings.Join(msgs, "; "))
	}
	return p, nil
}

// freePort is the first port from want upward that no container of the pod declares: the agent shares
// the pod's network namespace, so a clash would stop one of them from listening.
func freePort(pod *corev1.Pod, want int32) int32 {
	used := map[int32]bool{}
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range containers {
			for _, port := range c.Ports {
				used[port.ContainerPort] = true
			}
		}
	}
	for used[want] {
		want++
	}
	return want
}

func (p *plan) apply(pod *corev1.Pod) {
	agentURL := "http://127.0.0.1:" + strconv.Itoa(int(p.port))
	appEnv := append(downwardEnv(),
		corev1.EnvVar{Name: "LEASEGATE_LEASE", Value: p.lease},
		corev1.EnvVar{Name: "LEASEGATE_AGENT_URL", Value: agentURL},
	)
	for i := range pod.Spec.Containers {
		addEnv(&pod.Spec.Containers[i], appEnv)
	}

	agent := p.container()
	if p.native {
		agent.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		// First, so that the agent runs before the other init containers and, with start: leader,
		// holds them back until this pod leads.
		pod.Spec.InitContainers = append([]corev1.Container{agent}, pod.Spec.InitContainers...)
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
	status, _ := json.Marshal(Status{Lease: p.lease, Sidecar: sidecar, Port: p.port, Image: p.agent.Image})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[labels.Status] = string(status)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[labels.Injected] = "true"
}

// container is the agent container.
func (p *plan) container() corev1.Container {
	port := intstr.FromInt32(p.port)
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: port}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   1,
		}
	}
	readinessPeriod := int32(5)
	if p.readiness == readinessLeader {
		// Endpoints follow leadership: probe often, so a Service points at the new leader quickly.
		readinessPeriod = 1
	}
	c := corev1.Container{
		Name:            AgentContainer,
		Image:           p.agent.Image,
		ImagePullPolicy: p.agent.ImagePullPolicy,
		Env: append(downwardEnv(),
			corev1.EnvVar{Name: "LEASEGATE_LEASE", Value: p.lease},
			corev1.EnvVar{Name: "LEASEGATE_LEASE_DURATION", Value: p.timing.LeaseDuration.String()},
			corev1.EnvVar{Name: "LEASEGATE_RENEW_DEADLINE", Value: p.timing.RenewDeadline.String()},
			corev1.EnvVar{Name: "LEASEGATE_RETRY_PERIOD", Value: p.timing.RetryPeriod.String()},
			corev1.EnvVar{Name: "LEASEGATE_CLOCK_SKEW_MARGIN", Value: p.margin.String()},
			corev1.EnvVar{Name: "LEASEGATE_READINESS", Value: p.readiness},
			corev1.EnvVar{Name: "LEASEGATE_LISTEN", Value: ":" + strconv.Itoa(int(p.port))},
		),
		Ports:          []corev1.ContainerPort{{Name: "leasegate", ContainerPort: p.port, Protocol: corev1.ProtocolTCP}},
		Resources:      *p.agent.Resources.DeepCopy(),
		LivenessProbe:  probe("/healthz", 10, 3),
		ReadinessProbe: probe("/readyz", readinessPeriod, 1),
		VolumeMounts:   []corev1.VolumeMount{{Name: tokenVolume, MountPath: tokenPath, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](agentUser),
			RunAsGroup:               ptr.To[int64](agentUser),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if p.start == startLeader {
		// kubelet starts the app containers once this passes: only on the leader. A follower waits as
		// long as it takes, so the threshold is effectively unbounded.
		c.StartupProbe = probe("/leaderz", 1, math.MaxInt32)
	}
	return c
}

// downwardEnv is the pod's identity from the downward API.
func downwardEnv() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	return []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_UID", "metadata.uid"),
	}
}

// addEnv appends each variable the container does not set itself: a user's own value wins.
func addEnv(c *corev1.Container, vars []corev1.EnvVar) {
	for _, v := range vars {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
			c.Env = append(c.Env, v)
		}
	}
}

func tokenVolumeSource() corev1.Volume {
	return corev1.Volume{
		Name: tokenVolume,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			// Readable by the agent's non-root user whatever the pod's fsGroup; only the agent mounts it.
			DefaultMode: ptr.To[int32](0o444),
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
				}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
					Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
				}}}},
			},
		}},
	}
}

func hasContainer(pod *corev1.Pod, name string) bool {
	isAgent := func(c corev1.Container) bool { return c.Name == name }
	return slices.ContainsFunc(pod.Spec.Containers, isAgent) || slices.ContainsFunc(pod.Spec.InitContainers, isAgent)
}
