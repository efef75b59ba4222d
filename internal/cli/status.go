// Package cli is kubectl-leasegate: what an operator asks of leasegate (who leads, is it healthy, what
// would a failover cost, who was fenced, is the install sound), gathered from the API server into plain
// values and rendered by pure functions, so the output is tested with golden files.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
)

// StatusAPIVersion and StatusKind name the shape of `status -o json|yaml`: fields are only ever added
// within a version.
const (
	StatusAPIVersion = "leasegate.io/v1alpha1"
	StatusKind       = "LeaseStatusList"
)

// StatusList is what `kubectl leasegate status` reports.
type StatusList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// ObservedAt is when the report was gathered; ages are relative to it.
	ObservedAt time.Time     `json:"observedAt"`
	Items      []LeaseStatus `json:"items"`
}

// LeaseStatus is one lease leasegate manages or guards.
type LeaseStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Managed: leasegate provisioned it for injected pods.
	Managed bool `json:"managed"`
	// Holder is the lease's holderIdentity, HolderPod the pod it names ("" when none does).
	Holder    string `json:"holder"`
	HolderPod string `json:"holderPod,omitempty"`
	// State is held, expired or released, judged with the fence's clock skew margin.
	State       string     `json:"state"`
	Since       *time.Time `json:"since,omitempty"`
	RenewTime   *time.Time `json:"renewTime,omitempty"`
	Transitions int32      `json:"transitions"`
	// LeaseDurationSeconds is the lease's own; ClockSkewMarginSeconds the fence's.
	LeaseDurationSeconds   int32   `json:"leaseDurationSeconds"`
	ClockSkewMarginSeconds float64 `json:"clockSkewMarginSeconds"`
	// CrashTakeoverSeconds is the most a crashed holder keeps the others out: lease duration + margin. A
	// graceful stop releases the lease and costs a watch round trip instead.
	CrashTakeoverSeconds float64 `json:"crashTakeoverSeconds"`
	// RenewDeadline and RetryPeriod are what the candidates' agents were given, when they all agree.
	RenewDeadline string `json:"renewDeadline,omitempty"`
	RetryPeriod   string `json:"retryPeriod,omitempty"`
	// Candidates are the injected pods that elect on the lease.
	Candidates []Candidate `json:"candidates"`
	// Verdict compares what the candidates' agents say with the lease: agrees, stale (an agent's view
	// lags the lease), two-claim (two agents say they lead), unknown (no agent answered) or none (no
	// candidates: a lease another controller elects on).
	Verdict string `json:"verdict"`
	// Guards are the guards of leasegate-config that fence by this lease.
	Guards []string `json:"guards"`
	// DenialsLastHour are LeaderGateDenied Events naming this lease within the hour before ObservedAt.
	DenialsLastHour int `json:"denialsLastHour"`
	// Handover is a handover requested on the lease and not yet taken (kubectl leasegate handover).
	Handover *HandoverRequest `json:"handover,omitempty"`
}

// HandoverRequest is a pending handover: the holder identity asked to step down, and the pod asked to
// take over ("" for any other candidate).
type HandoverRequest struct {
	From string `json:"from"`
	To   string `json:"to,omitempty"`
}

// Candidate is one pod that elects on a lease, and what its agent says.
type Candidate struct {
	Pod   string `json:"pod"`
	Node  string `json:"node,omitempty"`
	Ready bool   `json:"ready"`
	// Agent is the agent's /leader answer; AgentError why there is none.
	Agent      *lease.Status `json:"agent,omitempty"`
	AgentError string        `json:"agentError,omitempty"`
}

// Verdicts of LeaseStatus.Verdict.
const (
	VerdictAgrees   = "agrees"
	VerdictStale    = "stale"
	VerdictTwoClaim = "two-claim"
	VerdictUnknown  = "unknown"
	VerdictNone     = "none"
)

// AskAgent returns an injected pod's agent's /leader answer for lease (several elections answer under
// /leader/<name>; the one on this lease is picked).
type AskAgent func(ctx context.Context, pod *corev1.Pod, lease string) (*lease.Status, error)

// StatusOptions say what to gather.
type StatusOptions struct {
	// Namespace limits the report; "" is every namespace.
	Namespace string
	// Lease limits it to one lease name.
	Lease string
	// LeasegateNamespace and ConfigName locate leasegate-config.
	LeasegateNamespace, ConfigName string
	// Ask queries agents; nil skips them (verdict unknown).
	Ask AskAgent
	// Now is the instant ages and expiry are judged at.
	Now time.Time
}

// GatherStatus reads the leases leasegate manages or guards in scope, their candidates and agents, the
// guards and the last hour's denials.
func GatherStatus(ctx context.Context, cs kubernetes.Interface, opts StatusOptions) (*StatusList, error) {
	cfg, err := loadConfig(ctx, cs, opts.LeasegateNamespace, opts.ConfigName)
	if err != nil {
		return nil, err
	}
	margin := cfg.Election.ClockSkewMargin.Duration
	leases, err := cs.CoordinationV1().Leases(opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing leases: %w", err)
	}
	pods, err := cs.CoreV1().Pods(opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: contract.Injected + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing injected pods: %w", err)
	}
	denials, err := denialNotes(ctx, cs, opts.Namespace, opts.Now.Add(-time.Hour))
	if err != nil {
		return nil, err
	}

	list := &StatusList{APIVersion: StatusAPIVersion, Kind: StatusKind, ObservedAt: opts.Now.UTC(), Items: []LeaseStatus{}}
	for i := range leases.Items {
		l := &leases.Items[i]
		if opts.Lease != "" && l.Name != opts.Lease {
			continue
		}
		guards := guardsOf(cfg, l.Namespace, l.Name)
		managed := l.Labels[contract.Managed] == "true"
		if !managed && len(guards) == 0 {
			continue
		}
		s := leaseStatus(l, margin, opts.Now)
		s.Managed, s.Guards = managed, guards
		s.DenialsLastHour = countDenials(denials, l.Namespace, l.Name)
		for j := range pods.Items {
			pod := &pods.Items[j]
			if pod.Namespace == l.Namespace && slices.Contains(inject.StatusOf(pod).LeaseNames(), l.Name) {
				s.addCandidate(ctx, pod, opts.Ask)
			}
		}
		s.Verdict = verdict(&s)
		list.Items = append(list.Items, s)
	}
	slices.SortFunc(list.Items, func(a, b LeaseStatus) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return list, nil
}

// guardsOf are the guards that fence by Lease namespace/name: named as "<namespace>/<name>", or as
// "<name>" in the namespace of each request, when they gate requests in that namespace.
func guardsOf(cfg *config.Config, namespace, name string) []string {
	guards := []string{}
	for _, g := range cfg.Guards {
		if g.LeaseKind == contract.LeaseKindMultiClusterLease {
			continue
		}
		leaseNamespace, leaseName, qualified := strings.Cut(g.Lease, "/")
		if !qualified {
			leaseNamespace, leaseName = "", g.Lease
		}
		switch {
		case leaseName != name:
		case qualified && leaseNamespace == namespace,
			!qualified && (len(g.Namespaces) == 0 || slices.Contains(g.Namespaces, namespace)):
			guards = append(guards, g.Name)
		}
	}
	return guards
}

// loadConfig reads leasegate-config as the webhook does; missing, the defaults are in force.
func loadConfig(ctx context.Context, cs kubernetes.Interface, namespace, name string) (*config.Config, error) {
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return config.DefaultConfig(), nil
	case err != nil:
		return nil, fmt.Errorf("reading %s/%s (--leasegate-namespace, --config-name): %w", namespace, name, err)
	}
	cfg, err := config.Load([]byte(cm.Data[config.Key]))
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, err)
	}
	return cfg, nil
}

func leaseStatus(l *coordinationv1.Lease, margin time.Duration, now time.Time) LeaseStatus {
	j := leaseapi.Judge(&l.Spec, now, margin)
	s := LeaseStatus{
		Namespace: l.Namespace, Name: l.Name, Holder: j.Holder, State: j.State.String(),
		Transitions:            ptr.Deref(l.Spec.LeaseTransitions, 0),
		LeaseDurationSeconds:   ptr.Deref(l.Spec.LeaseDurationSeconds, 0),
		ClockSkewMarginSeconds: margin.Seconds(),
		Candidates:             []Candidate{},
		Guards:                 []string{},
	}
	s.CrashTakeoverSeconds = lease.TakeoverBudget(time.Duration(s.LeaseDurationSeconds)*time.Second, margin).Seconds()
	if pod, _, ok := lease.ParseIdentity(j.Holder); ok {
		s.HolderPod = pod
	}
	if t := l.Spec.AcquireTime; t != nil {
		s.Since = ptr.To(t.UTC())
	}
	if t := l.Spec.RenewTime; t != nil {
		s.RenewTime = ptr.To(t.UTC())
	}
	if h, ok := lease.HandoverOf(l.Annotations); ok {
		s.Handover = &HandoverRequest{From: h.From, To: h.To}
	}
	return s
}

func (s *LeaseStatus) addCandidate(ctx context.Context, pod *corev1.Pod, ask AskAgent) {
	c := Candidate{Pod: pod.Name, Node: pod.Spec.NodeName, Ready: isReady(pod), AgentError: "not asked"}
	if ask != nil {
		if status, err := ask(ctx, pod, s.Name); err != nil {
			c.AgentError = err.Error()
		} else {
			c.Agent, c.AgentError = status, ""
		}
	}
	renew, retry := "", ""
	elections := agentElections(pod)
	if i := slices.IndexFunc(elections, func(e lease.ElectionSpec) bool { return e.Lease == s.Name }); i >= 0 {
		renew, retry = elections[i].RenewDeadline.Duration.String(), elections[i].RetryPeriod.Duration.String()
	}
	if len(s.Candidates) > 0 && (renew != s.RenewDeadline || retry != s.RetryPeriod) {
		renew, retry = "", "" // the candidates disagree: no one timing to show
	}
	s.RenewDeadline, s.RetryPeriod = renew, retry
	s.Candidates = append(s.Candidates, c)
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentElections are the elections injected into pod's agent, as its environment gives them: one from
// LEASEGATE_LEASE and the timing variables, or LEASEGATE_ELECTIONS. They are read, not validated (kubectl
// leasegate check reports timing the agent would refuse); nil for a pod without an agent.
func agentElections(pod *corev1.Pod) []lease.ElectionSpec {
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range containers {
			if c.Name != inject.AgentContainer {
				continue
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if elections, several := env[contract.EnvElections]; several {
				var specs []lease.ElectionSpec
				if json.Unmarshal([]byte(elections), &specs) != nil {
					return []lease.ElectionSpec{{}} // unreadable: timing no agent accepts
				}
				return specs
			}
			var t lease.Timing
			t.LeaseDuration, _ = time.ParseDuration(env[contract.EnvLeaseDuration])
			t.RenewDeadline, _ = time.ParseDuration(env[contract.EnvRenewDeadline])
			t.RetryPeriod, _ = time.ParseDuration(env[contract.EnvRetryPeriod])
			return []lease.ElectionSpec{lease.NewElectionSpec(env[contract.EnvLease], env[contract.EnvLease], t, "")}
		}
	}
	return nil
}

// verdict compares the agents' answers with the lease: two agents that say they lead are the one thing an
// election must never show; an agent that names another holder than the lease is stale.
func verdict(s *LeaseStatus) string {
	if len(s.Candidates) == 0 {
		return VerdictNone
	}
	answered, leading, stale := 0, 0, false
	for _, c := range s.Candidates {
		if c.Agent == nil {
			continue
		}
		answered++
		if c.Agent.IsLeader {
			leading++
		}
		if c.Agent.Holder != s.Holder || c.Agent.IsLeader && s.State != lease.Held.String() {
			stale = true
		}
	}
	switch {
	case leading > 1:
		return VerdictTwoClaim
	case answered == 0:
		return VerdictUnknown
	case stale:
		return VerdictStale
	}
	return VerdictAgrees
}

// denialNotes are the notes of the LeaderGateDenied Events in scope seen since since.
func denialNotes(ctx context.Context, cs kubernetes.Interface, namespace string, since time.Time) ([]string, error) {
	events, err := cs.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + contract.EventReasonDenied})
	if err != nil {
		return nil, fmt.Errorf("listing %s Events: %w", contract.EventReasonDenied, err)
	}
	var notes []string
	for _, e := range events.Items {
		last := e.EventTime.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if !last.Before(since) {
			notes = append(notes, e.Note)
		}
	}
	return notes, nil
}

// countDenials counts the notes that name lease namespace/name: the fence's message says
// "lease <namespace>/<name> is held by".
func countDenials(notes []string, namespace, name string) int {
	needle := "lease " + namespace + "/" + name + " is held by"
	n := 0
	for _, note := range notes {
		if strings.Contains(note, needle) {
			n++
		}
	}
	return n
}

// AgentViaProxy asks agents through the API server's pod proxy (`pods/proxy` get): the agent's port is
// in the pod's status annotation.
func AgentViaProxy(cs kubernetes.Interface) AskAgent {
	return func(ctx context.Context, pod *corev1.Pod, leaseName string) (*lease.Status, error) {
		port := strconv.Itoa(int(inject.StatusOf(pod).Port))
		body, err := cs.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, port, contract.AgentLeaderPath, nil).DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		return PickElection(body, pod.Namespace+"/"+leaseName)
	}
}

// PickElection reads an agent's /leader answer, one election or {"elections": [...]}, and returns the
// election on the lease named "<namespace>/<name>".
func PickElection(body []byte, leaseKey string) (*lease.Status, error) {
	var answer struct {
		lease.Status
		Elections []lease.Status `json:"elections"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("the agent's /leader is not JSON: %w", err)
	}
	if answer.Lease == leaseKey {
		return &answer.Status, nil
	}
	for i := range answer.Elections {
		if answer.Elections[i].Lease == leaseKey {
			return &answer.Elections[i], nil
		}
	}
	return nil, fmt.Errorf("the agent runs no election on lease %s", leaseKey)
}
