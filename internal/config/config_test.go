package config

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/apiresources"
	"github.com/leasegate/leasegate/internal/golden"
	"github.com/leasegate/leasegate/internal/version"
)

// update rewrites testdata/defaults.golden.yaml: go test ./internal/config -update
var update = flag.Bool("update", false, "rewrite testdata/defaults.golden.yaml from the current defaults")

// TestDefaultsGolden pins every default: a change to one shows in review as a diff of this file.
func TestDefaultsGolden(t *testing.T) {
	c, err := Load(nil)
	if err != nil {
		t.Fatalf("Load(empty) = %v", err)
	}
	c.Agent.Image = strings.Replace(c.Agent.Image, ":"+version.Version, ":VERSION", 1) // the binary's own version
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	golden.Compare(t, filepath.Join("testdata", "defaults.golden.yaml"), out, *update, "go test ./internal/config -update")
}

func TestAPIVersionAndKind(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		wantWarning  bool
		wantErr      string
	}{
		{name: "named: no warning", config: "apiVersion: config.leasegate.io/v1alpha1\nkind: LeasegateConfiguration\n"},
		{name: "unnamed: read as v1alpha1, with a warning saying what to add", config: "guards: []\n", wantWarning: true},
		{name: "another version is refused, naming the one supported", config: "apiVersion: config.leasegate.io/v2\nkind: LeasegateConfiguration\n",
			wantErr: `apiVersion: Unsupported value: "config.leasegate.io/v2": supported values: "config.leasegate.io/v1alpha1"`},
		{name: "a kind alone is not a version", config: "kind: LeasegateConfiguration\n", wantErr: `apiVersion: Unsupported value: ""`},
		{name: "another kind is refused", config: "apiVersion: config.leasegate.io/v1alpha1\nkind: ConfigMap\n", wantErr: `kind: Unsupported value: "ConfigMap"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.config))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(c.Warnings) > 0; got != tc.wantWarning {
				t.Fatalf("warnings %q, want some: %v", c.Warnings, tc.wantWarning)
			}
			if tc.wantWarning && !strings.Contains(c.Warnings[0], "add `apiVersion: config.leasegate.io/v1alpha1` and `kind: LeasegateConfiguration`") {
				t.Errorf("the warning does not say what to add: %q", c.Warnings[0])
			}
			if c.APIVersion != APIVersion || c.Kind != Kind {
				t.Errorf("loaded as %s %s, want %s %s", c.APIVersion, c.Kind, APIVersion, Kind)
			}
		})
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

// TestAgentSecurityContext: leasegate-config may replace the agent's security context, whole, as long as
// it stays within the restricted Pod Security Standard; every way out of it is refused, naming the field.
func TestAgentSecurityContext(t *testing.T) {
	const restricted = "runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}"
	for _, tt := range []struct {
		name string
		sc   string
		// want are the errors; none: it loads, and the agent's security context is sc as it is.
		want []string
	}{
		{name: "unset: the image's user, read-only root, restricted", sc: ""},
		{name: "no fixed user, for a platform that assigns UIDs (OpenShift restricted-v2)", sc: "{" + restricted + "}"},
		{name: "another non-root user and a writable root", sc: "{" + restricted + ", runAsUser: 1000, readOnlyRootFilesystem: false}"},
		{name: "a Localhost seccomp profile and AppArmor's runtime default",
			sc: "{runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: Localhost, localhostProfile: agent.json}, appArmorProfile: {type: RuntimeDefault}}"},
		{name: "empty: nothing of the restricted standard", sc: "{}", want: []string{
			"agent.securityContext.allowPrivilegeEscalation: Invalid value: true: must be set to false; the agent's security context must stay within the restricted Pod Security Standard",
			"agent.securityContext.runAsNonRoot: Invalid value: false: must be set to true",
			"agent.securityContext.capabilities.drop: Required value: must include ALL",
			"agent.securityContext.seccompProfile.type: Required value: must be RuntimeDefault or Localhost",
		}},
		{name: "privileged", sc: "{" + restricted + ", privileged: true}", want: []string{"agent.securityContext.privileged: Invalid value: true: must be false or unset"}},
		{name: "privilege escalation allowed", sc: "{runAsNonRoot: true, allowPrivilegeEscalation: true, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}",
			want: []string{"agent.securityContext.allowPrivilegeEscalation: Invalid value: true: must be set to false"}},
		{name: "root", sc: "{" + restricted + ", runAsUser: 0}", want: []string{"agent.securityContext.runAsUser: Invalid value: 0: must not be 0 (root); leave it unset for the platform to assign one"}},
		{name: "runAsNonRoot false", sc: "{runAsNonRoot: false, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}",
			want: []string{"agent.securityContext.runAsNonRoot: Invalid value: false: must be set to true"}},
		{name: "a capability added", sc: "{runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL], add: [NET_ADMIN]}, seccompProfile: {type: RuntimeDefault}}",
			want: []string{"agent.securityContext.capabilities.add: Forbidden: the agent needs no capability"}},
		{name: "capabilities kept", sc: "{runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [NET_RAW]}, seccompProfile: {type: RuntimeDefault}}",
			want: []string{"agent.securityContext.capabilities.drop: Required value: must include ALL"}},
		{name: "seccomp unconfined", sc: "{runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: Unconfined}}",
			want: []string{"agent.securityContext.seccompProfile.type: Required value: must be RuntimeDefault or Localhost"}},
		{name: "AppArmor unconfined", sc: "{" + restricted + ", appArmorProfile: {type: Unconfined}}",
			want: []string{`agent.securityContext.appArmorProfile.type: Invalid value: "Unconfined": must be RuntimeDefault or Localhost`}},
		{name: "an unmasked /proc", sc: "{" + restricted + ", procMount: Unmasked}", want: []string{`agent.securityContext.procMount: Invalid value: "Unmasked": must be Default or unset`}},
		{name: "SELinux options of its own", sc: "{" + restricted + ", seLinuxOptions: {type: spc_t}}", want: []string{"agent.securityContext.seLinuxOptions: Forbidden"}},
		{name: "Windows options", sc: "{" + restricted + ", windowsOptions: {hostProcess: true}}", want: []string{"agent.securityContext.windowsOptions: Forbidden"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := ""
			if tt.sc != "" {
				data = "agent: {securityContext: " + tt.sc + "}"
			}
			c, err := Load([]byte(data))
			if len(tt.want) > 0 {
				if err == nil {
					t.Fatalf("Load() succeeded, want errors %q", tt.want)
				}
				for _, want := range tt.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Load() error =\n%s\nwant it to contain\n%s", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			want := AgentSecurityContext()
			if tt.sc != "" {
				var given struct {
					Agent struct {
						SecurityContext *corev1.SecurityContext `json:"securityContext"`
					} `json:"agent"`
				}
				if err := yaml.Unmarshal([]byte(data), &given); err != nil {
					t.Fatal(err)
				}
				want = given.Agent.SecurityContext
			}
			if !equality.Semantic.DeepEqual(c.Agent.SecurityContext, want) {
				t.Errorf("the agent's security context is %+v, want %+v (as given, not merged with the default)", c.Agent.SecurityContext, want)
			}
		})
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
			name: "a guard over a node's heartbeat",
			yaml: `
guards:
- {name: nodes, lease: kube-node-lease/node-1, resources: [{group: "", resources: [configmaps]}]}`,
			want: []string{`guards[0].lease: Invalid value: "kube-node-lease/node-1": leases in kube-node-lease are nodes' heartbeats, which the fence does not watch; name the lease your workload elects on`},
		},
		{
			name: "a lease to adopt without its namespace, or not a lease name",
			yaml: `adoptLeases: [cert-manager-controller, "cert-manager/Controller"]`,
			want: []string{
				`adoptLeases[0]: Invalid value: "cert-manager-controller": write "<namespace>/<name>": adopting another controller's lease is decided per namespace`,
				`adoptLeases[1]: Invalid value: "cert-manager/Controller": name part:`,
			},
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
				`guards[0].resources[0].resources[0]: Invalid value: "*": must be a resource name as the API serves it, plural and lowercase, such as deployments (kubectl api-resources); no wildcards`,
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

func TestLoadHoldsGuardedResourcesToNamesTheAPIServerMatches(t *testing.T) {
	for _, tt := range []struct {
		name, resources string
		want            []string
	}{
		{"a wildcard group", `{group: "*", resources: [deployments]}`,
			[]string{`guards[0].resources[0].group: Invalid value: "*": wildcards are not supported: name one API group per entry ("" for the core group, apps, batch, ...)`}},
		{"a capitalised group", `{group: Apps, resources: [deployments]}`,
			[]string{`guards[0].resources[0].group: Invalid value: "Apps": must be an API group as kubectl api-resources lists it, lowercase`}},
		{"a capitalised resource", `{group: apps, resources: [Deployments]}`,
			[]string{`guards[0].resources[0].resources[0]: Invalid value: "Deployments": must be a resource name as the API serves it, plural and lowercase, such as deployments`}},
		{"a subresource", `{group: apps, resources: [deployments/scale]}`,
			[]string{`guards[0].resources[0].resources[0]: Invalid value: "deployments/scale": ` +
				`must be a resource name as the API serves it, plural and lowercase, such as deployments (kubectl api-resources); no wildcards, and no subresources: a guard covers its resources' subresources (excludeSubresources leaves some out)`}},
		{"a wildcard operation", `{group: apps, resources: [deployments], operations: ["*"]}`,
			[]string{`guards[0].resources[0].operations[0]: Unsupported value: "*": supported values: "CREATE", "UPDATE", "DELETE", "CONNECT"`}},
		{"excluded subresources that are no names, or twice", `{group: apps, resources: [deployments], excludeSubresources: ["*", Status, scale, scale]}`,
			[]string{
				`guards[0].resources[0].excludeSubresources[0]: Invalid value: "*": must be a subresource name, lowercase, such as status or scale (no wildcards: list each one to leave out)`,
				`guards[0].resources[0].excludeSubresources[1]: Invalid value: "Status": must be a subresource name`,
				`guards[0].resources[0].excludeSubresources[3]: Duplicate value: "scale"`,
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]byte("guards: [{name: g, lease: l, resources: [" + tt.resources + "]}]"))
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
	if _, err := Load([]byte(`guards: [{name: g, lease: l, resources: [{group: "", resources: [configmaps]}, {group: cert-manager.io, resources: [certificates], excludeSubresources: [status]}]}]`)); err != nil {
		t.Errorf("Load() of the core group and a CustomResourceDefinition's = %v", err)
	}
}

// discovery is what an API server serves, in part: namespaced and cluster-scoped resources and their
// subresources.
var discovery = apiresources.NewIndex([]*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Namespaced: true, Verbs: metav1.Verbs{"create", "update", "delete"}},
		{Name: "namespaces", Verbs: metav1.Verbs{"create", "update", "delete"}},
		{Name: "namespaces/finalize", Verbs: metav1.Verbs{"update"}},
		{Name: "nodes", Verbs: metav1.Verbs{"create", "update", "delete"}},
		{Name: "pods", Namespaced: true, Verbs: metav1.Verbs{"create", "update", "delete"}},
		{Name: "pods/log", Namespaced: true, Verbs: metav1.Verbs{"get"}},
		{Name: "pods/status", Namespaced: true, Verbs: metav1.Verbs{"get", "update", "patch"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments/scale", Namespaced: true, Verbs: metav1.Verbs{"get", "update", "patch"}},
		{Name: "deployments", Namespaced: true, Verbs: metav1.Verbs{"create", "update", "delete"}},
		{Name: "deployments/status", Namespaced: true, Verbs: metav1.Verbs{"get", "update", "patch"}},
	}},
	{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "clusterroles", Verbs: metav1.Verbs{"create", "update", "delete"}},
	}},
})

func TestLoadServedRefusesWhatDiscoverySaysCannotBeGuarded(t *testing.T) {
	for _, tt := range []struct {
		name, guards string
		want         []string // empty: accepted
	}{
		{"namespaced resources and their subresources", `[{name: g, lease: l, resources: [{group: apps, resources: [deployments], excludeSubresources: [status, scale]}]}]`, nil},
		{"a resource discovery does not know (yet)", `[{name: g, lease: l, resources: [{group: example.com, resources: [widgets], excludeSubresources: [status]}]}]`, nil},
		{"an exclusion one of the entry's resources serves", `[{name: g, lease: l, resources: [{group: "", resources: [configmaps, pods], excludeSubresources: [status]}]}]`, nil},
		{"namespaces, and nodes and clusterroles: cluster-scoped", `
- {name: ok, lease: l, resources: [{group: apps, resources: [deployments]}]}
- {name: g, lease: l, resources: [{group: "", resources: [configmaps, namespaces, nodes]}, {group: rbac.authorization.k8s.io, resources: [clusterroles]}]}`,
			[]string{
				`guards[1].resources[0].resources[1]: Invalid value: "namespaces": namespaces is cluster-scoped, and a guard fences namespaced resources only ` +
					`(its writes have no namespace to find the lease in, and cluster-scoped objects are the control plane's to write): remove it, and control who writes namespaces with RBAC`,
				`guards[1].resources[0].resources[2]: Invalid value: "nodes": nodes is cluster-scoped`,
				`guards[1].resources[1].resources[0]: Invalid value: "clusterroles": clusterroles.rbac.authorization.k8s.io is cluster-scoped`,
			}},
		{"an exclusion no resource of the entry serves, or reaches with a write", `[{name: g, lease: l, resources: [{group: apps, resources: [deployments], excludeSubresources: [stauts]}, {group: "", resources: [pods], excludeSubresources: [log]}]}]`,
			[]string{
				`guards[0].resources[0].excludeSubresources[0]: Invalid value: "stauts": no resource of this entry serves a subresource "stauts" that a write reaches; they serve scale, status`,
				`guards[0].resources[1].excludeSubresources[0]: Invalid value: "log": no resource of this entry serves a subresource "log" that a write reaches; they serve status`,
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte("guards: " + tt.guards)
			if _, err := Load(data); err != nil {
				t.Fatalf("Load() = %v: discovery's checks are LoadServed's alone", err)
			}
			_, err := LoadServed(data, discovery)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("LoadServed() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadServed() succeeded, want errors %q", tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("LoadServed() error =\n%s\nwant it to contain\n%s", err, want)
				}
			}
		})
	}
}

func TestDefaultsIsAnEmptyFileWithoutItsWarning(t *testing.T) {
	empty, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	empty.Warnings = nil
	if got := DefaultConfig(); !equality.Semantic.DeepEqual(got, empty) {
		t.Errorf("DefaultConfig() = %+v, want what an empty file loads to, %+v", got, empty)
	}
}
