package observe

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claims []Claim
		want   bool
	}{
		{"one leader", []Claim{{"a", at(0), at(500)}}, false},
		{"a handover between two questions: the old leader asked before the new one acquired",
			[]Claim{{"a", at(0), at(500)}, {"b", at(510), at(520)}}, false},
		{"the same, asked in the other order", []Claim{{"b", at(510), at(520)}, {"a", at(0), at(500)}}, false},
		{"the old leader still led when asked after the new one acquired",
			[]Claim{{"b", at(510), at(515)}, {"a", at(0), at(520)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if proof, got := Overlap(tc.claims); got != tc.want {
				t.Errorf("Overlap = %v (%s), want %v", got, proof, tc.want)
			}
		})
	}
}

// TestSampleClaimsWithoutSince plays rounds of answers from agents that do not say since when they lead:
// each claim counts from the first answer of its unbroken run.
func TestSampleClaimsWithoutSince(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rounds [][]Claim
		want   bool
	}{
		{"one leader throughout", [][]Claim{{{Pod: "a", Asked: at(0)}}, {{Pod: "a", Asked: at(10)}}, {{Pod: "a", Asked: at(20)}}}, false},
		{"a handover between rounds",
			[][]Claim{{{Pod: "a", Asked: at(0)}}, {{Pod: "a", Asked: at(10)}}, {{Pod: "b", Asked: at(21)}}, {{Pod: "b", Asked: at(31)}}}, false},
		{"the old leader still claims in the round after the new one's first claim",
			[][]Claim{{{Pod: "a", Asked: at(0)}}, {{Pod: "a", Asked: at(10)}, {Pod: "b", Asked: at(11)}}, {{Pod: "a", Asked: at(20)}, {Pod: "b", Asked: at(21)}}}, true},
		{"a leader that stopped claiming and came back counts from its return",
			[][]Claim{{{Pod: "a", Asked: at(0)}}, {{Pod: "b", Asked: at(11)}}, {{Pod: "a", Asked: at(20)}}, {{Pod: "a", Asked: at(30)}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := make(chan []Claim, len(tc.rounds))
			for _, r := range tc.rounds {
				next <- r
			}
			asked := make(chan struct{})
			s := SampleClaims(func() []Claim {
				select {
				case r := <-next:
					return r
				default:
					select {
					case <-asked:
					default:
						close(asked) // every round played
					}
					return nil
				}
			})
			<-asked
			rounds, overlaps := s.Stop()
			if rounds < len(tc.rounds) {
				t.Fatalf("sampled %d rounds, want at least %d", rounds, len(tc.rounds))
			}
			if got := len(overlaps) > 0; got != tc.want {
				t.Errorf("found an overlap = %v (%v), want %v", got, overlaps, tc.want)
			}
		})
	}
}
