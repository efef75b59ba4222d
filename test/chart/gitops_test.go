package chart

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestGuardedRulesAreNeverRendered holds the chart to what makes it safe to sync from GitOps: the rules and
// matchConditions of guarded.leasegate.io are leasegate-webhook's alone (server-side apply), so the chart
// renders neither, for every values file, whatever renders it. A rendered `rules: []` would be applied by
// every sync (`helm template | kubectl apply`, Argo CD, Flux) and switch the fence off until the elected
// replica applied its rules again.
func TestGuardedRulesAreNeverRendered(t *testing.T) {
	tl := tools(t)
	for _, values := range valuesFiles(t) {
		t.Run("values="+filepath.Base(values), func(t *testing.T) {
			var files []string
			if values != "" {
				files = []string{values}
			}
			out, err := tl.RenderChart(namespace, files...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			found := false
			for _, doc := range strings.Split(string(out), "\n---\n") {
				obj := &unstructured.Unstructured{}
				if yaml.Unmarshal([]byte(doc), &obj.Object) != nil || obj.GetKind() != "ValidatingWebhookConfiguration" {
					continue
				}
				webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
				for _, w := range webhooks {
					entry := w.(map[string]any)
					if entry["name"] != "guarded.leasegate.io" {
						continue
					}
					found = true
					for _, field := range []string{"rules", "matchConditions"} {
						if v, rendered := entry[field]; rendered {
							t.Errorf("guarded.leasegate.io renders %s: %v; leasegate-webhook owns it, and an applied manifest that sets it replaces the live one", field, v)
						}
					}
				}
			}
			if !found {
				t.Fatal("the chart rendered no guarded.leasegate.io entry")
			}
		})
	}
}
