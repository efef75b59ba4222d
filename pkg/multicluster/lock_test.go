package multicluster

import (
	"fmt"
	"testing"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// The errors quote the share of the lease duration that a confirmed heartbeat grants: it must be
// ConfirmedFor's.
func TestConfirmedShareIsConfirmedFors(t *testing.T) {
	const seconds = 100
	want := fmt.Sprintf("%g%% of the lease duration", v1alpha1.ConfirmedFor(seconds).Seconds()*100/seconds)
	if confirmedShare != want {
		t.Errorf("confirmedShare = %q, want %q", confirmedShare, want)
	}
}
