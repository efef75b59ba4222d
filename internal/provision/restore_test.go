package provision

import (
	"context"
	"strings"
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

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
)

// provisionerWith is a Reconciler over a fake client holding objects, with the pod index the manager
// registers. Fakes are enough here: what is judged is which writes provisioning makes, not the API.
func provisionerWith(t *testing.T, objects ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).WithIndex(&corev1.Pod{}, podLeaseIndex, podLeaseKeys).WithReturnManagedFields().Build()
	return &Reconciler{Client: c, APIReader: c}, c
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
	// leasegate's Role of the lease: it provisioned the lease, which has since lost its label.
	ours := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: rbacPrefix + "orders", Labels: map[string]string{contract.Managed: "true"}}}
	entry := fieldsOwning(fieldOwner, contract.Managed)
	entry.APIVersion = rbacv1.SchemeGroupVersion.String()
	ours.ManagedFields = []metav1.ManagedFieldsEntry{entry}
	users := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: rbacPrefix + "orders"}}
	adopting := config.DefaultConfig()
	adopting.AdoptLeases = []string{"shop/orders"}
	tests := []struct {
		name        string
		role        *rbacv1.Role // the Role of the lease's name, if any
		adopt       bool
		lease       *coordinationv1.Lease
		wantMarked  bool
		wantForeign bool
		wantRecheck time.Duration
	}{
		{"leasegate's, released: marked again", ours, false, unlabelled("", 0), true, false, 0},
		{"leasegate's, held by one of its pods: marked again", ours, false, unlabelled("orders-a_uid-a", time.Second), true, false, 0},
		{"leasegate's, expired, held by a pod that left: marked again", ours, false, unlabelled("orders-gone_uid-gone", time.Minute), true, false, 0},
		// 15 s from a renewal 5 s ago, plus the default clock skew margin of 1 s, plus a second.
		{"leasegate's, held by a pod that left, unexpired: looked at again when its term ends", ours, false, unlabelled("orders-gone_uid-gone", 5*time.Second), false, false, 12 * time.Second},
		{"adopted, held by another controller, unexpired: left as it is until then", nil, true, unlabelled("cert-manager-7c9_0f3e", 0), false, false, 17 * time.Second},
		{"adopted, released: marked", nil, true, unlabelled("", 0), true, false, 0},
		// A pod that reached no injector entry names another controller's lease: no Role of leasegate's
		// stands for it, so it is foreign, even released and even "held" by that pod.
		{"another controller's, released: foreign, left unmarked", nil, false, unlabelled("", 0), false, true, 0},
		{"another controller's, held by the pod naming it: foreign, left unmarked", nil, false, unlabelled("orders-a_uid-a", time.Second), false, true, 0},
		{"another controller's, a user's Role of leasegate's name: foreign, left unmarked", users, false, unlabelled("", 0), false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []client.Object{member, tt.lease}
			if tt.role != nil {
				objects = append(objects, tt.role.DeepCopy())
			}
			p, c := provisionerWith(t, objects...)
			cfg := config.DefaultConfig()
			if tt.adopt {
				cfg = adopting
			}
			p.Config = config.NewStore(cfg)
			foreign, recheck, err := p.restoreMarker(context.Background(), "shop", lock{name: "orders"}, now)
			if err != nil {
				t.Fatal(err)
			}
			if (foreign != nil) != tt.wantForeign {
				t.Errorf("foreign = %v, want %v", foreign, tt.wantForeign)
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

// A pod that reached no injector entry (labelled leasegate.io/inject=disabled in an opted-in namespace,
// with an agent container of its own) names another controller's lease: provisioning gives its service
// account no rights on it and leaves the lease unmarked, as the injector would have refused the pod.
func TestProvisionGrantsNothingOnAnotherControllersLease(t *testing.T) {
	member := agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s")
	theirs := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	p, c := provisionerWith(t, member, theirs)
	p.Config = config.NewStore(config.DefaultConfig())
	clash, _, err := p.provision(context.Background(), "shop", lock{name: "orders"}, []string{"orders"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := clash.(*coordinationv1.Lease); !ok {
		t.Fatalf("clash = %v, want the other controller's Lease", clash)
	}
	for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: rbacPrefix + "orders"}, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s: %v, want none", obj, rbacPrefix+"orders", err)
		}
	}
	got := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[contract.Managed] != "" {
		t.Errorf("the other controller's lease was marked as leasegate's")
	}
	if note := conflictNote(clash, lock{name: "orders"}); !strings.Contains(note, "adoptLeases") || !strings.Contains(note, "Lease shop/orders") {
		t.Errorf("the Event's note %q names neither the lease nor the fix", note)
	}
}
