package lease

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzHolderFormat parses arbitrary guards[].holderFormat values and matches arbitrary holders against
// them: never a panic, an error that says how to write one, and a holder that names a pod always fits the
// format (so a mismatch hint can never be given for a holder that matched).
func FuzzHolderFormat(f *testing.F) {
	for _, preset := range PresetNames() {
		f.Add(preset, "orders-0_4b1c", "orders-0", "4b1c")
	}
	f.Add("{pod}_{uid}", "orders-0_4b1c", "orders-0", "4b1c")
	f.Add("{pod}-external-cert-manager-controller", "cm-0-external-cert-manager-controller", "cm-0", "")
	f.Add("{pod}:{any}", "web-1:xyz", "web-1", "")
	f.Add("{pod}-{any}", "web-1", "web", "")
	f.Add("{uid}{pod}", "", "", "")
	f.Fuzz(func(t *testing.T, template, holder, pod, uid string) {
		format, err := ParseHolderFormat(template)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		// The fence is given pod names by the API server (a pod-bound token's extra), so they are valid.
		if isPodName(pod) && format.Names(holder, pod, uid) && !format.Fits(holder) {
			t.Fatalf("%q names pod %q (uid %q) but does not fit %q", holder, pod, uid, template)
		}
		_ = SuggestFormat(holder, pod, uid)
	})
}

// FuzzParseElections reads arbitrary LEASEGATE_ELECTIONS values: never a panic, and what it accepts
// encodes back to the same elections.
func FuzzParseElections(f *testing.F) {
	f.Add(EncodeElections([]ElectionSpec{
		NewElectionSpec("fast", "orders-fast", Proportional(2*time.Second), ""),
		NewElectionSpec("slow", "orders-slow", Timing{LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}, "leader"),
	}))
	f.Add(`[{"name":"a","lease":"a","leaseDuration":"1s","renewDeadline":"2s","retryPeriod":"3s"}]`)
	f.Add(`[{"name":"A","lease":"a"},{"name":"A","lease":"a"}]`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, value string) {
		specs, err := ParseElections(value)
		if err != nil {
			return
		}
		again, err := ParseElections(EncodeElections(specs))
		if err != nil || !reflect.DeepEqual(specs, again) {
			t.Fatalf("accepted %q, but its encoding reads back as %+v (%v)", value, again, err)
		}
	})
}

// FuzzTimingFor derives timing from arbitrary takeover objectives and margins: what it returns keeps the
// rules and meets the objective, or the error says the shortest or longest objective that can be met.
func FuzzTimingFor(f *testing.F) {
	f.Add(int64(8*time.Second), int64(time.Second))
	f.Add(int64(2*time.Second), int64(time.Second))
	f.Add(int64(time.Second), int64(0))
	f.Add(int64(1<<62), int64(0))
	f.Fuzz(func(t *testing.T, objective, margin int64) {
		if margin < 0 {
			return // a margin is validated before it gets here (config: a non-negative duration)
		}
		timing, err := TimingFor(time.Duration(objective), time.Duration(margin))
		if err != nil {
			if !strings.Contains(err.Error(), "objective is") {
				t.Fatalf("the error does not say what can be met: %v", err)
			}
			return
		}
		if err := timing.Validate(); err != nil {
			t.Fatalf("TimingFor(%s, %s) = %+v, which breaks the rules: %v", time.Duration(objective), time.Duration(margin), timing, err)
		}
		if budget := timing.LeaseDuration + time.Duration(margin); budget > time.Duration(objective) {
			t.Fatalf("TimingFor(%s, %s): lease duration %s + margin exceeds the objective", time.Duration(objective), time.Duration(margin), timing.LeaseDuration)
		}
	})
}
