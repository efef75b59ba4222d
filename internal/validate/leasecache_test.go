package validate

import (
	"testing"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
)

// TestLeaseStoresKeepTheNewestVersion plays what the two watches' reflectors deliver, in the orders the
// two streams allow, and checks what a lookup of shop/orders then finds.
func TestLeaseStoresKeepTheNewestVersion(t *testing.T) {
	version := func(rv, holder string, provisioned bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", ResourceVersion: rv},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
		}
		if provisioned {
			l.Labels = map[string]string{contract.Managed: "true"}
		}
		return l
	}
	type step func(provisioned, others *leaseStore)
	add := func(to func(p, o *leaseStore) *leaseStore, l *coordinationv1.Lease) step {
		return func(p, o *leaseStore) { _ = to(p, o).Add(l) }
	}
	del := func(from func(p, o *leaseStore) *leaseStore, l *coordinationv1.Lease) step {
		return func(p, o *leaseStore) { _ = from(p, o).Delete(l) }
	}
	list := func(of func(p, o *leaseStore) *leaseStore, rv string, items ...*coordinationv1.Lease) step {
		return func(p, o *leaseStore) {
			objs := make([]any, len(items))
			for i, l := range items {
				objs[i] = l
			}
			_ = of(p, o).Replace(objs, rv)
		}
	}
	p := func(p, _ *leaseStore) *leaseStore { return p }
	o := func(_, o *leaseStore) *leaseStore { return o }
	for _, tc := range []struct {
		name       string
		steps      []step
		wantHolder string // "" for no lease
	}{
		{"a provisioned lease", []step{add(p, version("5", "a", true))}, "a"},
		{"unlabelled: the provisioned watch's DELETED first, then the others' ADDED",
			[]step{add(p, version("5", "a", true)), del(p, version("6", "a", false)), add(o, version("6", "a", false))}, "a"},
		{"unlabelled: the others' ADDED first, then the provisioned watch's DELETED",
			[]step{add(p, version("5", "a", true)), add(o, version("6", "a", false)), del(p, version("6", "a", false))}, "a"},
		{"unlabelled then labelled again, the provisioned stream ahead: the older version neither wins nor removes",
			[]step{add(p, version("5", "a", true)), del(p, version("10", "a", false)), add(p, version("12", "b", true)),
				add(o, version("10", "a", false)), del(o, version("12", "b", true))}, "b"},
		{"an older update delivered late does not replace a newer one",
			[]step{add(p, version("7", "b", true)), add(p, version("5", "a", true))}, "b"},
		{"deleted", []step{add(p, version("5", "a", true)), del(p, version("6", "a", true))}, ""},
		{"a relist without the lease removes it", []step{add(p, version("5", "a", true)), list(p, "8")}, ""},
		{"a relist older than the lease's version keeps it", []step{add(p, version("9", "a", true)), list(p, "8")}, "a"},
		{"a relist of the provisioned leases leaves the others' alone", []step{add(o, version("5", "a", false)), list(p, "8")}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewLeaseCache(nil, logr.Discard())
			c.Watch([]LeaseRef{{Name: "orders"}})
			provisioned, others := &leaseStore{cache: c, provisioned: true}, &leaseStore{cache: c}
			for _, step := range tc.steps {
				step(provisioned, others)
			}
			got := ""
			if l, ok := c.leases[namespacedName{"shop", "orders"}]; ok {
				got = ptr.Deref(l.Spec.HolderIdentity, "")
			}
			if got != tc.wantHolder {
				t.Errorf("holder = %q, want %q", got, tc.wantHolder)
			}
		})
	}
}

func TestARetiredStoreWritesNothing(t *testing.T) {
	c := NewLeaseCache(nil, logr.Discard())
	c.Watch([]LeaseRef{{Name: "orders"}})
	old, next := &leaseStore{cache: c}, &leaseStore{cache: c}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", ResourceVersion: "5"}}
	old.retired = true
	_ = next.Replace(nil, "9") // the lease was deleted before the new watch listed
	_ = old.Add(lease)         // what the stopped reflector still had in hand
	if _, ok := c.leases[namespacedName{"shop", "orders"}]; ok {
		t.Error("a retired store put a deleted lease back")
	}
	_ = next.Add(lease)
	_ = old.Replace(nil, "10")
	if _, ok := c.leases[namespacedName{"shop", "orders"}]; !ok {
		t.Error("a retired store's late list removed the lease")
	}
}

func TestOnlyGuardedLeasesAreKeptFromTheOthersWatch(t *testing.T) {
	c := NewLeaseCache(nil, logr.Discard())
	c.Watch([]LeaseRef{{Name: "orders"}, {Namespace: "billing", Name: "ledger"}})
	others := &leaseStore{cache: c}
	for _, l := range []struct{ namespace, name string }{{"shop", "orders"}, {"billing", "ledger"}, {"shop", "ledger"}, {"shop", "kube-scheduler"}} {
		_ = others.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace, Name: l.name, ResourceVersion: "5"}})
	}
	var kept []namespacedName
	for key := range c.leases {
		kept = append(kept, key)
	}
	if len(kept) != 2 || c.leases[namespacedName{"shop", "orders"}] == nil || c.leases[namespacedName{"billing", "ledger"}] == nil {
		t.Errorf("kept %v, want shop/orders (any namespace's orders) and billing/ledger only", kept)
	}
	c.Watch([]LeaseRef{{Namespace: "billing", Name: "ledger"}})
	if _, ok := c.leases[namespacedName{"shop", "orders"}]; ok {
		t.Error("shop/orders is still kept after its guard went")
	}
}
