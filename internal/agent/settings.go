package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/gate/rules"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/leaseelection"
)

// Readiness says what the agent's /readyz means.
type Readiness string

const (
	// ReadinessHealth: ready while the agent works, whoever leads. Services keep followers, so clients
	// that talk to any replica keep working through a failover.
	ReadinessHealth Readiness = contract.ReadinessHealth
	// ReadinessLeader: ready only while this pod leads, for active/passive routing through a Service.
	ReadinessLeader Readiness = contract.ReadinessLeader
)

// Settings is the agent's whole configuration. Each field comes from an environment variable and may be
// overridden by the flag of the same meaning; the webhook injects the variables, people at a terminal use
// the flags.
type Settings struct {
	PodName      string
	PodNamespace string
	PodUID       string
	// PodIP is the pod's address (downward API status.podIP), where this agent, leading, answers its
	// followers' waits; empty: at the listen address's host when that is an IP, or nowhere (its
	// followers then watch the lease).
	PodIP  string
	Lease  string
	Timing lease.Timing
	// ClockSkewMargin extends other holders' terms when judging their leases; see lease.Judge.
	ClockSkewMargin time.Duration
	Readiness       Readiness
	Listen          string
	StatusFile      string
	Kubeconfig      string
	// Elections is LEASEGATE_ELECTIONS, a JSON list of lease.ElectionSpec, for a pod that runs several
	// elections; then Lease, Timing and Readiness are unused. Validated by LoadSettings.
	Elections string
	// Gate is the mutation gate in front of the app's port; off unless Upstream is set.
	Gate GateSettings
	// OnLoss is what the agent does when it loses a lease it held: keep (report it) or restart (evict its
	// own pod, so it comes back as a follower held by start: leader). OnLossElection is the election it
	// watches for that, the only one when empty.
	OnLoss, OnLossElection string
	// LeaseKind is what every election of the agent elects on: Lease, or MultiClusterLease (one leader
	// across clusters: the agent leads only while its cluster's election controller confirms it).
	LeaseKind string
}

// What an agent does when it loses a lease it held (LEASEGATE_ON_LOSS).
const (
	OnLossKeep    = contract.OnLossKeep
	OnLossRestart = contract.OnLossRestart
)

// GateSettings configure the mutation gate (package gate).
type GateSettings struct {
	// Upstream is the app's address, "127.0.0.1:<port>"; empty: no gate.
	Upstream string
	Listen   string
	// Methods and GRPCMethods are what mutates; see rules.NewPolicy.
	Methods, GRPCMethods string
	// Election is the election whose leader may mutate; the only one when empty.
	Election string
	// BodyTimeout bounds how long a forwarded request's body may take to arrive.
	BodyTimeout time.Duration
}

// Identity is the holder identity this agent writes into the lease.
func (s Settings) Identity() string { return lease.Identity(s.PodName, s.PodUID) }

// wakeURL is where this agent, leading, answers its followers' waits, on port: at the pod's IP, or else
// at the listen address's host where that is an IP (agents sharing a host in tests); "" where neither
// is one, and its followers then watch the lease.
func (s Settings) wakeURL(port int) string {
	if s.PodIP != "" {
		return leaseelection.HolderURL(s.PodIP, port)
	}
	host, _, _ := net.SplitHostPort(s.Listen)
	return leaseelection.HolderURL(host, port)
}

// ElectionSpecs are the elections the agent runs: those of LEASEGATE_ELECTIONS, or the one election of
// LEASEGATE_LEASE, named after its lease. Call it on settings LoadSettings accepted.
func (s Settings) ElectionSpecs() []lease.ElectionSpec {
	if s.Elections != "" {
		specs, _ := lease.ParseElections(s.Elections)
		return specs
	}
	readiness := ""
	if s.Readiness == ReadinessLeader {
		readiness = string(ReadinessLeader)
	}
	return []lease.ElectionSpec{lease.NewElectionSpec(s.Lease, s.Lease, s.Timing, readiness)}
}

// setting ties an environment variable to its flag and the field it fills.
type setting struct {
	env, flag, usage string
	required         bool
	value            flag.Value
}

// LoadSettings reads the environment through getenv, then the flags in args, and validates the result.
// Every problem is reported, each naming the environment variable and flag it came from. -h or --help
// returns flag.ErrHelp.
func LoadSettings(args []string, getenv func(string) string) (Settings, error) {
	s := defaultSettings()
	fs, settings := s.flagSet()

	var errs []error
	for _, st := range settings {
		if v := getenv(st.env); v != "" {
			if err := st.value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", st.env, v, err))
			}
		}
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: the agent takes only flags", fs.Args()))
	}

	for _, st := range settings {
		if st.required && st.value.String() == "" {
			errs = append(errs, fmt.Errorf("%s (--%s) is required: %s", st.env, st.flag, st.usage))
		}
	}
	switch {
	case s.Elections == "" && s.Lease == "":
		errs = append(errs, fmt.Errorf("%s (--lease) is required: name of the coordination.k8s.io/v1 Lease to elect on (or %s for several)", contract.EnvLease, contract.EnvElections))
	case s.Elections != "" && s.Lease != "":
		errs = append(errs, fmt.Errorf("%s (--lease) and %s (--elections) are both set: use one", contract.EnvLease, contract.EnvElections))
	case s.Elections != "":
		if _, err := lease.ParseElections(s.Elections); err != nil {
			errs = append(errs, fmt.Errorf("%s (--elections): %w", contract.EnvElections, err))
		}
	}
	var timingErr *lease.TimingError
	if errors.As(s.Timing.Validate(), &timingErr) {
		st := timingSettings[timingErr.Field]
		errs = append(errs, fmt.Errorf("%s=%s (--%s): %s; the rule is retry period < renew deadline < lease duration",
			st.env, timingErr.Value, st.flag, timingErr.Reason))
	}
	if s.ClockSkewMargin < 0 {
		errs = append(errs, fmt.Errorf("%s=%s: must not be negative", contract.EnvClockSkewMargin, s.ClockSkewMargin))
	}
	errs = append(errs, s.validateGate(settings)...)
	switch s.OnLoss {
	case OnLossKeep, OnLossRestart:
	default:
		errs = append(errs, fmt.Errorf("%s=%s (--on-loss): must be %s or %s", contract.EnvOnLoss, s.OnLoss, OnLossKeep, OnLossRestart))
	}
	if s.OnLoss == OnLossRestart {
		if err := s.checkElection(s.OnLossElection); err != nil {
			errs = append(errs, named(settings, contract.EnvOnLossElection, err))
		}
	}
	if _, err := netip.ParseAddr(s.PodIP); s.PodIP != "" && err != nil {
		errs = append(errs, fmt.Errorf("%s=%s (--pod-ip): not an IP address; leave it to the downward API (status.podIP), or unset it", contract.EnvPodIP, s.PodIP))
	}
	switch s.LeaseKind {
	case contract.LeaseKindLease, contract.LeaseKindMultiClusterLease:
	default:
		errs = append(errs, fmt.Errorf("%s=%s (--lease-kind): must be %s or %s", contract.EnvLeaseKind, s.LeaseKind, contract.LeaseKindLease, contract.LeaseKindMultiClusterLease))
	}
	return s, errors.Join(errs...)
}

// electionNames are the names of the elections the agent runs.
func (s Settings) electionNames() []string {
	var names []string
	for _, e := range s.ElectionSpecs() {
		names = append(names, e.Name)
	}
	return names
}

// checkElection checks a setting that names one of the agent's elections (rules.CheckElection's rules).
func (s Settings) checkElection(name string) error {
	names := s.electionNames()
	if len(names) == 0 {
		return nil // no valid election: that is reported already
	}
	return rules.CheckElection(name, names)
}

// DefaultGateListen is where the gate listens unless told otherwise: the port after the agent's.
const DefaultGateListen = ":9441"

func defaultSettings() Settings {
	return Settings{
		Timing: lease.DefaultTiming, ClockSkewMargin: lease.DefaultClockSkewMargin, Readiness: ReadinessHealth, Listen: ":" + strconv.Itoa(contract.AgentPort),
		Gate: GateSettings{
			Listen: DefaultGateListen, Methods: strings.Join(rules.DefaultMethods, ","), GRPCMethods: "*", BodyTimeout: rules.DefaultBodyTimeout,
		},
		OnLoss: OnLossKeep, LeaseKind: contract.LeaseKindLease,
	}
}

// validateGate checks every gate setting with the rules the injector applies to its annotations (the
// package gate's), whether or not the gate is on: a value set for it is meant for it. Each error names
// the variable, its flag and its value.
func (s *Settings) validateGate(settings []setting) []error {
	var errs []error
	check := func(env string, err error) {
		if err != nil {
			errs = append(errs, named(settings, env, err))
		}
	}
	if s.Gate.Upstream != "" {
		check(contract.EnvGateUpstream, rules.CheckUpstream(s.Gate.Upstream))
	}
	check(contract.EnvGateListen, rules.CheckListen(s.Gate.Listen))
	_, err := rules.ParseMethods(s.Gate.Methods)
	check(contract.EnvGateMethods, err)
	check(contract.EnvGateGRPCMethods, rules.ParseGRPCMethods(s.Gate.GRPCMethods))
	check(contract.EnvGateBodyTimeout, rules.CheckBodyTimeout(s.Gate.BodyTimeout))
	if s.Gate.Upstream != "" || s.Gate.Election != "" {
		check(contract.EnvGateElection, s.checkElection(s.Gate.Election))
	}
	return errs
}

// named is err about the setting of env, naming the variable, its flag and its value.
func named(settings []setting, env string, err error) error {
	for _, st := range settings {
		if st.env == env {
			return fmt.Errorf("%s=%q (--%s): %w", env, st.value.String(), st.flag, err)
		}
	}
	return fmt.Errorf("%s: %w", env, err)
}

// timingSettings names the variable and flag of each timing field, for errors.
var timingSettings = map[lease.TimingField]struct{ env, flag string }{
	lease.LeaseDurationField: {contract.EnvLeaseDuration, "lease-duration"},
	lease.RenewDeadlineField: {contract.EnvRenewDeadline, "renew-deadline"},
	lease.RetryPeriodField:   {contract.EnvRetryPeriod, "retry-period"},
}

// Usage writes every flag with its environment variable and default.
func Usage(w io.Writer) {
	s := defaultSettings()
	fs, _ := s.flagSet()
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// flagSet binds every setting of s to its flag. The order is the order of the usage text.
func (s *Settings) flagSet() (*flag.FlagSet, []setting) {
	settings := []setting{
		{contract.EnvPodName, "pod-name", "name of the pod the agent runs in (downward API metadata.name)", true, stringValue{&s.PodName}},
		{contract.EnvPodNamespace, "pod-namespace", "namespace of the pod and of its lease", true, stringValue{&s.PodNamespace}},
		{contract.EnvPodUID, "pod-uid", "UID of the pod (downward API metadata.uid)", true, stringValue{&s.PodUID}},
		{contract.EnvPodIP, "pod-ip", "IP address of the pod (downward API status.podIP), where its followers wait for it to release a lease it leads", false, stringValue{&s.PodIP}},
		{contract.EnvLease, "lease", "name of the coordination.k8s.io/v1 Lease to elect on", false, stringValue{&s.Lease}},
		{contract.EnvLeaseDuration, "lease-duration", "how long a lease lasts after its last renewal (whole seconds)", false, durationValue{&s.Timing.LeaseDuration}},
		{contract.EnvRenewDeadline, "renew-deadline", "how long a leader retries renewing before it stops leading", false, durationValue{&s.Timing.RenewDeadline}},
		{contract.EnvRetryPeriod, "retry-period", "interval between renewals and acquisition attempts", false, durationValue{&s.Timing.RetryPeriod}},
		{contract.EnvClockSkewMargin, "clock-skew-margin", "extra time a follower grants the holder before taking an unrenewed lease; set it to the fence's clockSkewMargin", false, durationValue{&s.ClockSkewMargin}},
		{contract.EnvReadiness, "readiness", "what /readyz reports: health (ready while working) or leader (ready only while leading)", false, readinessValue{&s.Readiness}},
		{contract.EnvListen, "listen", "address of the HTTP endpoints (/healthz, /readyz, /leader, /metrics)", false, stringValue{&s.Listen}},
		{contract.EnvElections, "elections", "several elections instead of " + contract.EnvLease + `: a JSON list of {"name", "lease", "leaseDuration", "renewDeadline", "retryPeriod", "readiness"}`, false, stringValue{&s.Elections}},
		{contract.EnvStatusFile, "status-file", "file that holds the /leader JSON, rewritten atomically on every change", false, stringValue{&s.StatusFile}},
		{contract.EnvGateUpstream, "gate-upstream", "the app's host:port: serve the mutation gate in front of it (followers answer mutations with 503)", false, stringValue{&s.Gate.Upstream}},
		{contract.EnvGateListen, "gate-listen", "address of the mutation gate", false, stringValue{&s.Gate.Listen}},
		{contract.EnvGateMethods, "gate-methods", "HTTP methods only the leader may serve, comma-separated", false, stringValue{&s.Gate.Methods}},
		{contract.EnvGateGRPCMethods, "gate-grpc-methods", "gRPC methods only the leader may serve: * or /package.Service/Method and /package.Service/*, comma-separated", false, stringValue{&s.Gate.GRPCMethods}},
		{contract.EnvGateElection, "gate-election", "the election whose leader may mutate (required with several)", false, stringValue{&s.Gate.Election}},
		{contract.EnvGateBodyTimeout, "gate-body-timeout", "how long a request's body may take to arrive, from the request's arrival: bodies the gate forwards whole, and mutations' streamed bodies but gRPC calls' (at most 10m)", false, durationValue{&s.Gate.BodyTimeout}},
		{contract.EnvOnLoss, "on-loss", "when a lease this pod held is lost: keep (report it) or restart (evict this pod through the Eviction API, so it returns as a follower)", false, stringValue{&s.OnLoss}},
		{contract.EnvLeaseKind, "lease-kind", "what the elections elect on: Lease, or MultiClusterLease (one leader across clusters, confirmed by leasegate's election controller)", false, stringValue{&s.LeaseKind}},
		{contract.EnvOnLossElection, "on-loss-election", "the election whose loss restarts the pod (the only one when empty)", false, stringValue{&s.OnLossElection}},
		{"KUBECONFIG", "kubeconfig", "kubeconfig file; in-cluster config when empty", false, stringValue{&s.Kubeconfig}},
	}
	fs := flag.NewFlagSet("leasegate-agent", flag.ContinueOnError)
	for _, st := range settings {
		fs.Var(st.value, st.flag, fmt.Sprintf("%s (env %s)", st.usage, st.env))
	}
	return fs, settings
}

type stringValue struct{ p *string }

func (v stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v stringValue) Set(s string) error { *v.p = s; return nil }

type durationValue struct{ p *time.Duration }

func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}
func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration (want a Go duration such as 15s or 1m): %q", s)
	}
	*v.p = d
	return nil
}

type readinessValue struct{ p *Readiness }

func (v readinessValue) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}
func (v readinessValue) Set(s string) error {
	switch r := Readiness(strings.ToLower(s)); r {
	case ReadinessHealth, ReadinessLeader:
		*v.p = r
		return nil
	}
	return fmt.Errorf("must be %q or %q, got %q", ReadinessHealth, ReadinessLeader, s)
}
