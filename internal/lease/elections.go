package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxElections is how many elections one pod may run: each costs the agent a watch (RBAC limits an
// agent to its leases by name, so watches cannot be merged) and a renewal every retry period.
const MaxElections = 16

// ElectionSpec is one of a pod's elections as the injector hands it to the agent, in the JSON list of
// LEASEGATE_ELECTIONS.
type ElectionSpec struct {
	// Name is the election's name in endpoints (/leader/<name>), metrics and logs.
	Name          string          `json:"name"`
	Lease         string          `json:"lease"`
	LeaseDuration metav1.Duration `json:"leaseDuration"`
	RenewDeadline metav1.Duration `json:"renewDeadline"`
	RetryPeriod   metav1.Duration `json:"retryPeriod"`
	// Readiness is "leader" when the pod is Ready only while it leads this election; at most one may.
	Readiness string `json:"readiness,omitempty"`
}

// Timing is the spec's timing.
func (s ElectionSpec) Timing() Timing {
	return Timing{LeaseDuration: s.LeaseDuration.Duration, RenewDeadline: s.RenewDeadline.Duration, RetryPeriod: s.RetryPeriod.Duration}
}

// NewElectionSpec is the spec of an election.
func NewElectionSpec(name, lease string, t Timing, readiness string) ElectionSpec {
	return ElectionSpec{
		Name: name, Lease: lease, Readiness: readiness,
		LeaseDuration: metav1.Duration{Duration: t.LeaseDuration},
		RenewDeadline: metav1.Duration{Duration: t.RenewDeadline},
		RetryPeriod:   metav1.Duration{Duration: t.RetryPeriod},
	}
}

// EncodeElections is the value of LEASEGATE_ELECTIONS.
func EncodeElections(specs []ElectionSpec) string {
	data, _ := json.Marshal(specs) // plain strings and durations: cannot fail
	return string(data)
}

// ParseElections reads LEASEGATE_ELECTIONS and checks every election: names unique DNS labels, leases
// valid and distinct, timing by the rules, readiness health or leader and leader at most once. Each
// problem names the election's index and field.
func ParseElections(value string) ([]ElectionSpec, error) {
	var specs []ElectionSpec
	decoder := json.NewDecoder(bytes.NewReader([]byte(value)))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&specs); err != nil {
		return nil, fmt.Errorf(`not a JSON list of {"name", "lease", "leaseDuration", "renewDeadline", "retryPeriod", "readiness"}: %w`, err)
	}
	if len(specs) == 0 || len(specs) > MaxElections {
		return nil, fmt.Errorf("%d elections: a pod runs 1 to %d", len(specs), MaxElections)
	}
	var errs []error
	names, leases, leaderReadiness := map[string]bool{}, map[string]bool{}, ""
	for i, s := range specs {
		at := func(field string) string { return fmt.Sprintf("[%d].%s", i, field) }
		if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", at("name"), s.Name, msgs[0]))
		} else if names[s.Name] {
			errs = append(errs, fmt.Errorf("%s %q: two elections have this name", at("name"), s.Name))
		}
		names[s.Name] = true
		if msgs := validation.IsDNS1123Subdomain(s.Lease); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", at("lease"), s.Lease, msgs[0]))
		} else if leases[s.Lease] {
			errs = append(errs, fmt.Errorf("%s %q: two elections use this lease", at("lease"), s.Lease))
		}
		leases[s.Lease] = true
		if err := s.Timing().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w; the rule is retryPeriod < renewDeadline < leaseDuration", at(timingJSON[err.(*TimingError).Field]), err))
		}
		switch s.Readiness {
		case "", "health":
		case "leader":
			if leaderReadiness != "" {
				errs = append(errs, fmt.Errorf("%s: elections %s and %s both set readiness leader; a pod has one readiness", at("readiness"), leaderReadiness, s.Name))
			}
			leaderReadiness = s.Name
		default:
			errs = append(errs, fmt.Errorf("%s %q: must be health or leader", at("readiness"), s.Readiness))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return specs, nil
}

var timingJSON = map[TimingField]string{LeaseDurationField: "leaseDuration", RenewDeadlineField: "renewDeadline", RetryPeriodField: "retryPeriod"}
