package e2e

import (
	"fmt"
	"testing"
	"time"
)

// claim is an agent's answer that it leads: since when, and when it was asked.
type claim struct {
	pod          string
	since, asked time.Time
}

// overlap finds two claims that prove two agents led at once: the agent that acquired first still said it
// led when asked after the other had acquired (a leader stops claiming before it releases, and the next
// one acquires after seeing the release, on the same clock). A handover between two questions makes both
// answer "leader" without overlapping, and is not one.
func overlap(claims []claim) (string, bool) {
	for _, earlier := range claims {
		for _, later := range claims {
			if earlier.since.Before(later.since) && earlier.asked.After(later.since) {
				return fmt.Sprintf("%s acquired at %s and still led when asked at %s, after %s acquired at %s",
					earlier.pod, earlier.since.Format(time.StampMicro), earlier.asked.Format(time.StampMicro),
					later.pod, later.since.Format(time.StampMicro)), true
			}
		}
	}
	return "", false
}

func TestOverlap(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		claims []claim
		want   bool
	}{
		{"one leader", []claim{{"a", at(0), at(500)}}, false},
		{"a handover between two questions: the old leader asked before the new one acquired",
			[]claim{{"a", at(0), at(500)}, {"b", at(510), at(520)}}, false},
		{"the same, asked in the other order", []claim{{"b", at(510), at(520)}, {"a", at(0), at(500)}}, false},
		{"the old leader still led when asked after the new one acquired",
			[]claim{{"b", at(510), at(515)}, {"a", at(0), at(520)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if proof, got := overlap(tc.claims); got != tc.want {
				t.Errorf("overlap = %v (%s), want %v", got, proof, tc.want)
			}
		})
	}
}
