package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/test/framework/checkout"
)

// previousLoader is a main package written into release N−1's tree: that release's own config.Load over
// the config.yaml on stdin, as its webhook's config.leasegate.io entry and its live Store run it.
const previousLoader = `package main

import (
	"fmt"
	"io"
	"os"

	"github.com/leasegate/leasegate/internal/config"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := config.Load(data); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// TestDefaultConfigLoadsInPreviousWebhook pins the version-skew rule for leasegate-config: while helm
// upgrade rolls the webhook, replicas of release N−1 still serve, and they judge the new leasegate-config
// (config.leasegate.io) with their own loader, which refuses unknown fields. A config field this release
// added that the chart renders by default makes every upgrade from N−1 fail, with nothing upgraded. So
// the chart's default leasegate-config must load in N−1's loader, built here from the repository's
// history (checkout.PreviousCommit). The other direction is helm rollback: N−1's default
// leasegate-config must load in this release's webhook, which serves while the rollback rolls it back.
func TestDefaultConfigLoadsInPreviousWebhook(t *testing.T) {
	tl := tools(t)
	previous := checkout.PreviousCommit[:7]
	src, err := checkout.ExportCommit(checkout.PreviousCommit, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	rendered, err := tl.RenderChart(namespace)
	if err != nil {
		t.Fatal(err)
	}
	current := renderedConfig(t, rendered)
	loaderDir := filepath.Join(src, "cmd", "skew-config-load")
	if err := os.MkdirAll(loaderDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(loaderDir, "main.go"), []byte(previousLoader), 0o644); err != nil {
		t.Fatal(err)
	}
	loader, err := checkout.BuildBinaryFrom(src, t.TempDir(), "./cmd/skew-config-load", "previous-config-load")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(loader)
	cmd.Stdin = strings.NewReader(current)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("the chart's default leasegate-config does not load in the webhook of %s (release N-1), which still serves while helm upgrade "+
			"rolls the webhook, so every upgrade from it would fail (config.leasegate.io denied):\n  %s\n"+
			"a config field newer than %s must render only when the user sets it: leave it out of values.yaml's config "+
			"(document it there as a comment), let config.Default fill it in for the webhook, and keep it in values.schema.json "+
			"so a value the user sets is still checked\nthe rendered config:\n%s",
			previous, strings.TrimSpace(stderr.String()), previous, current)
	}

	earlier, err := tl.RunHelm("template", "leasegate", filepath.Join(src, "charts", "leasegate"), "--namespace", namespace, "--kube-version", tl.KubeVersion)
	if err != nil {
		t.Fatalf("helm template of %s's chart: %v\n%s", previous, err, earlier)
	}
	if _, err := config.Load([]byte(renderedConfig(t, earlier))); err != nil {
		t.Errorf("the default leasegate-config of %s (release N-1) does not load in this webhook, which serves while helm rollback returns to it: %v\n"+
			"keep every field and value that release renders accepted (deprecate with a warning, do not remove)", previous, err)
	}
}

// renderedConfig is the config.yaml of the leasegate-config that helm template rendered.
func renderedConfig(t *testing.T, rendered []byte) string {
	t.Helper()
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var cm struct {
			Kind     string                `json:"kind"`
			Metadata struct{ Name string } `json:"metadata"`
			Data     map[string]string     `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err == nil && cm.Kind == "ConfigMap" && cm.Metadata.Name == "leasegate-config" {
			return cm.Data[config.Key]
		}
	}
	t.Fatal("the chart renders no leasegate-config")
	return ""
}
