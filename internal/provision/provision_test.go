package provision

import (
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
)

// agentPod is pod shop/orders-a with the agent container as injection makes it, its env given as
// "NAME=value", and a status annotation that names another lease: provisioning reads the agent's
// environment (inject.GivenTo), never the annotation anyone may rewrite.
func agentPod(env ...string) *corev1.Pod {
	agent := corev1.Container{Name: inject.AgentContainer, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		agent.Env = append(agent.Env, corev1.EnvVar{Name: name, Value: value})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-a", UID: "uid-a", Annotations: map[string]string{
			contract.Status: `{"lease":"cert-manager-controller","leaseSeconds":{"cert-manager-controller":86400},"restartOnLoss":"","leaseKind":"MultiClusterLease"}`,
		}},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{agent}, Containers: []corev1.Container{{Name: "orders"}}},
	}
}

func TestLocksOf(t *testing.T) {
	elections := `LEASEGATE_ELECTIONS=[{"name":"fast","lease":"orders-fast","leaseDuration":"4s","renewDeadline":"2s","retryPeriod":"1s"},` +
		`{"name":"slow","lease":"orders-slow","leaseDuration":"60s","renewDeadline":"40s","retryPeriod":"1s"}]`
	notInjected := agentPod()
	notInjected.Spec.InitContainers = nil
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []lock
	}{
		{"a pod's one lease", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s"), []lock{{name: "orders"}}},
		{"the leases of a pod with several elections", agentPod(elections), []lock{{name: "orders-fast"}, {name: "orders-slow"}}},
		{"a pod that elects across clusters", agentPod("LEASEGATE_LEASE=payouts", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_LEASE_KIND=MultiClusterLease"), []lock{{name: "payouts", multiCluster: true}}},
		{"several elections across clusters", agentPod(elections, "LEASEGATE_LEASE_KIND=MultiClusterLease"), []lock{{name: "orders-fast", multiCluster: true}, {name: "orders-slow", multiCluster: true}}},
		// agentPod's status annotation names cert-manager's lease: only the agent's environment counts.
		{"a pod leasegate did not inject, whatever its annotation says", notInjected, []lock{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := locksOf(tt.pod)
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

// fieldsOwning is a managedFields entry of manager whose field set holds the labels named.
func fieldsOwning(manager string, labels ...string) metav1.ManagedFieldsEntry {
	set := `{"f:metadata":{"f:labels":{".":{}`
	for _, l := range labels {
		set += `,"f:` + l + `":{}`
	}
	set += `}},"f:rules":{}}`
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(set)}
}

func TestProvisioned(t *testing.T) {
	managed := map[string]string{contract.Managed: "true"}
	tests := []struct {
		name   string
		labels map[string]string
		fields []metav1.ManagedFieldsEntry
		want   bool
	}{
		{"created by leasegate: its field manager set the label", managed, []metav1.ManagedFieldsEntry{fieldsOwning("leasegate", contract.Managed)}, true},
		{"leasegate's, edited since by a person", managed, []metav1.ManagedFieldsEntry{fieldsOwning("kubectl-edit"), fieldsOwning("leasegate", contract.Managed)}, true},
		{"a user's Role without the label", nil, []metav1.ManagedFieldsEntry{fieldsOwning("kubectl-create")}, false},
		{"a user's Role with the label copied from leasegate's YAML", managed, []metav1.ManagedFieldsEntry{fieldsOwning("kubectl-create", contract.Managed)}, false},
		{"leasegate's manager, but someone else set the label", managed, []metav1.ManagedFieldsEntry{fieldsOwning("leasegate"), fieldsOwning("helm", contract.Managed)}, false},
		{"leasegate's field manager on a Role someone took the label off", nil, []metav1.ManagedFieldsEntry{fieldsOwning("leasegate", contract.Managed)}, false},
		{"the label set to something else", map[string]string{contract.Managed: "false"}, []metav1.ManagedFieldsEntry{fieldsOwning("leasegate", contract.Managed)}, false},
		{"no managedFields at all", managed, nil, false},
		{"a field set that is not JSON", managed, []metav1.ManagedFieldsEntry{{Manager: "leasegate", FieldsV1: metav1.NewFieldsV1("{")}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leasegate-orders", Labels: tt.labels, ManagedFields: tt.fields}}
			if got := Provisioned(role); got != tt.want {
				t.Errorf("Provisioned() = %v, want %v", got, tt.want)
			}
		})
	}
}

// The Role and RoleBinding caches keep what Provisioned reads, and drop other managers' entries.
func TestKeepOwnManagedFields(t *testing.T) {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{contract.Managed: "true"}, ManagedFields: []metav1.ManagedFieldsEntry{
		fieldsOwning("kubectl-edit"), fieldsOwning("leasegate", contract.Managed), fieldsOwning("helm"),
	}}}
	out, err := KeepOwnManagedFields(role)
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*rbacv1.Role).ManagedFields
	if len(kept) != 1 || kept[0].Manager != "leasegate" || !Provisioned(out.(*rbacv1.Role)) {
		t.Errorf("KeepOwnManagedFields() kept %v, want leasegate's entry only", kept)
	}
}

// The Event names the object, what the pod lacks, and the fixes.
func TestConflictNote(t *testing.T) {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "leasegate-orders"}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "leasegate-orders"}}
	for _, tt := range []struct {
		clash client.Object
		want  string
	}{
		{role, "Role shop/leasegate-orders exists and leasegate did not create it"},
		{binding, "RoleBinding shop/leasegate-orders exists and leasegate did not create it"},
	} {
		note := conflictNote(tt.clash, lock{name: "orders"})
		for _, want := range []string{tt.want, "no rights on lease orders", "Delete or rename that", contract.Lease} {
			if !strings.Contains(note, want) {
				t.Errorf("conflictNote() = %q, want it to say %q", note, want)
			}
		}
	}
}
