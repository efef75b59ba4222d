package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPluginLinksNeitherWebhookNorProxy keeps kubectl-leasegate a client: it reads what the webhooks
// record (the names in internal/contract), and links neither the validating webhook's handlers
// (internal/validate) nor the mutation gate's proxy (internal/gate).
func TestPluginLinksNeitherWebhookNorProxy(t *testing.T) {
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, forbidden := range []string{"github.com/leasegate/leasegate/internal/validate", "github.com/leasegate/leasegate/internal/gate"} {
		if slices.Contains(deps, forbidden) {
			t.Errorf("cmd/kubectl-leasegate links %s; `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/kubectl-leasegate` shows the path", forbidden)
		}
	}
}
