package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// testConfig are the guards the decision tests judge by; internal/webhookrules' tests hold the rules to the
// same file.
var testConfig = readTestdata("guards.yaml")

func testPolicy(t testing.TB, extra string) *Policy {
	cfg, err := config.Load([]byte(testConfig + extra))
	if err != nil {
		t.Fatal(err)
	}
	return Compile(cfg, "leasegate-system")
}

// leaseMap is a fixed set of leases, standing in for the cache.
type leaseMap map[namespacedName]*leaseapi.Kept

func (m leaseMap) Get(namespace, name string) (*leaseapi.Kept, bool) {
	l, ok := m[namespacedName{namespace, name}]
	return l, ok
}

func (m leaseMap) MultiClusterLease(string, string) (*v1alpha1.MultiClusterLease, bool) {
	return nil, false
}

// multiClusterLeases is a fixed set of MultiClusterLeases (and no Leases), standing in for the cache.
type multiClusterLeases map[namespacedName]*v1alpha1.MultiClusterLease

func (m multiClusterLeases) Get(string, string) (*leaseapi.Kept, bool) { return nil, false }

func (m multiClusterLeases) MultiClusterLease(namespace, name string) (*v1alpha1.MultiClusterLease, bool) {
	l, ok := m[namespacedName{namespace, name}]
	return l, ok
}

func heldLease(namespace, name, holder string, renewedAgo time.Duration, managed bool) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-renewedAgo)},
			LeaseTransitions:     ptr.To[int32](4),
		},
	}
	if managed {
		l.Labels = map[string]string{contract.Managed: "true"}
	}
	return l
}

func pod(namespace, sa, name, uid string) *Requester {
	return &Requester{
		Username: "system:serviceaccount:" + namespace + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{
			extraPodName: {name}, extraPodUID: {uid},
		},
	}
}

var leases = leaseMap{
	{"shop", "orders"}:       leaseapi.Keep(heldLease("shop", "orders", "orders-a_uid-a", 2*time.Second, true)),
	{"shop", "reports"}:      leaseapi.Keep(heldLease("shop", "reports", "reports-a_uid-r", 30*time.Second, true)),
	{"ops", "billing"}:       leaseapi.Keep(heldLease("ops", "billing", "", 0, true)),
	{"ops", "cr-controller"}: leaseapi.Keep(heldLease("ops", "cr-controller", "ctrl-0_7d1c2a3e-random-uuid", time.Second, false)),
}

func TestDecide(t *testing.T) {
	p := testPolicy(t, "")
	legacy := &Requester{Username: "system:serviceaccount:shop:orders", Groups: []string{"system:serviceaccounts"}}
	multiValued := pod("shop", "orders", "orders-a", "uid-a")
	multiValued.Extra[extraPodName] = authenticationv1.ExtraValue{"orders-a", "orders-b"}
	tests := []decideCase{
		{"the holder's write passes", pod("shop", "orders", "orders-a", "uid-a"), "UPDATE", "apps", "deployments", "shop",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"a follower's write is denied, naming the holder", pod("shop", "orders", "orders-b", "uid-b"), "UPDATE", "apps", "deployments", "shop",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"a recreated pod with the holder's name but a new UID does not hold an agent lease", pod("shop", "orders", "orders-a", "uid-new"), "DELETE", "apps", "deployments", "shop",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"a service account the guard does not gate passes", pod("shop", "billing", "billing-a", "uid-x"), "UPDATE", "apps", "deployments", "shop",
			Verdict{Reason: NotGated}},
		{"an operation the guard does not cover passes", pod("shop", "orders", "orders-b", "uid-b"), "CREATE", "", "configmaps", "shop",
			Verdict{Reason: NotGated}},
		{"a resource no guard covers passes", pod("shop", "orders", "orders-b", "uid-b"), "UPDATE", "", "pods", "shop",
			Verdict{Reason: NotGuarded}},
		{"a person is never gated", &Requester{Username: "jane@example.com"}, "UPDATE", "apps", "deployments", "shop",
			Verdict{Reason: NotGated}},
		{"an exempt group passes", &Requester{Username: "system:serviceaccount:shop:orders", Groups: []string{"system:masters"}}, "UPDATE", "apps", "deployments", "shop",
			Verdict{Reason: Exempt}},
		{"an exempt user passes", &Requester{Username: "ci-bot"}, "UPDATE", "apps", "deployments", "shop",
			Verdict{Reason: Exempt}},
		{"leasegate's own service accounts pass", pod("leasegate-system", "leasegate", "leasegate-x", "u"), "UPDATE", "apps", "deployments", "shop",
			Verdict{Reason: Exempt}},
		{"a legacy token without pod identity follows missingPodIdentity (deny)", legacy, "UPDATE", "apps", "deployments", "shop",
			Verdict{Outcome: Denied, Reason: NoPodIdentity, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders"}},
		{"multi-valued pod extras are no pod identity", multiValued, "UPDATE", "apps", "deployments", "shop",
			Verdict{Outcome: Denied, Reason: NoPodIdentity, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders"}},
		{"a lease that does not exist is held by nobody", pod("other", "orders", "orders-a", "uid-a"), "UPDATE", "apps", "deployments", "other",
			Verdict{Outcome: Denied, Reason: LeaseMissing, Guard: "orders", LeaseNamespace: "other", LeaseName: "orders"}},
		{"a released lease is held by nobody, dry-run guard admits and reports", pod("shop", "any", "x", "uid-x"), "CREATE", "", "secrets", "shop",
			Verdict{Outcome: DryRun, Reason: LeaseReleased, Guard: "billing-dryrun", LeaseNamespace: "ops", LeaseName: "billing"}},
		{"a guard limited to other namespaces passes", pod("web", "any", "x", "uid-x"), "CREATE", "", "secrets", "web",
			Verdict{Reason: NotGated}},
		{"an expired lease is held by nobody, even by its last holder; warn guard admits with a warning", pod("shop", "reports", "reports-a", "uid-r"), "CREATE", "batch", "jobs", "shop",
			Verdict{Outcome: Warned, Reason: LeaseExpired, Guard: "reports-warn", LeaseNamespace: "shop", LeaseName: "reports", Holder: "reports-a_uid-r"}},
		{"a controller's own election (hostname_uuid) holds by pod name", pod("ops", "ctrl", "ctrl-0", "pod-uid-0"), "UPDATE", "", "services", "ops",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "controller", LeaseNamespace: "ops", LeaseName: "cr-controller", Holder: "ctrl-0_7d1c2a3e-random-uuid"}},
		{"the other controller replica is fenced", pod("ops", "ctrl", "ctrl-1", "pod-uid-1"), "UPDATE", "", "services", "ops",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "controller", LeaseNamespace: "ops", LeaseName: "cr-controller", Holder: "ctrl-0_7d1c2a3e-random-uuid"}},
	}
	runDecide(t, p, leases, tests)
}

// subresourceConfig guards deployments with every subresource, and statefulsets but their status, which
// another controller writes; the reports service account's writes of statefulsets, status too.
var subresourceConfig = readTestdata("subresources.yaml")

func readTestdata(name string) string {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return string(data)
}

func TestDecideCoversSubresources(t *testing.T) {
	cfg, err := config.Load([]byte(subresourceConfig))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	follower, holder := pod("shop", "orders", "orders-b", "uid-b"), pod("shop", "orders", "orders-a", "uid-a")
	denied := Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}
	runDecide(t, p, leases, []decideCase{
		{"a follower's scale is denied", follower, "UPDATE", "apps", "deployments/scale", "shop", denied},
		{"a follower's status write is denied", follower, "UPDATE", "apps", "deployments/status", "shop", denied},
		{"a subresource discovery may add later is guarded too", follower, "UPDATE", "apps", "deployments/rollback", "shop", denied},
		{"the holder scales", holder, "UPDATE", "apps", "deployments/scale", "shop",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"a subresource its guard excludes is not judged by it", follower, "UPDATE", "apps", "statefulsets/status", "shop", Verdict{Reason: NotGated}},
		{"but by another guard that covers it", pod("shop", "reports", "reports-b", "uid-b"), "UPDATE", "apps", "statefulsets/status", "shop",
			Verdict{Outcome: Denied, Reason: LeaseExpired, Guard: "reports", LeaseNamespace: "shop", LeaseName: "reports", Holder: "reports-a_uid-r"}},
		{"the other subresources of a guard with an exclusion are", follower, "UPDATE", "apps", "statefulsets/scale", "shop", denied},
		{"and so is the resource itself", follower, "UPDATE", "apps", "statefulsets", "shop", denied},
	})
}

// A write to a subresource is judged by what it does to its resource: an eviction deletes the pod, so a
// guard on deleting pods fences it although its request is a CREATE.
func TestDecideJudgesASubresourceWriteByWhatItDoes(t *testing.T) {
	cfg, err := config.Load([]byte(`
guards:
- name: orders
  lease: orders
  serviceAccounts: [orders]
  resources: [{group: "", resources: [pods], operations: [UPDATE, DELETE]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	follower, holder := pod("shop", "orders", "orders-b", "uid-b"), pod("shop", "orders", "orders-a", "uid-a")
	denied := Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}
	runDecide(t, p, leases, []decideCase{
		{"a follower's delete is denied", follower, "DELETE", "", "pods", "shop", denied},
		{"so is its eviction, a delete sent as a CREATE", follower, "CREATE", "", "pods/eviction", "shop", denied},
		{"and its binding, an update of the pod's node sent as a CREATE", follower, "CREATE", "", "pods/binding", "shop", denied},
		{"the holder evicts", holder, "CREATE", "", "pods/eviction", "shop",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"a create the guard does not list stays unjudged", follower, "CREATE", "", "pods", "shop", Verdict{Reason: NotGated}},
		{"as does a create of another subresource", follower, "CREATE", "", "pods/exec", "shop", Verdict{Reason: NotGated}},
	})
}

func TestDecideNeverFencesTheControlPlane(t *testing.T) {
	// A guard on namespaces loads (only discovery tells it is cluster-scoped: config.CheckServed), and is
	// held off by the decision too.
	cfg, err := config.Load([]byte(`
guards:
- name: named-system-account
  lease: ops/gc
  serviceAccounts: [kube-system/generic-garbage-collector]
  resources: [{group: apps, resources: [replicasets]}]
- name: every-account
  lease: ops/any
  resources: [{group: apps, resources: [daemonsets, replicasets, deployments]}, {group: "", resources: [namespaces]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	namespaceController := pod("kube-system", "namespace-controller", "kcm-0", "uid-k")
	runDecide(t, p, leases, []decideCase{
		{"a kube-system service account is not gated by a guard that gates every service account", namespaceController, "DELETE", "apps", "daemonsets", "shop",
			Verdict{Reason: NotGated}},
		{"nor by one naming the same name in any namespace", pod("kube-system", "orders", "x", "u"), "UPDATE", "apps", "deployments", "shop",
			Verdict{Reason: NotGated}},
		{"a guard naming kube-system/<name> gates it", pod("kube-system", "generic-garbage-collector", "kcm-0", "uid-k"), "DELETE", "apps", "replicasets", "shop",
			Verdict{Outcome: Denied, Reason: LeaseMissing, Guard: "named-system-account", LeaseNamespace: "ops", LeaseName: "gc"}},
		{"a node is never gated", &Requester{Username: "system:node:node-1", Groups: []string{"system:nodes", "system:authenticated"}}, "UPDATE", "apps", "daemonsets/status", "shop",
			Verdict{Reason: NotGated}},
		{"kube-controller-manager's own user is never gated", &Requester{Username: "system:kube-controller-manager"}, "UPDATE", "apps", "daemonsets", "shop",
			Verdict{Reason: NotGated}},
		{"kube-scheduler is never gated", &Requester{Username: "system:kube-scheduler"}, "UPDATE", "apps", "daemonsets", "shop",
			Verdict{Reason: NotGated}},
		{"kube-apiserver is never gated", &Requester{Username: "system:apiserver", Groups: []string{"system:masters"}}, "UPDATE", "apps", "daemonsets", "shop",
			Verdict{Reason: Exempt}},
		{"a Namespace is cluster-scoped and never guarded, whoever deletes it", namespaceController, "DELETE", "", "namespaces", "shop",
			Verdict{Reason: NotGuarded}},
		{"nor is its finalize subresource", pod("shop", "orders", "orders-b", "uid-b"), "UPDATE", "", "namespaces/finalize", "shop",
			Verdict{Reason: NotGuarded}},
		{"nor any cluster-scoped write", pod("shop", "orders", "orders-b", "uid-b"), "UPDATE", "apps", "daemonsets", "",
			Verdict{Reason: NotGuarded}},
	})
}

func TestDecideAllocatesNothingOnSubresources(t *testing.T) {
	cfg, err := config.Load([]byte(subresourceConfig))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	for _, req := range []*Request{
		{Requester: pod("shop", "orders", "orders-a", "uid-a"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Subresource: "scale", Namespace: "shop"},
		{Requester: pod("shop", "orders", "orders-b", "uid-b"), Operation: "UPDATE", Group: "apps", Resource: "statefulsets", Subresource: "status", Namespace: "shop"},
		{Requester: pod("kube-system", "deployment-controller", "x", "u"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Subresource: "status", Namespace: "shop"},
	} {
		if allocs := testing.AllocsPerRun(100, func() { p.Decide(req, leases, now) }); allocs != 0 {
			t.Errorf("Decide(%s/%s) allocates %v times, want 0", req.Resource, req.Subresource, allocs)
		}
	}
}

// decideCase is a write and the verdict it must get.
type decideCase struct {
	name       string
	requester  *Requester
	op         string
	group, res string
	namespace  string
	want       Verdict
}

func runDecide(t *testing.T, p *Policy, leases LeaseGetter, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resource, subresource, _ := strings.Cut(tt.res, "/")
			got := p.Decide(&Request{Requester: tt.requester, Operation: tt.op, Group: tt.group, Resource: resource, Subresource: subresource, Namespace: tt.namespace}, leases, now)
			if got != tt.want {
				t.Errorf("Decide() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// holderFormatConfig has guards whose leases' holders are written by controllers other than the agent.
const holderFormatConfig = `
guards:
- name: cert-manager
  lease: kube-system/cert-manager-controller
  holderFormat: cert-manager
  serviceAccounts: [cert-manager/cert-manager, cert-manager]
  resources: [{group: cert-manager.io, resources: [certificaterequests]}]
- name: cert-manager-unplaced
  lease: kube-system/cert-manager-controller
  holderFormat: cert-manager
  resources: [{group: cert-manager.io, resources: [issuers]}]
- name: pod-name
  lease: ops/by-pod-name
  holderFormat: pod-name
  resources: [{group: "", resources: [endpoints]}]
- name: default-format
  lease: ops/cert-manager-default
  resources: [{group: "", resources: [serviceaccounts]}]
- name: by-uid
  lease: ops/by-uid
  holderFormat: "{pod}-{uid}"
  resources: [{group: "", resources: [pods]}]
`

var holderFormatLeases = leaseMap{
	{"kube-system", "cert-manager-controller"}: leaseapi.Keep(heldLease("kube-system", "cert-manager-controller",
		"cm-0-external-cert-manager-controller", time.Second, false)),
	{"ops", "cert-manager-default"}: leaseapi.Keep(heldLease("ops", "cert-manager-default", "ctrl-0-external-cert-manager-controller", time.Second, false)),
	{"ops", "by-pod-name"}:          leaseapi.Keep(heldLease("ops", "by-pod-name", "web-1", time.Second, false)),
	{"ops", "by-uid"}:               leaseapi.Keep(heldLease("ops", "by-uid", "web-1-uid-w1", time.Second, false)),
}

func TestDecideHolderFormats(t *testing.T) {
	cfg, err := config.Load([]byte(holderFormatConfig))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	tests := []decideCase{
		{"cert-manager's leader holds its lease in kube-system, read with the cert-manager preset", pod("cert-manager", "cert-manager", "cm-0", "u0"), "CREATE", "cert-manager.io", "certificaterequests", "shop",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "cert-manager", LeaseNamespace: "kube-system", LeaseName: "cert-manager-controller", Holder: "cm-0-external-cert-manager-controller"}},
		{"cert-manager's other replica is fenced", pod("cert-manager", "cert-manager", "cm-1", "u1"), "CREATE", "cert-manager.io", "certificaterequests", "shop",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "cert-manager", LeaseNamespace: "kube-system", LeaseName: "cert-manager-controller", Holder: "cm-0-external-cert-manager-controller"}},
		// The holder names a pod by name only: a pod of that name elsewhere is not it.
		{"a pod named as cert-manager's leader, in another namespace, with an account of the same name", pod("evil", "cert-manager", "cm-0", "u-evil"), "CREATE", "cert-manager.io", "certificaterequests", "shop",
			Verdict{Outcome: Denied, Reason: HolderInOtherNamespace, Guard: "cert-manager", LeaseNamespace: "kube-system", LeaseName: "cert-manager-controller", Holder: "cm-0-external-cert-manager-controller"}},
		{"a guard that names no account's namespace admits the holder's name only from the lease's namespace", pod("cert-manager", "cert-manager", "cm-0", "u0"), "CREATE", "cert-manager.io", "issuers", "shop",
			Verdict{Outcome: Denied, Reason: HolderInOtherNamespace, Guard: "cert-manager-unplaced", LeaseNamespace: "kube-system", LeaseName: "cert-manager-controller", Holder: "cm-0-external-cert-manager-controller"}},
		{"pod-name format: a pod of the holder's name in another namespace", pod("tenant", "web", "web-1", "uid-t"), "UPDATE", "", "endpoints", "ops",
			Verdict{Outcome: Denied, Reason: HolderInOtherNamespace, Guard: "pod-name", LeaseNamespace: "ops", LeaseName: "by-pod-name", Holder: "web-1"}},
		{"{pod}-{uid} format: the UID names one pod, whatever its namespace", pod("tenant", "web", "web-1", "uid-w1"), "UPDATE", "", "pods", "ops",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "by-uid", LeaseNamespace: "ops", LeaseName: "by-uid", Holder: "web-1-uid-w1"}},
		{"pod-name format: the pod named", pod("ops", "web", "web-1", "uid-w1"), "UPDATE", "", "endpoints", "ops",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "pod-name", LeaseNamespace: "ops", LeaseName: "by-pod-name", Holder: "web-1"}},
		{"pod-name format: pod web does not hold the lease of pod web-1", pod("ops", "web", "web", "uid-w"), "UPDATE", "", "endpoints", "ops",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "pod-name", LeaseNamespace: "ops", LeaseName: "by-pod-name", Holder: "web-1"}},
		{"{pod}-{uid} format: name and UID match", pod("ops", "web", "web-1", "uid-w1"), "UPDATE", "", "pods", "ops",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "by-uid", LeaseNamespace: "ops", LeaseName: "by-uid", Holder: "web-1-uid-w1"}},
		{"{pod}-{uid} format: a recreated pod with a new UID", pod("ops", "web", "web-1", "uid-new"), "UPDATE", "", "pods", "ops",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "by-uid", LeaseNamespace: "ops", LeaseName: "by-uid", Holder: "web-1-uid-w1"}},
		{"a holder naming the requester in another format is reported as a format mismatch", pod("ops", "ctrl", "ctrl-0", "u"), "UPDATE", "", "serviceaccounts", "ops",
			Verdict{Outcome: Denied, Reason: HolderFormatMismatch, Guard: "default-format", LeaseNamespace: "ops", LeaseName: "cert-manager-default", Holder: "ctrl-0-external-cert-manager-controller", HolderFormat: "client-go"}},
		{"a holder that merely contains the requester's name is reported the same way (the message asks, it does not assert)", pod("ops", "ctrl", "ctrl-0-external", "u"), "UPDATE", "", "serviceaccounts", "ops",
			Verdict{Outcome: Denied, Reason: HolderFormatMismatch, Guard: "default-format", LeaseNamespace: "ops", LeaseName: "cert-manager-default", Holder: "ctrl-0-external-cert-manager-controller", HolderFormat: "client-go"}},
	}
	runDecide(t, p, holderFormatLeases, tests)
}

func TestDecideMultiClusterLease(t *testing.T) {
	cfg, err := config.Load([]byte(`
guards:
- name: orders
  lease: orders
  leaseKind: MultiClusterLease
  holderFormat: pod-name
  resources: [{group: apps, resources: [deployments]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	status := func(holder, cluster string, validFor time.Duration) *v1alpha1.MultiClusterLease {
		m := &v1alpha1.MultiClusterLease{Status: v1alpha1.MultiClusterLeaseStatus{GlobalHolder: holder, HolderCluster: cluster, FencingToken: 7}}
		if validFor != 0 {
			m.Status.ValidUntil = &metav1.MicroTime{Time: now.Add(validFor)}
		}
		return m
	}
	mcls := multiClusterLeases{
		{"here", "orders"}:      status("orders-a", "a", time.Second),
		{"stale", "orders"}:     status("orders-a", "a", -time.Millisecond),
		{"elsewhere", "orders"}: status("orders-b", "b", 0),
	}
	verdict := func(ns string, outcome Outcome, reason Reason, holder string) Verdict {
		return Verdict{Outcome: outcome, Reason: reason, Guard: "orders", LeaseNamespace: ns, LeaseName: "orders", Holder: holder}
	}
	tests := []decideCase{
		{"the local global leader passes before validUntil", pod("here", "orders", "orders-a", "u"), "UPDATE", "apps", "deployments", "here",
			verdict("here", Allowed, HoldsLease, "orders-a of cluster a")},
		{"a local follower is denied, naming the global leader", pod("here", "orders", "orders-c", "u"), "UPDATE", "apps", "deployments", "here",
			verdict("here", Denied, HeldByAnother, "orders-a of cluster a")},
		{"the global leader is denied once validUntil passed, even if status still names it", pod("stale", "orders", "orders-a", "u"), "UPDATE", "apps", "deployments", "stale",
			verdict("stale", Denied, GlobalLeaderElsewhere, "orders-a of cluster a")},
		{"this cluster's old leader is denied once another cluster's candidate won, naming it", pod("elsewhere", "orders", "orders-a", "u"), "UPDATE", "apps", "deployments", "elsewhere",
			verdict("elsewhere", Denied, GlobalLeaderElsewhere, "orders-b of cluster b")},
		{"a missing MultiClusterLease is held by nobody", pod("nowhere", "orders", "orders-a", "u"), "UPDATE", "apps", "deployments", "nowhere",
			verdict("nowhere", Denied, LeaseMissing, "")},
	}
	runDecide(t, p, mcls, tests)
}

func TestDecideMissingPodIdentityModes(t *testing.T) {
	legacy := &Requester{Username: "system:serviceaccount:shop:orders"}
	req := &Request{Requester: legacy, Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}
	for mode, want := range map[string]Outcome{"deny": Denied, "warn": Warned, "allow": Allowed} {
		if got := testPolicy(t, "missingPodIdentity: "+mode+"\n").Decide(req, leases, now).Outcome; got != want {
			t.Errorf("missingPodIdentity %s: outcome %s, want %s", mode, got, want)
		}
	}
}

func TestDecideLeaseWrite(t *testing.T) {
	p := testPolicy(t, "")
	a, b, c := pod("shop", "orders", "orders-a", "uid-a"), pod("shop", "orders", "orders-b", "uid-b"), pod("shop", "orders", "orders-c", "uid-c")
	held := heldLease("shop", "orders", "orders-a_uid-a", 2*time.Second, true)
	expired := heldLease("shop", "orders", "orders-a_uid-a", 20*time.Second, true)
	released := heldLease("shop", "orders", "", 0, true)
	// As the holder leaves it when it hands over: released a moment ago, keeping its 15 s term.
	handedOver := handover(heldLease("shop", "orders", "", time.Second, true), "orders-b")
	handoverLapsed := handover(heldLease("shop", "orders", "", 20*time.Second, true), "orders-b")
	writing := func(holder string) *coordinationv1.Lease {
		return heldLease("shop", "orders", holder, 0, true)
	}
	// taking is a take: a new holder counts its term.
	taking := func(holder string) *coordinationv1.Lease {
		return counted(writing(holder), 5)
	}
	unmarked := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		l = l.DeepCopy()
		delete(l.Labels, contract.Managed)
		return l
	}
	relabelled := func(l *coordinationv1.Lease, value string) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Labels[contract.Managed] = value
		return l
	}
	renewedAt := func(l *coordinationv1.Lease, at time.Time) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Spec.RenewTime = &metav1.MicroTime{Time: at}
		return l
	}
	acquiredAt := func(l *coordinationv1.Lease, at time.Time) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Spec.AcquireTime = &metav1.MicroTime{Time: at}
		return l
	}
	lasting := func(l *coordinationv1.Lease, seconds int32) *coordinationv1.Lease {
		l = l.DeepCopy()
		l.Spec.LeaseDurationSeconds = ptr.To(seconds)
		return l
	}
	controller := &Requester{Username: "system:serviceaccount:shop:orders"}
	tests := []struct {
		name      string
		requester *Requester
		old, new  *coordinationv1.Lease
		status    bool
		// given is the lease duration the requester's injection recorded; 0: none.
		given   int32
		want    Reason
		outcome Outcome
	}{
		{"the holder renews", a, held, writing("orders-a_uid-a"), false, 0, HoldsLease, Allowed},
		{"the holder releases", a, held, writing(""), false, 0, HoldsLease, Allowed},
		{"a follower takes a released lease", b, released, taking("orders-b_uid-b"), false, 0, HoldsLease, Allowed},
		{"a follower takes an expired lease", b, expired, taking("orders-b_uid-b"), false, 0, HoldsLease, Allowed},
		{"a follower may not take an unexpired lease", b, held, writing("orders-b_uid-b"), false, 0, TakeUnexpired, Denied},
		{"a follower may not write another pod's identity", b, released, writing("orders-c_uid-c"), false, 0, ForeignHolder, Denied},
		{"a follower may not spoof the holder's identity", b, held, writing("orders-a_uid-a"), false, 0, ForeignHolder, Denied},
		{"a pod with a recycled name may not pass as the holder", pod("shop", "orders", "orders-a", "uid-new"), held, writing("orders-a_uid-a"), false, 0, ForeignHolder, Denied},
		{"a follower may not release the holder's lease", b, held, writing(""), false, 0, NotHolder, Denied},
		{"a follower may not release even an expired lease", b, expired, writing(""), false, 0, NotHolder, Denied},
		{"a pod may not delete a lease", a, held, nil, false, 0, DeleteLease, Denied},
		{"a pod may create an unmarked lease for itself", a, nil, unmarked(writing("orders-a_uid-a")), false, 0, HoldsLease, Allowed},
		{"an exempt requester may do anything", &Requester{Username: "admin", Groups: []string{"system:masters"}}, held, nil, false, 0, Exempt, Allowed},
		{"a person may not write a holder", &Requester{Username: "jane@example.com"}, held, writing("orders-b_uid-b"), false, 0, LeaseByPerson, Denied},
		{"nor release the lease", &Requester{Username: "jane@example.com"}, held, writing(""), false, 0, LeaseByPerson, Denied},
		{"nor renew it", &Requester{Username: "jane@example.com"}, expired, writing("orders-a_uid-a"), false, 0, LeaseByPerson, Denied},
		{"nor delete it", &Requester{Username: "jane@example.com"}, held, nil, false, 0, LeaseByPerson, Denied},
		{"nor create one marked as leasegate's", &Requester{Username: "jane@example.com"}, nil, writing("orders-b_uid-b"), false, 0, LeaseByPerson, Denied},
		{"nor write a MultiClusterLease's status", &Requester{Username: "jane@example.com"}, held, held, true, 0, LeaseByPerson, Denied},
		{"a person may annotate a lease", &Requester{Username: "jane@example.com"}, held, annotated(held, "team", "payments"), false, 0, NotGated, Allowed},
		{"kube-controller-manager without service account credentials deletes a namespace's lease", &Requester{Username: "system:kube-controller-manager"}, held, nil, false, 0, NotGated, Allowed},
		{"the namespace controller deletes a namespace's lease", &Requester{Username: "system:serviceaccount:kube-system:namespace-controller"}, held, nil, false, 0, NotGated, Allowed},
		{"the garbage collector deletes a lease", &Requester{Username: "system:serviceaccount:kube-system:generic-garbage-collector"}, held, nil, false, 0, NotGated, Allowed},
		{"a person may ask for a handover", &Requester{Username: "jane@example.com"}, held, handover(held, "orders-b"), false, 0, NotGated, Allowed},
		{"a follower may not ask the holder to hand over", b, held, handover(held, "orders-b"), false, 0, HandoverByPod, Denied},
		{"the holder may not redirect a handover asked of it", a, handover(held, "orders-b"), handover(writing("orders-a_uid-a"), "orders-a"), false, 0, HandoverByPod, Denied},
		{"the holder releases for a handover, keeping the request", a, handover(held, "orders-b"), handover(writing(""), "orders-b"), false, 0, HoldsLease, Allowed},
		{"the target takes the lease and clears the request", b, handedOver, taking("orders-b_uid-b"), false, 0, HoldsLease, Allowed},

		// The label that makes a lease leasegate's: what reaches this guard, and how the fence reads the holder.
		{"a follower may not unmark a released lease", b, released, unmarked(released), false, 0, MarkerChanged, Denied},
		{"a follower may not unmark it as it takes it", b, released, unmarked(writing("orders-b_uid-b")), false, 0, MarkerChanged, Denied},
		{"the holder may not unmark its lease", a, held, unmarked(writing("orders-a_uid-a")), false, 0, MarkerChanged, Denied},
		{"a pod may not change the marker's value", a, held, relabelled(writing("orders-a_uid-a"), "false"), false, 0, MarkerChanged, Denied},
		{"a pod may not mark a lease as leasegate's", a, unmarked(held), writing("orders-a_uid-a"), false, 0, MarkerChanged, Denied},
		{"a pod may not create a lease marked as leasegate's", a, nil, writing("orders-a_uid-a"), false, 0, MarkerChanged, Denied},
		{"nor may a service account without a pod identity, whatever missingPodIdentity says", controller, released, unmarked(released), false, 0, MarkerChanged, Denied},
		{"a person may not unmark a lease", &Requester{Username: "jane@example.com"}, held, unmarked(held), false, 0, LeaseByPerson, Denied},

		// The lease's terms: a pod may not pin it.
		{"a pod may not take a lease renewed a year ahead", b, released, renewedAt(writing("orders-b_uid-b"), now.AddDate(1, 0, 0)), false, 15, TimeAhead, Denied},
		{"the holder may not renew a year ahead", a, held, renewedAt(writing("orders-a_uid-a"), now.AddDate(1, 0, 0)), false, 15, TimeAhead, Denied},
		{"nor release with a renew time that bars a handover's others for a year", a, handover(held, "orders-b"), renewedAt(handover(writing(""), "orders-b"), now.AddDate(1, 0, 0)), false, 15, TimeAhead, Denied},
		{"nor acquire a year ahead", b, released, acquiredAt(writing("orders-b_uid-b"), now.AddDate(1, 0, 0)), false, 15, TimeAhead, Denied},
		// The test policy's margin is 1 s; ahead, a write is held to it but never to less than minClockTolerance.
		{"a renew time within the tolerated skew passes", a, held, renewedAt(writing("orders-a_uid-a"), now.Add(minClockTolerance)), false, 15, HoldsLease, Allowed},
		{"a renew time past the tolerated skew does not", a, held, renewedAt(writing("orders-a_uid-a"), now.Add(minClockTolerance+time.Microsecond)), false, 15, TimeAhead, Denied},
		{"an acquire time left as it was is not judged again", a, acquiredAt(held, now.Add(time.Hour)), acquiredAt(writing("orders-a_uid-a"), now.Add(time.Hour)), false, 15, HoldsLease, Allowed},
		{"a pod may not take a lease for 24 h", b, released, lasting(writing("orders-b_uid-b"), 86400), false, 15, DurationNotGiven, Denied},
		{"a pod claims exactly the duration its injection gave it", b, released, lasting(writing("orders-b_uid-b"), 10), false, 15, DurationNotGiven, Denied},
		{"a pod with a recorded 60 s duration claims 60 s", b, released, lasting(taking("orders-b_uid-b"), 60), false, 60, HoldsLease, Allowed},
		{"a pod without a record claims no more than election.leaseDuration", b, released, lasting(writing("orders-b_uid-b"), 86400), false, 0, DurationNotGiven, Denied},
		{"a pod without a record may claim a shorter term", b, released, lasting(taking("orders-b_uid-b"), 3), false, 0, HoldsLease, Allowed},
		{"a pod without a record keeps the term the lease had", a, lasting(held, 60), lasting(writing("orders-a_uid-a"), 60), false, 0, HoldsLease, Allowed},
		{"a release may shorten the term to a second", a, held, lasting(writing(""), 1), false, 15, HoldsLease, Allowed},
		{"a release may not lengthen it", a, handover(held, "orders-b"), lasting(handover(writing(""), "orders-b"), 86400), false, 15, DurationNotGiven, Denied},

		// A handover's target.
		{"a follower that is not the target may not take a handed-over lease", c, handedOver, writing("orders-c_uid-c"), false, 15, NotHandoverTarget, Denied},
		{"the pod that handed over may not take it back", a, handedOver, writing("orders-a_uid-a"), false, 15, NotHandoverTarget, Denied},
		{"anyone may take it once the released term ended", c, handoverLapsed, taking("orders-c_uid-c"), false, 15, HoldsLease, Allowed},
		{"any candidate but the holder may take a lease handed over to no one in particular", c, handover(heldLease("shop", "orders", "", time.Second, true), ""), taking("orders-c_uid-c"), false, 15, HoldsLease, Allowed},
		// A pod that does not hold the lease writes a released one only to take it: otherwise it could lift a
		// handover's bar in one write (clear the request, date the released term back, shorten it) and take
		// the lease in the next.
		{"a follower may not clear the handover request from the released lease", c, handedOver, heldLease("shop", "orders", "", time.Second, true), false, 15, NotHolder, Denied},
		{"nor date the released term back", c, handedOver, renewedAt(handedOver, now.Add(-time.Hour)), false, 15, NotHolder, Denied},
		{"nor shorten it", c, handedOver, lasting(handedOver, 1), false, 15, NotHolder, Denied},
		{"nor may the pod that handed over", a, handedOver, renewedAt(handedOver, now.Add(-time.Hour)), false, 15, NotHolder, Denied},
		{"nor may a follower write a released lease it does not take", b, released, renewedAt(released, now.Add(-time.Hour)), false, 15, NotHolder, Denied},

		// leaseTransitions: the fencing token of each term, which no pod may reuse, lower or run up.
		{"a pod may not take the lease without counting its term", b, released, writing("orders-b_uid-b"), false, 15, TransitionsMiscounted, Denied},
		{"nor take an expired one without counting", b, expired, writing("orders-b_uid-b"), false, 15, TransitionsMiscounted, Denied},
		{"nor take it with a lower count, reusing an earlier term's token", b, released, counted(writing("orders-b_uid-b"), 3), false, 15, TransitionsMiscounted, Denied},
		{"nor take it skipping numbers, running the count up", b, released, counted(writing("orders-b_uid-b"), 2147483647), false, 15, TransitionsMiscounted, Denied},
		{"the holder may not lower the count as it renews", a, held, counted(writing("orders-a_uid-a"), 0), false, 15, TransitionsMiscounted, Denied},
		{"nor as it releases", a, held, counted(writing(""), 3), false, 15, TransitionsMiscounted, Denied},
		{"nor raise it by more than one", a, held, counted(writing("orders-a_uid-a"), 6), false, 15, TransitionsMiscounted, Denied},
		{"the holder counts a term it finds itself in without an acquire time", a, held, counted(writing("orders-a_uid-a"), 5), false, 15, HoldsLease, Allowed},
		{"a person may not reset the count", &Requester{Username: "jane@example.com"}, held, counted(held, 0), false, 0, LeaseByPerson, Denied},
		{"a cluster admin may, to break glass", &Requester{Username: "admin", Groups: []string{"system:masters"}}, held, counted(held, 0), false, 0, Exempt, Allowed},

		// A MultiClusterLease's status is the election controller's.
		{"a pod may not write a MultiClusterLease's status", a, held, held, true, 15, StatusByOthers, Denied},
		{"nor may another service account", controller, held, held, true, 0, StatusByOthers, Denied},
		{"an exempt requester may", &Requester{Username: "admin", Groups: []string{"system:masters"}}, held, held, true, 0, Exempt, Allowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.DecideLeaseWrite(&LeaseWrite{Requester: tt.requester, Old: tt.old, New: tt.new, Status: tt.status, GivenSeconds: tt.given}, now)
			if got.Reason != tt.want || got.Outcome != tt.outcome {
				t.Errorf("DecideLeaseWrite() = %s (%s), want %s (%s)", got.Reason.Code(), got.Outcome, tt.want.Code(), tt.outcome)
			}
		})
	}
}

// counted is l with leaseTransitions n.
func counted(l *coordinationv1.Lease, n int32) *coordinationv1.Lease {
	l = l.DeepCopy()
	l.Spec.LeaseTransitions = ptr.To(n)
	return l
}

// annotated is l with the annotation key: value.
func annotated(l *coordinationv1.Lease, key, value string) *coordinationv1.Lease {
	l = l.DeepCopy()
	metav1.SetMetaDataAnnotation(&l.ObjectMeta, key, value)
	return l
}

// handover is l with a request that its holder orders-a_uid-a hands over to pod to.
func handover(l *coordinationv1.Lease, to string) *coordinationv1.Lease {
	l = l.DeepCopy()
	metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverFrom, "orders-a_uid-a")
	metav1.SetMetaDataAnnotation(&l.ObjectMeta, contract.HandoverTo, to)
	return l
}

func BenchmarkDecideAllow(b *testing.B) {
	p := testPolicy(b, "")
	req := &Request{Requester: pod("shop", "orders", "orders-a", "uid-a"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}
	b.ReportAllocs()
	for b.Loop() {
		if v := p.Decide(req, leases, now); v.Reason != HoldsLease {
			b.Fatal(v)
		}
	}
}

// BenchmarkDecideAllowHolderFormat is BenchmarkDecideAllow through a guard with a template format.
func BenchmarkDecideAllowHolderFormat(b *testing.B) {
	cfg, err := config.Load([]byte(holderFormatConfig))
	if err != nil {
		b.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	req := &Request{Requester: pod("cert-manager", "cert-manager", "cm-0", "u0"), Operation: "CREATE", Group: "cert-manager.io", Resource: "certificaterequests", Namespace: "shop"}
	b.ReportAllocs()
	for b.Loop() {
		if v := p.Decide(req, holderFormatLeases, now); v.Reason != HoldsLease {
			b.Fatal(v)
		}
	}
}

func BenchmarkDecideDeny(b *testing.B) {
	p := testPolicy(b, "")
	req := &Request{Requester: pod("shop", "orders", "orders-b", "uid-b"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}
	b.ReportAllocs()
	for b.Loop() {
		if v := p.Decide(req, leases, now); v.Outcome != Denied {
			b.Fatal(v)
		}
	}
}

func TestDecideLeaderEndpoints(t *testing.T) {
	p := testPolicy(t, "")
	tests := []struct {
		name          string
		requester     *Requester
		leaderService bool
		want          Reason
		outcome       Outcome
	}{
		{"a pod may not route a leader Service", pod("shop", "orders", "orders-b", "uid-b"), true, ForgedLeaderEndpoints, Denied},
		{"nor may a person or a controller", &Requester{Username: "system:serviceaccount:kube-system:endpointslicemirroring-controller"}, true, ForgedLeaderEndpoints, Denied},
		{"an exempt requester may", &Requester{Username: "admin", Groups: []string{"system:masters"}}, true, Exempt, Allowed},
		{"a Service that merely ends in -leader is none of leasegate's business", &Requester{Username: "system:serviceaccount:kube-system:endpointslice-controller"}, false, NotGuarded, Allowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.DecideLeaderEndpoints(tt.requester, tt.leaderService)
			if got.Reason != tt.want || got.Outcome != tt.outcome {
				t.Errorf("DecideLeaderEndpoints() = %s (%s), want %s (%s)", got.Reason.Code(), got.Outcome, tt.want.Code(), tt.outcome)
			}
		})
	}
}

func TestDecideLeaderService(t *testing.T) {
	p := testPolicy(t, "")
	companion := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-leader", Labels: map[string]string{contract.LeaderOf: "orders", contract.LeaderLease: "orders", contract.Managed: "true"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	changed := func(change func(*corev1.Service)) *corev1.Service {
		svc := companion.DeepCopy()
		change(svc)
		return svc
	}
	unlabelled := changed(func(s *corev1.Service) { delete(s.Labels, contract.LeaderOf) })
	selecting := changed(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "orders"} })
	person, follower := &Requester{Username: "dana"}, pod("shop", "orders", "orders-b", "uid-b")
	tests := []struct {
		name      string
		requester *Requester
		old, new  *corev1.Service
		want      Reason
	}{
		{"a namespace admin may not unmark the companion", person, companion, unlabelled, ForgedLeaderService},
		{"nor give it a selector, routing it to every replica", person, companion, selecting, ForgedLeaderService},
		{"nor both at once", person, companion, changed(func(s *corev1.Service) {
			delete(s.Labels, contract.LeaderOf)
			s.Spec.Selector = map[string]string{"app": "orders"}
		}), ForgedLeaderService},
		{"nor point it at another lease", person, companion, changed(func(s *corev1.Service) { s.Labels[contract.LeaderLease] = "billing" }), ForgedLeaderService},
		{"nor unmark it as leasegate's", person, companion, changed(func(s *corev1.Service) { delete(s.Labels, contract.Managed) }), ForgedLeaderService},
		{"nor route it outside the cluster", person, companion, changed(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), ForgedLeaderService},
		{"nor give it external addresses", person, companion, changed(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.7"} }), ForgedLeaderService},
		{"a pod may not either", follower, companion, selecting, ForgedLeaderService},
		{"nobody but leasegate creates a companion", person, nil, companion, ForgedLeaderService},
		{"an update that leaves the companion as it is passes", person, companion.DeepCopy(), companion, NotGated},
		{"nor marks a Service of its own as one", person, unlabelled, companion, ForgedLeaderService},
		{"nor delete it, freeing its name for an unmarked Service with a selector", person, companion, nil, ForgedLeaderService},
		{"a cluster admin may delete it", &Requester{Username: "admin", Groups: []string{"system:masters"}}, companion, nil, Exempt},
		{"the garbage collector deletes it with its followed Service", &Requester{Username: "system:serviceaccount:kube-system:generic-garbage-collector"}, companion, nil, NotGated},
		{"anyone may annotate the companion", person, companion, changed(func(s *corev1.Service) { s.Annotations = map[string]string{"team": "payments"} }), NotGated},
		{"a Service without the mark is none of leasegate's business", person, nil, unlabelled, NotGuarded},
		{"a cluster admin may break glass", &Requester{Username: "admin", Groups: []string{"system:masters"}}, companion, selecting, Exempt},
		{"the control plane passes", &Requester{Username: "system:serviceaccount:kube-system:service-controller"}, companion, selecting, NotGated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.DecideLeaderService(&LeaderServiceWrite{Requester: tt.requester, Old: tt.old, New: tt.new})
			wantOutcome := Allowed
			if tt.want == ForgedLeaderService {
				wantOutcome = Denied
			}
			if got.Reason != tt.want || got.Outcome != wantOutcome {
				t.Errorf("DecideLeaderService() = %s (%s), want %s (%s)", got.Reason.Code(), got.Outcome, tt.want.Code(), wantOutcome)
			}
		})
	}
}

// BenchmarkDecideLeaseWriteRenewal is the lease guard's commonest decision: a holder's renewal.
func BenchmarkDecideLeaseWriteRenewal(b *testing.B) {
	p := testPolicy(b, "")
	old := heldLease("shop", "orders", "orders-a_uid-a", 2*time.Second, true)
	renewal := heldLease("shop", "orders", "orders-a_uid-a", 0, true)
	w := &LeaseWrite{Requester: pod("shop", "orders", "orders-a", "uid-a"), Old: old, New: renewal, GivenSeconds: 15}
	b.ReportAllocs()
	for b.Loop() {
		if v := p.DecideLeaseWrite(w, now); v.Reason != HoldsLease {
			b.Fatal(v)
		}
	}
}

// A clock skew margin of 0 s judges expiry strictly, but must not refuse the renewals of a holder whose
// node's clock runs a little ahead of the webhook's: it would step down and never lead again.
func TestDecideLeaseWriteToleratesSkewWithAZeroMargin(t *testing.T) {
	p := testPolicy(t, "election: {clockSkewMargin: 0s}\n")
	held := heldLease("shop", "orders", "orders-a_uid-a", 2*time.Second, true)
	renewal := heldLease("shop", "orders", "orders-a_uid-a", 0, true)
	renewal.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(300 * time.Millisecond)}
	w := &LeaseWrite{Requester: pod("shop", "orders", "orders-a", "uid-a"), Old: held, New: renewal, GivenSeconds: 15}
	if v := p.DecideLeaseWrite(w, now); v.Outcome != Allowed {
		t.Errorf("a renewal stamped 300 ms ahead with margin 0: %s (%s), want allowed", v.Outcome, v.Reason.Code())
	}
}

// Agents ignore handover annotations on a MultiClusterLease, so the guard must not hold a candidate to
// them there: it would refuse the takes agents make.
func TestDecideLeaseWriteHandoverIsForLeasesOnly(t *testing.T) {
	p := testPolicy(t, "")
	handedOver := handover(heldLease("shop", "orders", "", time.Second, true), "orders-b")
	take := counted(heldLease("shop", "orders", "orders-c_uid-c", 0, true), 5)
	for _, multiCluster := range []bool{false, true} {
		w := &LeaseWrite{Requester: pod("shop", "orders", "orders-c", "uid-c"), Old: handedOver, New: take, MultiCluster: multiCluster, GivenSeconds: 15}
		want := NotHandoverTarget
		if multiCluster {
			want = HoldsLease
		}
		if got := p.DecideLeaseWrite(w, now); got.Reason != want {
			t.Errorf("a non-target takes a handed-over lock (MultiClusterLease %v): %s, want %s", multiCluster, got.Reason.Code(), want.Code())
		}
	}
}
