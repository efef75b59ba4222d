package agent

import (
	"strings"
	"testing"
)

// FuzzLoadSettings gives the agent arbitrary environments, as "NAME=value" lines over the pod's own
// identity: LoadSettings never panics, every error names the setting at fault (an environment variable
// or its flag), and settings it accepts give elections whose timing keeps the rules.
func FuzzLoadSettings(f *testing.F) {
	for _, seed := range []string{
		"LEASEGATE_LEASE=orders",
		"LEASEGATE_LEASE=orders\nLEASEGATE_LEASE_DURATION=6s\nLEASEGATE_RENEW_DEADLINE=4s\nLEASEGATE_RETRY_PERIOD=1s\nLEASEGATE_READINESS=leader",
		"LEASEGATE_LEASE=orders\nLEASEGATE_RETRY_PERIOD=soon\nLEASEGATE_CLOCK_SKEW_MARGIN=-1s",
		`LEASEGATE_ELECTIONS=[{"name":"fast","lease":"orders-fast","leaseDuration":"2s","renewDeadline":"1.3s","retryPeriod":"200ms"},{"name":"slow","lease":"orders-slow","leaseDuration":"6s","renewDeadline":"4s","retryPeriod":"1s","readiness":"leader"}]`,
		"LEASEGATE_LEASE=orders\nLEASEGATE_GATE_UPSTREAM=127.0.0.1:8080\nLEASEGATE_GATE_METHODS=POST,delete\nLEASEGATE_GATE_GRPC_METHODS=/a.B/*",
		"LEASEGATE_LEASE=orders\nLEASEGATE_ON_LOSS=restart\nLEASEGATE_ON_LOSS_ELECTION=nope\nLEASEGATE_LEASE_KIND=MultiClusterLease",
		"LEASEGATE_LEASE=orders\nLEASEGATE_LEASE_KIND=Multiclusterlease\nLEASEGATE_LISTEN=:99999",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, lines string) {
		env := map[string]string{"POD_NAME": "orders-0", "POD_NAMESPACE": "shop", "POD_UID": "4b1c"}
		for _, line := range strings.Split(lines, "\n") {
			if name, value, ok := strings.Cut(line, "="); ok {
				env[name] = value
			}
		}
		s, err := LoadSettings(nil, func(name string) string { return env[name] })
		if err != nil {
			for _, e := range unwrapJoined(err) {
				if msg := e.Error(); !strings.Contains(msg, "LEASEGATE_") && !strings.Contains(msg, "POD_") && !strings.Contains(msg, "--") {
					t.Fatalf("an error that names no setting: %q", msg)
				}
			}
			return
		}
		for _, spec := range s.ElectionSpecs() {
			if err := spec.Timing().Validate(); err != nil {
				t.Fatalf("accepted settings give election %s timing the elector refuses: %v", spec.Name, err)
			}
		}
	})
}

// unwrapJoined lists the errors errors.Join put together, or err alone.
func unwrapJoined(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	return []error{err}
}
