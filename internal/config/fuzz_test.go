package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// FuzzLoad feeds leasegate-config's config.yaml arbitrary bytes. Load never panics; an error says which
// key is at fault (it starts with config.yaml or a field path); a configuration it accepts, written back
// out, loads again to the same value, so what the webhook keeps in force is what it was given.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"",
		"election: {leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s, clockSkewMargin: 1s}\n",
		"agent: {image: registry.example/leasegate-agent:v1, nativeSidecar: auto, resources: {limits: {memory: 32Mi}}}\n",
		`guards:
- name: orders
  lease: shop/orders
  leaseKind: MultiClusterLease
  holderFormat: "{pod}_{any}"
  serviceAccounts: [orders, ops/deployer]
  resources: [{group: apps, resources: [deployments], operations: [CREATE, UPDATE]}]
  namespaces: [shop]
  enforcement: warn
missingPodIdentity: allow
exempt: {users: [ci-bot], groups: [system:masters]}
`,
		"election: {leaseDuraton: 15s}",
		"election: {retryPeriod: often}",
		"guards: [{name: Orders, lease: '', resources: []}]",
		"{{{",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(data)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, Key) && !strings.ContainsAny(msg, ".:[") {
				t.Fatalf("the error names no key or field: %q", msg)
			}
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("an accepted configuration does not marshal: %v", err)
		}
		again, err := Load(out)
		if err != nil {
			t.Fatalf("an accepted configuration, written out, is refused: %v\n%s", err, out)
		}
		// Written out, it names its apiVersion and kind: the warning about their absence goes.
		cfg.Warnings = nil
		if !equality.Semantic.DeepEqual(cfg, again) {
			t.Fatalf("an accepted configuration changes when written out and loaded again:\n%s", out)
		}
	})
}
