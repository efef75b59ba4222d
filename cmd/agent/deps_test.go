package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentLinksNoClientGo keeps the agent off client-go and apimachinery, the reason internal/kubeclient
// exists: the agent runs beside every replica of every opted-in workload, and client-go's REST client,
// reflector and API machinery made its binary 14.6 MB instead of 10 and its resident memory about 18 MiB.
func TestAgentLinksNoClientGo(t *testing.T) {
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{"k8s.io/client-go", "k8s.io/apimachinery"}
	var linked []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, module := range forbidden {
			if pkg == module || strings.HasPrefix(pkg, module+"/") {
				linked = append(linked, pkg)
			}
		}
	}
	if len(linked) > 0 {
		t.Errorf("cmd/agent links %s.\nThe agent must not link %s: it runs beside every replica of every opted-in "+
			"workload, and client-go made its binary 14.6 MB instead of 10 and its memory about 18 MiB. Talk to the "+
			"API server through internal/kubeclient (and keep shared types in packages that import neither); "+
			"`go mod why -m` or `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/agent` shows the path.",
			strings.Join(linked, ", "), strings.Join(forbidden, " or "))
	}
}
