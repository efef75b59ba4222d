package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MaxElections is how many elections one pod may run: each costs the agent a watch (RBAC limits an
// agent to its leases by name, so watches cannot be merged) and a renewal every retry period.
const MaxElections = 16

// ElectionSpec is one of a pod's elections as the injector hands it to the agent, in the JSON list of
// LEASEGATE_ELECTIONS.
type ElectionSpec struct {
	// Name is the election's name in endpoints (/leader/<name>), metrics and logs.
	Name          string   `json:"name"`
	Lease         string   `json:"lease"`
	LeaseDuration Duration `json:"leaseDuration"`
	RenewDeadline Duration `json:"renewDeadline"`
	RetryPeriod   Duration `json:"retryPeriod"`
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
		LeaseDuration: Duration{t.LeaseDuration},
		RenewDeadline: Duration{t.RenewDeadline},
		RetryPeriod:   Duration{t.RetryPeriod},
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
		if err := CheckElectionName(s.Name); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", at("name"), s.Name, err))
		} else if names[s.Name] {
			errs = append(errs, fmt.Errorf("%s %q: two elections have this name", at("name"), s.Name))
		}
		names[s.Name] = true
		if msgs := dns1123Subdomain(s.Lease); len(msgs) > 0 {
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

// Duration is a time.Duration written in JSON as Go writes durations ("15s"), as metav1.Duration does.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = parsed
	return nil
}

// CheckElectionName is the rule for an election's name, which the injector holds the
// leasegate.io/elections annotation to and the agent LEASEGATE_ELECTIONS: a DNS label, since it names
// the election in paths (/leader/<election>), metric labels and, by default, its lease.
func CheckElectionName(name string) error {
	if msgs := dns1123Label(name); len(msgs) > 0 {
		return errors.New(msgs[0])
	}
	return nil
}

// dns1123Label and dns1123Subdomain check names as the API server does (apimachinery's validation, whose
// package the agent does not link), with its messages.
func dns1123Label(value string) []string {
	return dns1123(value, 63, false, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')")
}

func dns1123Subdomain(value string) []string {
	return dns1123(value, 253, true, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')")
}

func dns1123(value string, maxLength int, dots bool, msg string) []string {
	if len(value) > maxLength {
		return []string{fmt.Sprintf("must be no more than %d characters", maxLength)}
	}
	if !isDNS1123(value, dots) {
		return []string{msg}
	}
	return nil
}

// isDNS1123 reports whether value is one or more (dots allowed) labels of [a-z0-9] and '-', each starting
// and ending with [a-z0-9].
func isDNS1123(value string, dots bool) bool {
	if value == "" {
		return false
	}
	labelStart := true
	for i := 0; i < len(value); i++ {
		c := value[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		switch {
		case alnum:
			labelStart = false
		case c == '-':
			if labelStart || i == len(value)-1 {
				return false
			}
		case c == '.' && dots:
			if labelStart || i == len(value)-1 || value[i-1] == '-' {
				return false
			}
			labelStart = true
		default:
			return false
		}
	}
	return true
}
