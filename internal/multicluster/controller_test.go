package multicluster

import (
	"testing"
	"time"
)

func TestYieldAfterEndingOwnTerm(t *testing.T) {
	ended := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		ttl      time.Duration
		at       time.Duration // after the term ended
		wantWait time.Duration
		wantMay  bool
	}{
		{"right after the release, the key is left to the other clusters", 5 * time.Second, 0, 500 * time.Millisecond, false},
		{"a tenth of the TTL later, this cluster's next candidate may claim", 5 * time.Second, 500 * time.Millisecond, 0, true},
		{"a long TTL yields at most one backend call's bound", 60 * time.Second, 200 * time.Millisecond, 800 * time.Millisecond, false},
		{"the shortest TTL yields a tenth of it", 2 * time.Second, 100 * time.Millisecond, 100 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &election{yieldUntil: ended.Add(yieldFor(tt.ttl))}
			wait, may := e.mayClaim(ended.Add(tt.at))
			if wait != tt.wantWait || may != tt.wantMay {
				t.Errorf("mayClaim = %s, %v; want %s, %v", wait, may, tt.wantWait, tt.wantMay)
			}
		})
	}
	if wait, may := (&election{}).mayClaim(ended); !may || wait != 0 {
		t.Errorf("a cluster that never held the term yields %s", wait)
	}
}
