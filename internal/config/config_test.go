package config

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/leasegate/leasegate/internal/version"
)

func TestLoadDefaults(t *testing.T) {
	c, err := Load([]byte(""))
	if err != nil {
		t.Fatalf("Load(empty) = %v", err)
	}
	if got := c.Election.Timing(); got.LeaseDuration != 15*time.Second || got.RenewDeadline != 10*time.Second || got.RetryPeriod != 2*time.Second {
		t.Errorf("default timing = %+v, want client-go's 15s/10s/2s", got)
	}
	if got := c.Election.ClockSkewMargin.Duration; got != time.Second {
		t.Errorf("default clockSkewMargin = %s, want 1s", got)
	}
	if want := "ghcr.io/leasegate/leasegate-agent:" + version.Version; c.Agent.Image != want {
		t.Errorf("default image = %q, want %q", c.Agent.Image, want)
	}
	if c.Agent.Port != 9440 || c.Agent.NativeSidecar != NativeSidecarAuto || c.Agent.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("agent defaults = %+v", c.Agent)
	}
	if got := c.Agent.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("64Mi")) != 0 {
		t.Errorf("default memory limit = %s, want 64Mi", got.String())
	}
}

func TestLoadKeepsExplicitValues(t *testing.T) {
	c, err := Load([]byte(`
election: {leaseDuration: 6s, renewDeadline: 4s, retryPeriod: 1s, clockSkewMargin: 0s}
agent:
  image: registry.example/leasegate-agent:v9
  imagePullPolicy: Never
  nativeSidecar: never
  port: 9555
  resources: {requests: {cpu: 5m}}
`))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if got := c.Election.ClockSkewMargin.Duration; got != 0 {
		t.Errorf("an explicit clockSkewMargin of 0s became %s", got)
	}
	if c.Election.Timing().LeaseDuration != 6*time.Second || c.Agent.Port != 9555 || c.Agent.NativeSidecar != NativeSidecarNever {
		t.Errorf("explicit values lost: %+v", c)
	}
	if _, ok := c.Agent.Resources.Limits[corev1.ResourceMemory]; ok {
		t.Errorf("resources given by the user must be used as they are, not merged with defaults: %+v", c.Agent.Resources)
	}
}

func TestLoadDefaultsGuards(t *testing.T) {
	c, err := Load([]byte(`
guards:
- name: orders
  lease: orders
  resources: [{group: apps, resources: [deployments]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Guards[0]
	if g.Enforcement != EnforcementDeny || strings.Join(g.Resources[0].Operations, ",") != "CREATE,UPDATE,DELETE" {
		t.Errorf("guard defaults = %+v", g)
	}
	if c.MissingPodIdentity != EnforcementDeny || strings.Join(c.Exempt.Groups, ",") != "system:masters" {
		t.Errorf("fence defaults: missingPodIdentity %q, exempt groups %q", c.MissingPodIdentity, c.Exempt.Groups)
	}
}

func TestLoadReportsEveryErrorWithItsPath(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown field, as a typo would be",
			yaml: "election: {leaseDuraton: 15s}",
			want: []string{`unknown field "election.leaseDuraton"`},
		},
		{
			name: "renew deadline not shorter than lease duration",
			yaml: "election: {leaseDuration: 10s, renewDeadline: 10s}",
			want: []string{`election.renewDeadline: Invalid value: "10s": renew deadline (10s) must be shorter than lease duration (10s); the rule is retryPeriod < renewDeadline < leaseDuration`},
		},
		{
			name: "retry period not shorter than renew deadline",
			yaml: "election: {retryPeriod: 12s}",
			want: []string{`election.retryPeriod: Invalid value: "12s": retry period (12s) must be shorter than renew deadline (10s)`},
		},
		{
			name: "lease duration a Lease cannot store",
			yaml: "election: {leaseDuration: 15500ms}",
			want: []string{`election.leaseDuration: Invalid value: "15.5s": lease duration must be a whole number of seconds`},
		},
		{
			name: "duration that does not parse",
			yaml: "election: {retryPeriod: often}",
			want: []string{`config.yaml: `, `time: invalid duration "often"`},
		},
		{
			name: "several agent problems at once, each with its path",
			yaml: `
election: {clockSkewMargin: -1s}
agent: {imagePullPolicy: Sometimes, nativeSidecar: maybe, port: 70000, image: "a b", resources: {requests: {memory: 1Gi}, limits: {memory: 64Mi}}}`,
			want: []string{
				`election.clockSkewMargin: Invalid value: "-1s": must not be negative`,
				`agent.imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`,
				`agent.nativeSidecar: Unsupported value: "maybe": supported values: "auto", "always", "never"`,
				`agent.port: Invalid value: 70000: must be a TCP port, 1-65535`,
				`agent.image: Invalid value: "a b": must be an image reference without whitespace`,
				`agent.resources.requests[memory]: Invalid value: "1Gi": must not exceed the limit 64Mi`,
			},
		},
		{
			name: "every guard problem, each at its index",
			yaml: `
missingPodIdentity: maybe
guards:
- name: Orders
  lease: shop/orders/extra
  serviceAccounts: [""]
  resources: [{group: apps, resources: ["*"], operations: [PATCH]}]
  namespaces: [Shop]
  enforcement: block
- name: billing
  lease: billing
  leaseKind: MulticlusterLease
  resources: []
  holderFormat: "{pod}-{any}"
- name: billing
  holderFormat: cert-manger
  lease: ""
  resources: [{group: "", resources: []}]`,
			want: []string{
				`missingPodIdentity: Unsupported value: "maybe": supported values: "deny", "warn", "allow"`,
				`guards[0].name: Invalid value: "Orders": must be a DNS label`,
				`guards[0].lease: Invalid value: "shop/orders/extra": name part:`,
				`guards[0].serviceAccounts[0]: Invalid value: "": must not be empty`,
				`guards[0].resources[0].resources[0]: Invalid value: "*": must be a resource name such as deployments`,
				`guards[0].resources[0].operations[0]: Unsupported value: "PATCH": supported values: "CREATE", "UPDATE", "DELETE", "CONNECT"`,
				`guards[0].namespaces[0]: Invalid value: "Shop"`,
				`guards[0].enforcement: Unsupported value: "block": supported values: "deny", "warn", "dryrun"`,
				`guards[1].leaseKind: Unsupported value: "MulticlusterLease": supported values: "Lease", "MultiClusterLease"`,
				`guards[1].resources: Required value: a guard fences at least one resource`,
				`guards[1].holderFormat: Invalid value: "{pod}-{any}": ambiguous: with only "-" between {pod} and {any}, pod "web" would hold the lease of pod "web-1"; separate them with a character no pod name has, such as '_', or use {uid}`,
				`guards[2].holderFormat: Invalid value: "cert-manger": neither a preset (cert-manager, client-go, leasegate-agent, pod-name) nor a template with {pod}`,
				`guards[2].name: Duplicate value: "billing"`,
				`guards[2].lease: Required value`,
				`guards[2].resources[0].resources: Required value`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Load() succeeded, want errors %q", tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Load() error =\n%s\nwant it to contain\n%s", err, want)
				}
			}
		})
	}
}
