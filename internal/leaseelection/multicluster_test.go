package leaseelection

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

func TestConfirmedUntil(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	writes := []heartbeat{{generation: 4, started: t0}, {generation: 5, started: t0.Add(time.Second)}, {generation: 6, started: t0.Add(2 * time.Second)}}
	answer := func(holder string, observed int64) *Lease {
		return &Lease{Generation: 6, Spec: lease.Spec{HolderIdentity: "a-0", LeaseDurationSeconds: 5},
			Global: &GlobalAnswer{Holder: holder, ObservedGeneration: observed}}
	}
	const longDeadline = 4900 * time.Millisecond // longer than 90% of the 5 s TTL
	tests := []struct {
		name          string
		lease         *Lease
		writes        []heartbeat
		renewDeadline time.Duration
		want          time.Time
	}{
		{"an answer to the latest write: its start plus 90% of the TTL", answer("a-0", 6), writes, longDeadline, t0.Add(2*time.Second + 4500*time.Millisecond)},
		{"an answer to an earlier write counts from that write", answer("a-0", 5), writes, longDeadline, t0.Add(time.Second + 4500*time.Millisecond)},
		{"a renew deadline shorter than 90% of the TTL ends the term at the deadline after the write", answer("a-0", 6), writes, 3 * time.Second, t0.Add(2*time.Second + 3*time.Second)},
		{"an answer to none of our writes grants nothing", answer("a-0", 3), writes, longDeadline, time.Time{}},
		{"an answer naming another candidate grants nothing", answer("b-0", 6), writes, longDeadline, time.Time{}},
		{"no writes, nothing to confirm", answer("a-0", 6), nil, longDeadline, time.Time{}},
		{"a plain Lease carries no answer", &Lease{Spec: lease.Spec{LeaseDurationSeconds: 5}}, writes, longDeadline, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := confirmedUntil(tt.lease, "a-0", tt.writes, tt.renewDeadline); !got.Equal(tt.want) {
				t.Errorf("confirmedUntil() = %s, want %s", got, tt.want)
			}
		})
	}
}
