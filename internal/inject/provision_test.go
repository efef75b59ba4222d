package inject

import (
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/leasegate/leasegate/internal/contract"
)

func TestLocksOf(t *testing.T) {
	tests := []struct {
		name   string
		status string
		want   []lock
	}{
		{"a pod's one lease", `{"lease":"orders"}`, []lock{{name: "orders"}}},
		{"the leases of a pod with several elections", `{"leases":["orders-fast","orders-slow"]}`, []lock{{name: "orders-fast"}, {name: "orders-slow"}}},
		{"a pod that elects across clusters", `{"lease":"payouts","leaseKind":"MultiClusterLease"}`, []lock{{name: "payouts", multiCluster: true}}},
		{"several elections across clusters", `{"leases":["a","b"],"leaseKind":"MultiClusterLease"}`, []lock{{name: "a", multiCluster: true}, {name: "b", multiCluster: true}}},
		{"a pod leasegate did not inject", ``, []lock{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.Status: tt.status}}}
			got := locksOf(pod)
			if len(got) != len(tt.want) {
				t.Fatalf("locksOf() = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("locksOf()[%d] = %+v, want %+v", i, got[i], tt.want[i])
				}
				if back := lockOf(got[i].key()); back != got[i] {
					t.Errorf("lockOf(%q) = %+v, want %+v: a key must name its lock", got[i].key(), back, got[i])
				}
			}
		})
	}
}

// A Lease and a MultiClusterLease of one name in one namespace are two locks with their own Roles: no
// Lease name can be read as a MultiClusterLease's key.
func TestLockKeysNeverCollide(t *testing.T) {
	l, m := lock{name: "orders"}, lock{name: "orders", multiCluster: true}
	if l.key() == m.key() {
		t.Fatalf("a Lease and a MultiClusterLease named orders share key %q", l.key())
	}
	if msgs := validation.IsDNS1123Subdomain(m.key()); len(msgs) == 0 {
		t.Errorf("MultiClusterLease key %q is also a valid Lease name, so a Lease of that name would share its Role", m.key())
	}
}

// Each lock's Role grants its own kind by name, and a MultiClusterLease's never its status.
func TestLockRule(t *testing.T) {
	tests := []struct {
		lock              lock
		group, resource   string
		objectIsLeaseKind bool
	}{
		{lock{name: "orders"}, "coordination.k8s.io", "leases", true},
		{lock{name: "orders", multiCluster: true}, "leasegate.io", "multiclusterleases", false},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			rule := tt.lock.rule()
			if rule.APIGroups[0] != tt.group || len(rule.Resources) != 1 || rule.Resources[0] != tt.resource {
				t.Errorf("rule() = %v %v, want %s %s (and no subresource)", rule.APIGroups, rule.Resources, tt.group, tt.resource)
			}
			if len(rule.ResourceNames) != 1 || rule.ResourceNames[0] != "orders" {
				t.Errorf("rule().ResourceNames = %v, want [orders]", rule.ResourceNames)
			}
			if slices.Contains(rule.Verbs, "create") || slices.Contains(rule.Verbs, "delete") {
				t.Errorf("rule().Verbs = %v: the provisioner creates and deletes the lock, candidates only renew it", rule.Verbs)
			}
			obj := tt.lock.object("shop")
			_, isLease := obj.(*coordinationv1.Lease)
			if isLease != tt.objectIsLeaseKind || obj.GetLabels()[contract.Managed] != "true" || obj.GetName() != "orders" {
				t.Errorf("object() = %T %s %v, want a managed %s named orders", obj, obj.GetName(), obj.GetLabels(), tt.resource)
			}
		})
	}
}
