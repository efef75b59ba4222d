package inject

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// electionAnnotation is one election of the leasegate.io/elections annotation: a YAML map from election
// name to these fields, all optional.
type electionAnnotation struct {
	// Lease defaults to "<the pod's lease>-<election name>".
	Lease         string           `json:"lease,omitempty"`
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`
	RenewDeadline *metav1.Duration `json:"renewDeadline,omitempty"`
	RetryPeriod   *metav1.Duration `json:"retryPeriod,omitempty"`
	// Takeover is the objective: after a leader crashes, another pod leads within it.
	Takeover  *metav1.Duration `json:"takeover,omitempty"`
	Readiness string           `json:"readiness,omitempty"`
	Start     string           `json:"start,omitempty"`
}

// election is one election injection plans, with its timing settled.
type election struct {
	name, lease      string
	timing           lease.Timing
	readiness, start string
}

// explicitTiming is timing someone wrote down; nil fields are unset.
type explicitTiming struct {
	leaseDuration, renewDeadline, retryPeriod, takeover *time.Duration
}

// timingFields are the pod annotations of the one-election case and the elections annotation's names of
// the same fields, in the order errors report them.
var timingFields = []struct {
	field      lease.TimingField
	annotation string
	yaml       string
}{
	{lease.LeaseDurationField, contract.LeaseDuration, "leaseDuration"},
	{lease.RenewDeadlineField, contract.RenewDeadline, "renewDeadline"},
	{lease.RetryPeriodField, contract.RetryPeriod, "retryPeriod"},
}

// settleTiming turns what was written down into an election's timing: explicit values win; a takeover
// objective derives the rest (lease.TimingFor, from the lease duration when that is explicit); anything
// still unset comes from leasegate-config. Errors name the field through pathOf and, for an objective
// that cannot be met, both numbers.
func settleTiming(explicit explicitTiming, defaults lease.Timing, margin time.Duration, pathOf func(lease.TimingField) *field.Path, takeoverPath *field.Path) (lease.Timing, field.ErrorList) {
	t := defaults
	if explicit.takeover != nil {
		derived, err := lease.TimingFor(*explicit.takeover, margin)
		if err != nil {
			return t, field.ErrorList{field.Invalid(takeoverPath, explicit.takeover.String(), err.Error())}
		}
		if explicit.leaseDuration != nil {
			d := *explicit.leaseDuration
			if budget := lease.TakeoverBudget(d, margin); budget > *explicit.takeover {
				return t, field.ErrorList{field.Invalid(takeoverPath, explicit.takeover.String(), fmt.Sprintf(
					"the takeover objective %s cannot be met with lease duration %s: a crashed leader keeps the lease for lease duration + clock skew margin (%s) = %s; drop the lease duration or allow %s",
					*explicit.takeover, d, margin, budget, budget))}
			}
			derived = lease.Proportional(d)
		}
		t = derived
	}
	for _, set := range [...]struct{ field, value *time.Duration }{
		{&t.LeaseDuration, explicit.leaseDuration}, {&t.RenewDeadline, explicit.renewDeadline}, {&t.RetryPeriod, explicit.retryPeriod},
	} {
		if set.value != nil {
			*set.field = *set.value
		}
	}
	err := t.Validate()
	if err == nil {
		return t, nil // most pods: no need to look for a field at fault
	}
	if fe := config.TimingFieldError(err, pathOf, "retry-period < renew-deadline < lease-duration"); fe != nil {
		fe.Detail += fmt.Sprintf(" (lease duration %s, renew deadline %s, retry period %s; unset values come from the takeover objective or the leasegate-config defaults)",
			t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
		return t, field.ErrorList{fe}
	}
	return t, nil
}

// podTiming reads the one-election timing annotations (leasegate.io/lease-duration, renew-deadline,
// retry-period, takeover), which are also the defaults of every election of leasegate.io/elections.
func podTiming(annotations map[string]string, path *field.Path) (explicitTiming, field.ErrorList) {
	var t explicitTiming
	var errs field.ErrorList
	parse := func(key string) *time.Duration {
		value, ok := annotations[key]
		if !ok {
			return nil
		}
		d, err := time.ParseDuration(value)
		if err != nil {
			errs = append(errs, field.Invalid(path.Key(key), value, "must be a Go duration such as 15s or 1m"))
			return nil
		}
		return &d
	}
	t.leaseDuration, t.renewDeadline, t.retryPeriod = parse(contract.LeaseDuration), parse(contract.RenewDeadline), parse(contract.RetryPeriod)
	t.takeover = parse(contract.Takeover)
	return t, errs
}

// planElections reads leasegate.io/elections: several named elections, each on its own lease with its
// own timing. baseLease names the pod's lease, from which each election's default lease is derived.
func planElections(value, baseLease string, podDefaults explicitTiming, defaults lease.Timing, margin time.Duration, path *field.Path) ([]election, field.ErrorList) {
	var specs map[string]electionAnnotation
	if err := decodeStrict(value, &specs); err != nil {
		return nil, field.ErrorList{field.Invalid(path, value, fmt.Sprintf(
			"must be a YAML map from election name to {lease, leaseDuration, renewDeadline, retryPeriod, takeover, readiness, start}: %v", err))}
	}
	if len(specs) == 0 || len(specs) > lease.MaxElections {
		return nil, field.ErrorList{field.Invalid(path, fmt.Sprintf("%d elections", len(specs)),
			fmt.Sprintf("a pod runs 1 to %d elections", lease.MaxElections))}
	}
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	slices.Sort(names)

	var errs field.ErrorList
	var elections []election
	leases := map[string]string{}
	var leaderReadiness, leaderStart []string
	for _, name := range names {
		spec, p := specs[name], path.Child(name)
		if err := lease.CheckElectionName(name); err != nil {
			errs = append(errs, field.Invalid(p, name, "an election name must be a DNS label: "+err.Error()))
			continue
		}
		e := election{name: name, lease: spec.Lease, readiness: contract.ReadinessHealth, start: contract.StartImmediate}
		if e.lease == "" {
			e.lease = baseLease + "-" + name
		}
		if msgs := validation.IsDNS1123Subdomain(e.lease); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("lease"), e.lease, "must be a valid Lease name: "+msgs[0]))
		} else if other, taken := leases[e.lease]; taken {
			errs = append(errs, field.Duplicate(p.Child("lease"), e.lease+" (also election "+other+"'s)"))
		}
		leases[e.lease] = name

		explicit := podDefaults
		for target, value := range map[**time.Duration]*metav1.Duration{
			&explicit.leaseDuration: spec.LeaseDuration, &explicit.renewDeadline: spec.RenewDeadline,
			&explicit.retryPeriod: spec.RetryPeriod, &explicit.takeover: spec.Takeover,
		} {
			if value != nil {
				*target = &value.Duration
			}
		}
		var timingErrs field.ErrorList
		e.timing, timingErrs = settleTiming(explicit, defaults, margin, func(f lease.TimingField) *field.Path {
			return p.Child(timingFields[f].yaml)
		}, p.Child("takeover"))
		errs = append(errs, timingErrs...)

		switch spec.Readiness {
		case "", contract.ReadinessHealth:
		case contract.ReadinessLeader:
			e.readiness = contract.ReadinessLeader
			leaderReadiness = append(leaderReadiness, name)
		default:
			errs = append(errs, field.NotSupported(p.Child("readiness"), spec.Readiness, []string{contract.ReadinessHealth, contract.ReadinessLeader}))
		}
		switch spec.Start {
		case "", contract.StartImmediate:
		case contract.StartLeader:
			e.start = contract.StartLeader
			leaderStart = append(leaderStart, name)
		default:
			errs = append(errs, field.NotSupported(p.Child("start"), spec.Start, []string{contract.StartImmediate, contract.StartLeader}))
		}
		elections = append(elections, e)
	}
	if len(leaderReadiness) > 1 {
		errs = append(errs, field.Forbidden(path, fmt.Sprintf(
			"readiness: leader is set on elections %s; a pod is Ready or not as a whole, so at most one election may decide it (the others can be read at %s/<name>)",
			strings.Join(leaderReadiness, ", "), contract.AgentLeadingPath)))
	}
	if len(leaderStart) > 1 {
		errs = append(errs, field.Forbidden(path, fmt.Sprintf(
			"start: leader is set on elections %s; a pod's app containers start once, so at most one election may hold them back",
			strings.Join(leaderStart, ", "))))
	}
	return elections, errs
}

// envName is the app's variable for an election's lease: LEASEGATE_LEASE_<NAME>, the name upper-cased
// with '-' as '_'.
func envName(election string) string {
	return contract.EnvLeasePrefix + strings.ToUpper(strings.ReplaceAll(election, "-", "_"))
}

// decodeStrict decodes YAML refusing duplicate keys and unknown fields, so a misspelt field is reported
// rather than silently ignored.
func decodeStrict(value string, into any) error {
	data, err := yaml.YAMLToJSONStrict([]byte(value))
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(data, into, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}
