package observe

import (
	"fmt"
	"time"
)

// Claim is an agent's answer that it leads: since when, and when it was asked. A zero Since means the
// agent did not say (a multi-cluster agent's since is its local candidacy, not its global leadership):
// a ClaimsSampler then counts the claim from the first of its unbroken run of answers.
type Claim struct {
	Pod          string
	Since, Asked time.Time
}

// Overlap finds two claims that prove two agents led at once: the agent that acquired first still said it
// led when asked after the other had acquired (a leader stops claiming before it releases, and the next
// one acquires after seeing the release, on the same clock). A handover between two questions makes both
// answer "leader" without overlapping, and is not one.
func Overlap(claims []Claim) (string, bool) {
	for _, earlier := range claims {
		for _, later := range claims {
			if earlier.Since.Before(later.Since) && earlier.Asked.After(later.Since) {
				return fmt.Sprintf("%s acquired at %s and still led when asked at %s, after %s acquired at %s",
					earlier.Pod, earlier.Since.Format(time.StampMicro), earlier.Asked.Format(time.StampMicro),
					later.Pod, later.Since.Format(time.StampMicro)), true
			}
		}
	}
	return "", false
}

// ClaimsSampler asks for every agent's claim in rounds, as fast as they answer, and keeps each proof
// that two agents led at once.
type ClaimsSampler struct {
	done     chan struct{}
	finished chan struct{}
	rounds   int
	overlaps []string
}

// samplePause spaces the rounds, so that asking leaves the agents' processes the machine's cores.
const samplePause = 5 * time.Millisecond

// SampleClaims starts asking: ask returns the claims of the agents that say they lead, each asked in turn.
func SampleClaims(ask func() []Claim) *ClaimsSampler {
	s := &ClaimsSampler{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(s.finished)
		// Every term seen so far counts (an agent that said it led since some instant, asked later than
		// another's acquisition, overlapped it), each with the last time its agent still claimed it.
		terms := map[Claim]time.Time{}
		claiming := map[string]time.Time{} // pod -> first answer of its unbroken run of claims
		for {
			select {
			case <-s.done:
				return
			case <-time.After(samplePause):
			}
			claims := ask()
			seenNow := map[string]bool{}
			for _, c := range claims {
				seenNow[c.Pod] = true
				if _, ok := claiming[c.Pod]; !ok {
					claiming[c.Pod] = c.Asked
				}
				if c.Since.IsZero() {
					c.Since = claiming[c.Pod]
				}
				terms[Claim{Pod: c.Pod, Since: c.Since}] = c.Asked
			}
			for pod := range claiming {
				if !seenNow[pod] {
					delete(claiming, pod)
				}
			}
			seen := make([]Claim, 0, len(terms))
			for term, asked := range terms {
				seen = append(seen, Claim{Pod: term.Pod, Since: term.Since, Asked: asked})
			}
			if proof, found := Overlap(seen); found {
				s.overlaps = append(s.overlaps, proof)
				clear(terms)
			}
			s.rounds++
		}
	}()
	return s
}

// Stop stops asking and returns how many rounds were asked and every proof of two leaders at once.
func (s *ClaimsSampler) Stop() (rounds int, overlaps []string) {
	close(s.done)
	<-s.finished
	return s.rounds, s.overlaps
}
