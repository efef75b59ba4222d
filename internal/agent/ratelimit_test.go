package agent

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

func TestAPIRateLimitNeverBindsInSteadyStateAndCapsAStorm(t *testing.T) {
	election := func(retryPeriod time.Duration) lease.ElectionSpec {
		return lease.NewElectionSpec("e", "e", lease.Timing{LeaseDuration: 15 * retryPeriod, RenewDeadline: 10 * retryPeriod, RetryPeriod: retryPeriod}, "")
	}
	tests := []struct {
		name      string
		specs     []lease.ElectionSpec
		wantQPS   float64
		wantBurst int
	}{
		{name: "one election at the default timing: twice its renewals", specs: []lease.ElectionSpec{election(2 * time.Second)}, wantQPS: 1, wantBurst: 5},
		{name: "a takeover objective of 151s (retry period 20s)", specs: []lease.ElectionSpec{election(20 * time.Second)}, wantQPS: 0.1, wantBurst: 5},
		{name: "several elections add up", specs: []lease.ElectionSpec{election(2 * time.Second), election(500 * time.Millisecond)}, wantQPS: 5, wantBurst: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qps, burst := apiRateLimit(tt.specs)
			if diff := qps - tt.wantQPS; diff > 1e-9 || diff < -1e-9 || burst != tt.wantBurst {
				t.Errorf("apiRateLimit = %g/s, burst %d; want %g/s, burst %d", qps, burst, tt.wantQPS, tt.wantBurst)
			}
			// Steady state: a leader of every election renews once per retry period, within the rate.
			var steady float64
			for _, spec := range tt.specs {
				steady += 1 / spec.Timing().RetryPeriod.Seconds()
			}
			if steady > qps/2+1e-9 {
				t.Errorf("steady renewals %g/s: the limit %g/s leaves less than twice that", steady, qps)
			}
		})
	}
}
