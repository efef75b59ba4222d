package checkout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildAgent builds cmd/agent into dir and returns the binary's path.
func BuildAgent(dir string) (string, error) {
	return BuildBinary(dir, "./cmd/agent", "leasegate-agent")
}

// BuildWebhook builds cmd/webhook into dir and returns the binary's path.
func BuildWebhook(dir string) (string, error) {
	return BuildBinary(dir, "./cmd/webhook", "leasegate-webhook")
}

// BuildBinary builds the package pkg (relative to the repository's root) as a static, stripped binary
// named name in dir, and returns its path.
func BuildBinary(dir, pkg, name string) (string, error) {
	return BuildBinaryFrom(RepoRoot(), dir, pkg, name)
}

// BuildBinaryFrom is BuildBinary for the module whose source is in root (an earlier commit's, say).
func BuildBinaryFrom(root, dir, pkg, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
	}
	return out, nil
}
