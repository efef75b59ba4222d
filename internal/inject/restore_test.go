package inject

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/leasegate/leasegate/internal/contract"
)

// provisionerWith is a Provisioner over a fake client holding objects, with the pod index the manager
// registers. Fakes are enough here: what is judged is which writes provisioning makes, not the API.
func provisionerWith(t *testing.T, objects ...client.Object) (*Provisioner, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).WithIndex(&corev1.Pod{}, podLeaseIndex, podLeaseKeys).WithReturnManagedFields().Build()
	return &Provisioner{Client: c, APIReader: c}, c
}

func TestRestoreMarker(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	member := agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s")
	unlabelled := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)},
			},
		}
	}
	tests := []struct {
		name        string
		lease       *coordinationv1.Lease
		wantMarked  bool
		wantRecheck time.Duration
	}{
		{"released: marked again", unlabelled("", 0), true, 0},
		{"held by one of its pods: marked again", unlabelled("orders-a_uid-a", time.Second), true, 0},
		{"expired, held by a pod that left: marked again", unlabelled("orders-gone_uid-gone", time.Minute), true, 0},
		// 15 s from a renewal 5 s ago, plus the default clock skew margin of 1 s, plus a second.
		{"held by a pod that left, unexpired: looked at again when its term ends", unlabelled("orders-gone_uid-gone", 5*time.Second), false, 12 * time.Second},
		{"held by another controller, unexpired: left as it is until then", unlabelled("cert-manager-7c9_0f3e", 0), false, 17 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := provisionerWith(t, member, tt.lease)
			recheck, err := p.restoreMarker(context.Background(), "shop", lock{name: "orders"}, now)
			if err != nil {
				t.Fatal(err)
			}
			got := &coordinationv1.Lease{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tt.lease), got); err != nil {
				t.Fatal(err)
			}
			if marked := got.Labels[contract.Managed] == "true"; marked != tt.wantMarked {
				t.Errorf("marked = %v, want %v", marked, tt.wantMarked)
			}
			if recheck != tt.wantRecheck {
				t.Errorf("recheck = %v, want %v", recheck, tt.wantRecheck)
			}
		})
	}
}

// A user who replaces leasegate's Role of a lease by their own must not find the pods bound to it by
// leasegate's RoleBinding, which would grant them whatever the user's Role grants.
func TestProvisionUnbindsWhenTheRoleIsAnothers(t *testing.T) {
	name := rbacPrefix + "orders"
	users := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
	}
	ours := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: name, Labels: map[string]string{contract.Managed: "true"},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "shop", Name: "orders"}},
	}
	entry := fieldsOwning(fieldOwner, contract.Managed)
	entry.APIVersion = rbacv1.SchemeGroupVersion.String()
	ours.ManagedFields = []metav1.ManagedFieldsEntry{entry}
	if !Provisioned(ours) {
		t.Fatal("the test's RoleBinding is not leasegate's")
	}
	p, c := provisionerWith(t, users, ours, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "orders", Labels: map[string]string{contract.Managed: "true"},
	}})
	clash, _, err := p.provision(context.Background(), "shop", lock{name: "orders"}, []string{"orders"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if clash == nil || clash.GetName() != name {
		t.Fatalf("clash = %v, want the user's Role", clash)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(ours), &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("leasegate's RoleBinding to the user's Role: %v, want it deleted", err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(users), &rbacv1.Role{}); err != nil {
		t.Errorf("the user's Role: %v, want it kept", err)
	}
}
