package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestWebhookLinksNoGateProxy keeps the mutation gate's proxy (internal/gate, the agent's forwarder and
// connection pool) out of leasegate-webhook: the injector checks a pod's gate settings with the gate's
// pure rules (internal/gate/rules) alone.
func TestWebhookLinksNoGateProxy(t *testing.T) {
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	if deps := strings.Fields(string(out)); slices.Contains(deps, "github.com/leasegate/leasegate/internal/gate") {
		t.Error("cmd/webhook links internal/gate, the agent's proxy: check gate settings with internal/gate/rules; " +
			"`go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/webhook` shows the path")
	}
}
