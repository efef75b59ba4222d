package v1alpha1

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAPILinksNoAgentClient keeps the public API package off the agent's election loop and its HTTP
// client: it shares only package lease's judgement and timing with the agent, and whoever imports the
// API (the fence, the election controller, other projects) should not link a second API client.
func TestAPILinksNoAgentClient(t *testing.T) {
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{"github.com/leasegate/leasegate/internal/kubeclient", "github.com/leasegate/leasegate/internal/leaseelection"}
	var linked []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				linked = append(linked, pkg)
			}
		}
	}
	if len(linked) > 0 {
		t.Errorf("pkg/multicluster/v1alpha1 links %s. Keep what it shares with the agent in internal/lease, which "+
			"reaches no network; `go list -deps -f '{{.ImportPath}}: {{.Imports}}' .` shows the path.",
			strings.Join(linked, ", "))
	}
}
