package manager

import (
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

func TestValidateLeaderElection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		timing lease.Timing
		want   []string // in the error, in order; none: valid
	}{
		{name: "controller-runtime's default timing", timing: lease.DefaultTiming},
		{name: "cert-manager's longer timing", timing: lease.Timing{LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 15 * time.Second}},
		{name: "a renew deadline as long as the lease names its flag and shows all three",
			timing: lease.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 15 * time.Second, RetryPeriod: 2 * time.Second},
			want:   []string{"--leader-elect-renew-deadline=15s: ", "renew deadline (15s) must be shorter than lease duration (15s)", "--leader-elect-lease-duration=15s --leader-elect-renew-deadline=15s --leader-elect-retry-period=2s"}},
		{name: "a retry period as long as the renew deadline names the retry period",
			timing: lease.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 10 * time.Second},
			want:   []string{"--leader-elect-retry-period=10s: ", "retry period (10s) must be shorter than renew deadline (10s)"}},
		{name: "a lease of a fraction of a second names the lease duration",
			timing: lease.Timing{LeaseDuration: 15500 * time.Millisecond, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
			want:   []string{"--leader-elect-lease-duration=15.5s: ", "whole number of seconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateLeaderElection(tc.timing)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one saying %q", tc.want)
			}
			rest := err.Error()
			for _, part := range tc.want {
				i := strings.Index(rest, part)
				if i < 0 {
					t.Fatalf("error %q lacks %q (or has it out of order)", err, part)
				}
				rest = rest[i+len(part):]
			}
		})
	}
}
