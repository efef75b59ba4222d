package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// Validate checks a defaulted Config.
func Validate(c *Config) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	errs = append(errs, validateElection(&c.Election, field.NewPath("election"))...)
	errs = append(errs, validateAgent(&c.Agent, field.NewPath("agent"))...)
	errs = append(errs, validateGuards(c.Guards, field.NewPath("guards"))...)
	if c.MissingPodIdentity != EnforcementDeny && c.MissingPodIdentity != EnforcementWarn && c.MissingPodIdentity != EnforcementAllow {
		errs = append(errs, field.NotSupported(field.NewPath("missingPodIdentity"), c.MissingPodIdentity,
			[]Enforcement{EnforcementDeny, EnforcementWarn, EnforcementAllow}))
	}
	for i, l := range c.AdoptLeases {
		path := field.NewPath("adoptLeases").Index(i)
		if !strings.Contains(l, "/") {
			errs = append(errs, field.Invalid(path, l, `write "<namespace>/<name>": adopting another controller's lease is decided per namespace`))
			continue
		}
		errs = append(errs, validateQualifiedName(l, path, true)...)
	}
	return errs
}

// operations a guard may name: those admission webhooks see for writes.
var operations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT"}

func validateGuards(guards []Guard, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, g := range guards {
		p := path.Index(i)
		if msgs := validation.IsDNS1123Label(g.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("name"), g.Name, "must be a DNS label (lowercase, digits, '-'): "+msgs[0]))
		} else if names[g.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), g.Name))
		}
		names[g.Name] = true
		errs = append(errs, validateQualifiedName(g.Lease, p.Child("lease"), true)...)
		if namespace, _, qualified := strings.Cut(g.Lease, "/"); qualified && namespace == corev1.NamespaceNodeLease {
			errs = append(errs, field.Invalid(p.Child("lease"), g.Lease, "leases in "+corev1.NamespaceNodeLease+" are nodes' heartbeats, which the fence does not watch; name the lease your workload elects on"))
		}
		switch g.LeaseKind {
		case "", contract.LeaseKindLease, contract.LeaseKindMultiClusterLease:
		default:
			errs = append(errs, field.NotSupported(p.Child("leaseKind"), g.LeaseKind, []string{contract.LeaseKindLease, contract.LeaseKindMultiClusterLease}))
		}
		for j, sa := range g.ServiceAccounts {
			errs = append(errs, validateQualifiedName(sa, p.Child("serviceAccounts").Index(j), false)...)
		}
		if len(g.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "a guard fences at least one resource"))
		}
		for j, r := range g.Resources {
			errs = append(errs, validateGuardedResource(&r, p.Child("resources").Index(j))...)
		}
		for j, ns := range g.Namespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, field.Invalid(p.Child("namespaces").Index(j), ns, msgs[0]))
			}
		}
		if g.HolderFormat != "" {
			if _, err := lease.ParseHolderFormat(g.HolderFormat); err != nil {
				errs = append(errs, field.Invalid(p.Child("holderFormat"), g.HolderFormat, err.Error()))
			}
		}
		switch g.Enforcement {
		case EnforcementDeny, EnforcementWarn, EnforcementDryRun:
		default:
			errs = append(errs, field.NotSupported(p.Child("enforcement"), g.Enforcement,
				[]Enforcement{EnforcementDeny, EnforcementWarn, EnforcementDryRun}))
		}
	}
	return errs
}

// validateGuardedResource holds a guarded resource to names the API server matches exactly, so that the
// rules sent to the API server and the fence's decision cover the same writes: a wildcard group would
// match in the rules and never in the decision, a capitalised resource in neither.
func validateGuardedResource(r *GuardedResource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case r.Group == "*":
		errs = append(errs, field.Invalid(path.Child("group"), r.Group,
			`wildcards are not supported: name one API group per entry ("" for the core group, apps, batch, ...), as kubectl api-resources lists them`))
	case r.Group != "":
		if msgs := validation.IsDNS1123Subdomain(r.Group); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Child("group"), r.Group,
				`must be an API group as kubectl api-resources lists it, lowercase ("" for the core group, apps, batch, ...): `+msgs[0]))
		}
	}
	if len(r.Resources) == 0 {
		errs = append(errs, field.Required(path.Child("resources"), `name the resources, plural and lowercase, e.g. ["deployments"]`))
	}
	for k, name := range r.Resources {
		if len(validation.IsDNS1123Label(name)) > 0 {
			errs = append(errs, field.Invalid(path.Child("resources").Index(k), name,
				"must be a resource name as the API serves it, plural and lowercase, such as deployments (kubectl api-resources); "+
					"no wildcards, and no subresources: a guard covers its resources' subresources (excludeSubresources leaves some out)"))
		}
	}
	for k, op := range r.Operations {
		if !slices.Contains(operations, op) {
			errs = append(errs, field.NotSupported(path.Child("operations").Index(k), op, operations))
		}
	}
	for k, sub := range r.ExcludeSubresources {
		kp := path.Child("excludeSubresources").Index(k)
		if len(validation.IsDNS1123Label(sub)) > 0 {
			errs = append(errs, field.Invalid(kp, sub, "must be a subresource name, lowercase, such as status or scale (no wildcards: list each one to leave out)"))
		} else if slices.Contains(r.ExcludeSubresources[:k], sub) {
			errs = append(errs, field.Duplicate(kp, sub))
		}
	}
	return errs
}

// validateQualifiedName checks "<name>" or "<namespace>/<name>"; a lease name is a DNS subdomain, a
// service account name too.
func validateQualifiedName(value string, path *field.Path, required bool) field.ErrorList {
	if value == "" {
		if required {
			return field.ErrorList{field.Required(path, `"<name>" in the request's namespace, or "<namespace>/<name>"`)}
		}
		return field.ErrorList{field.Invalid(path, value, "must not be empty")}
	}
	namespace, name, qualified := strings.Cut(value, "/")
	if !qualified {
		namespace, name = "", value
	}
	var errs field.ErrorList
	if qualified {
		if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path, value, "namespace part: "+msgs[0]))
		}
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(path, value, "name part: "+msgs[0]))
	}
	return errs
}

func validateElection(e *Election, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if err := TimingFieldError(e.Timing().Validate(), func(f lease.TimingField) *field.Path {
		return path.Child(timingJSONNames[f])
	}, "retryPeriod < renewDeadline < leaseDuration"); err != nil {
		errs = append(errs, err)
	}
	if m := e.ClockSkewMargin.Duration; m < 0 {
		errs = append(errs, field.Invalid(path.Child("clockSkewMargin"), m.String(), "must not be negative"))
	}
	return errs
}

// timingJSONNames are the ConfigMap's names for the timing fields.
var timingJSONNames = map[lease.TimingField]string{
	lease.LeaseDurationField: "leaseDuration",
	lease.RenewDeadlineField: "renewDeadline",
	lease.RetryPeriodField:   "retryPeriod",
}

// TimingFieldError turns a lease.Timing validation error into a field error at the path pathOf gives
// for the offending field, stating the rule in the caller's names; nil stays nil.
func TimingFieldError(err error, pathOf func(lease.TimingField) *field.Path, rule string) *field.Error {
	var te *lease.TimingError
	if !errors.As(err, &te) {
		return nil
	}
	return field.Invalid(pathOf(te.Field), te.Value.String(), te.Reason+"; the rule is "+rule)
}

func validateAgent(a *Agent, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.ContainsAny(a.Image, " \t\n") {
		errs = append(errs, field.Invalid(path.Child("image"), a.Image, "must be an image reference without whitespace"))
	}
	switch a.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("imagePullPolicy"), a.ImagePullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	switch a.NativeSidecar {
	case NativeSidecarAuto, NativeSidecarAlways, NativeSidecarNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("nativeSidecar"), a.NativeSidecar,
			[]NativeSidecar{NativeSidecarAuto, NativeSidecarAlways, NativeSidecarNever}))
	}
	if a.Port < 1 || a.Port > 65535 {
		errs = append(errs, field.Invalid(path.Child("port"), a.Port, "must be a TCP port, 1-65535"))
	}
	for name, limit := range a.Resources.Limits {
		if request, ok := a.Resources.Requests[name]; ok && request.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(path.Child("resources", "requests").Key(string(name)), request.String(),
				fmt.Sprintf("must not exceed the limit %s", limit.String())))
		}
	}
	return append(errs, validateAgentSecurityContext(a.SecurityContext, path.Child("securityContext"))...)
}

// validateAgentSecurityContext holds the agent's security context to the restricted Pod Security
// Standard, whatever the pod it joins allows: the agent holds a token that can renew the pod's lease,
// and a namespace enforcing restricted would refuse every opted-in pod otherwise. Only what the
// standard leaves open (the user and group, a read-only root) is the platform's to choose.
func validateAgentSecurityContext(sc *corev1.SecurityContext, path *field.Path) field.ErrorList {
	const keep = "; the agent's security context must stay within the restricted Pod Security Standard (see the default in the configuration reference)"
	var errs field.ErrorList
	if sc.Privileged != nil && *sc.Privileged {
		errs = append(errs, field.Invalid(path.Child("privileged"), true, "must be false or unset"+keep))
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		errs = append(errs, field.Invalid(path.Child("allowPrivilegeEscalation"), ptr.Deref(sc.AllowPrivilegeEscalation, true), "must be set to false"+keep))
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		errs = append(errs, field.Invalid(path.Child("runAsNonRoot"), ptr.Deref(sc.RunAsNonRoot, false), "must be set to true"+keep))
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		errs = append(errs, field.Invalid(path.Child("runAsUser"), 0, "must not be 0 (root); leave it unset for the platform to assign one"+keep))
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		errs = append(errs, field.Required(path.Child("capabilities", "drop"), "must include ALL"+keep))
	}
	if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
		errs = append(errs, field.Forbidden(path.Child("capabilities", "add"), "the agent needs no capability"+keep))
	}
	if sc.SeccompProfile == nil || (sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault && sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost) {
		errs = append(errs, field.Required(path.Child("seccompProfile", "type"), "must be RuntimeDefault or Localhost"+keep))
	}
	if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
		errs = append(errs, field.Invalid(path.Child("appArmorProfile", "type"), sc.AppArmorProfile.Type, "must be RuntimeDefault or Localhost"+keep))
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		errs = append(errs, field.Invalid(path.Child("procMount"), *sc.ProcMount, "must be Default or unset"+keep))
	}
	if sc.SELinuxOptions != nil {
		errs = append(errs, field.Forbidden(path.Child("seLinuxOptions"), "the pod's (or the platform's) SELinux options apply to the agent; its own could lift it out of them"))
	}
	if sc.WindowsOptions != nil {
		errs = append(errs, field.Forbidden(path.Child("windowsOptions"), "the agent runs on Linux nodes only"))
	}
	return errs
}
