package inject

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leasegate/leasegate/internal/lease"
)

func TestPlanElectionsLimits(t *testing.T) {
	var many strings.Builder
	for i := range lease.MaxElections + 1 {
		fmt.Fprintf(&many, "loop-%d: {}\n", i)
	}
	tests := []struct{ name, value, want string }{
		{"more elections than an agent runs", many.String(), "17 elections\": a pod runs 1 to 16 elections"},
		{"an empty map", "{}", "0 elections\": a pod runs 1 to 16 elections"},
		{"a bad duration", "poller: {takeover: soon}", `time: invalid duration "soon"`},
		{"an unknown field", "poller: {takeOver: 5s}", `unknown field "poller.takeOver"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := planElections(tt.value, "orders", explicitTiming{}, lease.DefaultTiming, time.Second, field.NewPath("elections"))
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tt.want) {
				t.Errorf("planElections() = %v, want an error containing %q", errs, tt.want)
			}
		})
	}
}
