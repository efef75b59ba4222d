package webhookrules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"

	"github.com/leasegate/leasegate/internal/apiresources"
	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/internal/validate"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// served is discovery as a cluster's API server answers it, in part: the resources the tests guard, with
// their subresources and verbs, some cluster-scoped, and a CustomResourceDefinition's.
var served = apiresources.NewIndex([]*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "secrets", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "services", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "services/proxy", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}},
		{Name: "services/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "pods", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}},
		{Name: "pods/binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
		{Name: "pods/eviction", Namespaced: true, Verbs: metav1.Verbs{"create"}},
		{Name: "pods/exec", Namespaced: true, Verbs: metav1.Verbs{"create", "get"}},
		{Name: "pods/log", Namespaced: true, Verbs: metav1.Verbs{"get"}},
		{Name: "pods/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "namespaces", Namespaced: false, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "namespaces/finalize", Namespaced: false, Verbs: metav1.Verbs{"update"}},
		{Name: "namespaces/status", Namespaced: false, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "nodes", Namespaced: false, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "nodes/status", Namespaced: false, Verbs: metav1.Verbs{"get", "patch", "update"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "deployments/scale", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "deployments/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "statefulsets", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "statefulsets/scale", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "statefulsets/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
		{Name: "daemonsets", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "daemonsets/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
	}},
	{GroupVersion: "batch/v1", APIResources: []metav1.APIResource{
		{Name: "jobs", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "jobs/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
	}},
	{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Namespaced: true, Verbs: metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "widgets/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
	}},
})

func TestRulesMergeGuardsByGroupAndOperations(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Guards = append(cfg.Guards, config.Guard{Name: "more-apps", Lease: "orders", Resources: []config.GuardedResource{
		{Group: "apps", Resources: []string{"statefulsets", "deployments"}, Operations: []string{"UPDATE", "CREATE", "DELETE"}},
	}})
	got, err := json.Marshal(Rules(cfg, served))
	if err != nil {
		t.Fatal(err)
	}
	want := `[` +
		`{"operations":["CREATE","DELETE","UPDATE"],"apiGroups":[""],"apiVersions":["*"],"resources":["secrets","secrets/*","services","services/*"],"scope":"Namespaced"},` +
		`{"operations":["UPDATE"],"apiGroups":[""],"apiVersions":["*"],"resources":["configmaps","configmaps/*"],"scope":"Namespaced"},` +
		`{"operations":["CREATE","DELETE","UPDATE"],"apiGroups":["apps"],"apiVersions":["*"],"resources":["deployments","deployments/*","statefulsets","statefulsets/*"],"scope":"Namespaced"},` +
		`{"operations":["CREATE","DELETE","UPDATE"],"apiGroups":["batch"],"apiVersions":["*"],"resources":["jobs","jobs/*"],"scope":"Namespaced"}]`
	if string(got) != want {
		t.Errorf("Rules() =\n%s\nwant\n%s", got, want)
	}
}

func TestRulesCoverSubresources(t *testing.T) {
	for _, tt := range []struct {
		name   string
		guards string
		want   []string // the resources of the one rule
	}{
		{"a guard covers every subresource", `[{name: g, lease: l, resources: [{group: apps, resources: [deployments]}]}]`,
			[]string{"deployments", "deployments/*"}},
		{"an excluded subresource is left out, the others discovered", `[{name: g, lease: l, resources: [{group: apps, resources: [deployments], excludeSubresources: [status]}]}]`,
			[]string{"deployments", "deployments/scale"}},
		{"every subresource excluded leaves the resource", `[{name: g, lease: l, resources: [{group: apps, resources: [deployments], excludeSubresources: [status, scale]}]}]`,
			[]string{"deployments"}},
		{"a resource discovery does not know yet gets every subresource, the exclusion notwithstanding", `[{name: g, lease: l, resources: [{group: example.com, resources: [gadgets], excludeSubresources: [status]}]}]`,
			[]string{"gadgets", "gadgets/*"}},
		{"a subresource another guard covers stays, as its wildcard alone", `[{name: a, lease: l, resources: [{group: apps, resources: [deployments], excludeSubresources: [status]}]}, {name: b, lease: l, resources: [{group: apps, resources: [deployments]}]}]`,
			[]string{"deployments", "deployments/*"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Load([]byte("guards: " + tt.guards))
			if err != nil {
				t.Fatal(err)
			}
			rules := Rules(cfg, served)
			if len(rules) != 1 || !slices.Equal(rules[0].Resources, tt.want) {
				t.Errorf("Rules() resources = %v, want one rule with %v", resourcesOf(rules), tt.want)
			}
		})
	}
}

// An eviction deletes a pod, but its request is a CREATE of pods/eviction: a guard on deleting pods needs
// a rule of its own for it, or the API server never sends a follower's eviction.
func TestRulesSendTheEvictionsOfAGuardOnDeletingPods(t *testing.T) {
	cfg, err := config.Load([]byte(`guards: [{name: g, lease: l, resources: [{group: "", resources: [pods], operations: [DELETE]}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	got := marshal(Rules(cfg, served))
	want := `[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["*"],"resources":["pods/eviction"],"scope":"Namespaced"},` +
		`{"operations":["DELETE"],"apiGroups":[""],"apiVersions":["*"],"resources":["pods","pods/*"],"scope":"Namespaced"}]`
	if got != want {
		t.Errorf("Rules() =\n%s\nwant\n%s", got, want)
	}
}

func resourcesOf(rules []*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration) [][]string {
	var all [][]string
	for _, r := range rules {
		all = append(all, r.Resources)
	}
	return all
}

// sends is what the API server does with a guarded entry's rules: whether it sends the write to the webhook.
// It follows k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules (Matcher.Matches) line by line:
// exact strings or "*", "resource/subresource" with "*" on either side, and the scope, where a Namespace
// counts as cluster-scoped and its namespace is its own name.
func sends(rules []*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration, req *validate.Request) bool {
	exactOrWildcard := func(items []string, requested string) bool {
		return slices.Contains(items, "*") || slices.Contains(items, requested)
	}
	for _, r := range rules {
		scope := admissionregistrationv1.AllScopes
		if r.Scope != nil {
			scope = *r.Scope
		}
		isNamespace := req.Group == "" && req.Resource == "namespaces"
		switch scope {
		case admissionregistrationv1.NamespacedScope:
			if isNamespace || req.Namespace == "" {
				continue
			}
		case admissionregistrationv1.ClusterScope:
			if !isNamespace && req.Namespace != "" {
				continue
			}
		}
		if !slices.ContainsFunc(r.Operations, func(op admissionregistrationv1.OperationType) bool {
			return op == admissionregistrationv1.OperationAll || string(op) == req.Operation
		}) || !exactOrWildcard(r.APIGroups, req.Group) || !exactOrWildcard(r.APIVersions, "v1") {
			continue
		}
		if slices.ContainsFunc(r.Resources, func(resSub string) bool {
			res, sub, _ := strings.Cut(resSub, "/")
			return (res == "*" || res == req.Resource) && (sub == "*" || sub == req.Subresource)
		}) {
			return true
		}
	}
	return false
}

// checkRulesMatchDecide holds a valid configuration to one contract: the API server sends the webhook a
// write if and only if Decide judges it by a guard. It runs every write that can be told apart (group,
// resource, subresource, operation, namespaced or not) over what the configuration names and what discovery
// serves. A write to a subresource the API server does not serve never happens. For a resource discovery
// does not know yet the rules may send more than Decide judges (it then admits), never less.
func checkRulesMatchDecide(t *testing.T, cfg *config.Config, api *apiresources.Index) {
	t.Helper()
	// Whom a guard gates, and where, is the matchConditions' and the namespace selector's: here every
	// write is from a pod every guard gates.
	for i := range cfg.Guards {
		cfg.Guards[i].ServiceAccounts, cfg.Guards[i].Namespaces = nil, nil
	}
	rules, policy := Rules(cfg, api), validate.Compile(cfg, "leasegate-system")
	requester := &validate.Requester{
		Username: "system:serviceaccount:shop:worker", Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"worker-0"}, "authentication.kubernetes.io/pod-uid": {"uid-0"}},
	}
	groups := map[string][]string{"": {"configmaps", "namespaces", "nodes", "pods", "services"}, "apps": {"deployments", "statefulsets", "daemonsets"},
		"batch": {"jobs"}, "example.com": {"widgets"}, "*": {"deployments"}}
	for _, g := range cfg.Guards {
		for _, r := range g.Resources {
			groups[r.Group] = append(groups[r.Group], r.Resources...)
			groups["other.example.com"] = append(groups["other.example.com"], r.Resources...)
		}
	}
	for group, resources := range groups {
		for _, resource := range resources {
			known, isKnown := api.Lookup(group, resource)
			subresources := append([]string{"", "status", "scale", "made-up"}, known.Subresources...)
			for _, g := range cfg.Guards {
				for _, r := range g.Resources {
					subresources = append(subresources, r.ExcludeSubresources...)
				}
			}
			for _, sub := range subresources {
				for _, op := range []string{"CREATE", "UPDATE", "DELETE", "CONNECT"} {
					for _, namespace := range []string{"shop", ""} {
						req := &validate.Request{Requester: requester, Operation: op, Group: group, Resource: resource, Subresource: sub, Namespace: namespace}
						if group == "" && resource == "namespaces" && namespace != "" {
							req.Namespace = "shop" // a Namespace's namespace is its own name
						}
						sent, judged := sends(rules, req), policy.Decide(req, noLeases{}, time.Now()).Guard != ""
						servedWrite := isKnown && (sub == "" || slices.Contains(known.Subresources, sub))
						if servedWrite && sent != judged || !isKnown && judged && !sent {
							t.Errorf("%s %s/%s/%s in namespace %q: the rules send it: %v, Decide judges it: %v\nrules: %s",
								op, group, resource, sub, namespace, sent, judged, marshal(rules))
						}
					}
				}
			}
		}
	}
}

func marshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRulesAndDecideCoverTheSameWrites(t *testing.T) {
	for _, tt := range []struct{ name, config string }{
		{"the decision tests' guards", testConfig},
		{"subresources, all and all but status", subresourceConfig},
		{"guards on deleting and updating pods, whose eviction and binding are CREATEs", `
guards:
- {name: a, lease: l, resources: [{group: "", resources: [pods], operations: [UPDATE, DELETE]}]}
- {name: b, lease: l, resources: [{group: "", resources: [pods], operations: [DELETE], excludeSubresources: [status]}]}
- {name: c, lease: l, resources: [{group: "", resources: [pods], operations: [UPDATE], excludeSubresources: [binding]}]}
`},
		{"overlapping guards with their own operations and exclusions", `
guards:
- {name: a, lease: l, resources: [{group: apps, resources: [deployments], operations: [UPDATE], excludeSubresources: [status]}]}
- {name: b, lease: l, resources: [{group: apps, resources: [deployments], operations: [UPDATE, DELETE]}]}
- {name: c, lease: l, resources: [{group: apps, resources: [statefulsets, daemonsets], excludeSubresources: [scale, status]}]}
- {name: d, lease: l, resources: [{group: "", resources: [pods], operations: [CONNECT, CREATE, UPDATE], excludeSubresources: [eviction, status]}]}
- {name: e, lease: l, resources: [{group: "", resources: [configmaps, services], excludeSubresources: [status]}]}
`},
		{"a resource of a CustomResourceDefinition, installed and not yet", `
guards:
- {name: a, lease: l, resources: [{group: example.com, resources: [widgets, gadgets], excludeSubresources: [status]}]}
- {name: b, lease: l, resources: [{group: example.com, resources: [sprockets]}]}
`},
		{"a cluster-scoped resource discovery would refuse: neither sends nor judges", `
guards:
- {name: a, lease: l, resources: [{group: "", resources: [namespaces, nodes]}]}
`},
		{"an operation listed twice", `
guards:
- {name: a, lease: l, resources: [{group: batch, resources: [jobs], operations: [DELETE, DELETE]}]}
`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Load([]byte(tt.config))
			if err != nil {
				t.Fatal(err)
			}
			checkRulesMatchDecide(t, cfg, served)
		})
	}
}

// FuzzRulesAndDecideCoverTheSameWrites holds every configuration the validation accepts, beside a guard on
// deployments, to the same contract.
func FuzzRulesAndDecideCoverTheSameWrites(f *testing.F) {
	for _, seed := range [][4]string{
		{"apps", "deployments", "UPDATE", ""},
		{"apps", "deployments", "UPDATE", "status"},
		{"*", "deployments", "", ""},
		{"apps", "Deployments", "", ""},
		{"", "pods", "CONNECT", "exec"},
		{"example.com", "gadgets", "", "status"},
		{"Apps", "deployments", "*", "*"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, group, resource, op, exclude string) {
		entry := config.GuardedResource{Group: group, Resources: []string{resource}}
		if op != "" {
			entry.Operations = []string{op}
		}
		if exclude != "" {
			entry.ExcludeSubresources = []string{exclude}
		}
		cfg := &config.Config{Guards: []config.Guard{
			{Name: "fuzzed", Lease: "l", Resources: []config.GuardedResource{entry}},
			{Name: "deployments", Lease: "l", Resources: []config.GuardedResource{{Group: "apps", Resources: []string{"deployments"}, ExcludeSubresources: []string{"scale"}}}},
		}}
		config.SetDefaults(cfg)
		if errs := append(config.Validate(cfg), config.CheckServed(cfg, served)...); len(errs) > 0 {
			return
		}
		checkRulesMatchDecide(t, cfg, served)
	})
}

func TestMatchConditionsLetOnlyGatedRequestersThrough(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(MatchConditions(cfg, "leasegate-system"))
	if err != nil {
		t.Fatal(err)
	}
	want := `[` +
		`{"name":"service-accounts","expression":"request.userInfo.username.startsWith(\"system:serviceaccount:\")"},` +
		`{"name":"not-leasegate","expression":"!request.userInfo.username.startsWith(\"system:serviceaccount:leasegate-system:\")"},` +
		`{"name":"not-control-plane","expression":"!request.userInfo.username.startsWith(\"system:serviceaccount:kube-system:\")"},` +
		`{"name":"not-exempt-users","expression":"!(request.userInfo.username in [\"ci-bot\"])"},` +
		`{"name":"not-exempt-groups","expression":"!request.userInfo.groups.exists(g, g in [\"system:masters\"])"}]`
	if string(got) != want {
		t.Errorf("MatchConditions() =\n%s\nwant\n%s", got, want)
	}
}

func TestMatchConditionsLetKubeSystemAccountsThroughOnlyWhenNamed(t *testing.T) {
	cfg, err := config.Load([]byte(`
guards:
- {name: a, lease: l, serviceAccounts: [kube-system/generic-garbage-collector, deployment-controller], resources: [{group: apps, resources: [deployments]}]}
- {name: b, lease: l, serviceAccounts: [kube-system/generic-garbage-collector, kube-system/replicaset-controller], resources: [{group: apps, resources: [replicasets]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for _, c := range MatchConditions(cfg, "leasegate-system") {
		if *c.Name == "not-control-plane" {
			got = *c.Expression
		}
	}
	want := `!request.userInfo.username.startsWith("system:serviceaccount:kube-system:") || request.userInfo.username in ` +
		`["system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccount:kube-system:replicaset-controller"]`
	if got != want {
		t.Errorf("not-control-plane = %s\nwant %s", got, want)
	}
}

// noLeases is a cluster without Leases: whether a write is judged does not depend on who holds one.
type noLeases struct{}

func (noLeases) Get(string, string) (*leaseapi.Kept, bool) { return nil, false }
func (noLeases) MultiClusterLease(string, string) (*v1alpha1.MultiClusterLease, bool) {
	return nil, false
}

// testConfig and subresourceConfig are the guards internal/validate's decision tests judge by: the rules
// must send exactly the writes that decision judges.
var testConfig, subresourceConfig = readTestdata("guards.yaml"), readTestdata("subresources.yaml")

func readTestdata(name string) string {
	data, err := os.ReadFile(filepath.Join("..", "validate", "testdata", name))
	if err != nil {
		panic(err)
	}
	return string(data)
}
