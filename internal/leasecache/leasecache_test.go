package leasecache

import (
	"testing"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
)

// TestLeaseCacheMirrorsItsWatch plays what the watch's reflector delivers and checks what lookups find.
func TestLeaseCacheMirrorsItsWatch(t *testing.T) {
	held := func(namespace, name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
		}
	}
	c := NewLeaseCache(nil, logr.Discard())
	store := (*leaseStore)(c)
	holderOf := func(namespace, name string) string {
		if l, ok := c.Get(namespace, name); ok {
			return ptr.Deref(l.Spec.HolderIdentity, "")
		}
		return ""
	}
	if c.Synced() {
		t.Fatal("synced before the first list")
	}
	_ = store.Replace([]any{held("shop", "orders", "a"), held("kube-system", "kube-scheduler", "s")}, "10")
	if !c.Synced() || holderOf("shop", "orders") != "a" || holderOf("kube-system", "kube-scheduler") != "s" {
		t.Fatalf("after the list: synced %v, orders held by %q, kube-scheduler by %q", c.Synced(), holderOf("shop", "orders"), holderOf("kube-system", "kube-scheduler"))
	}
	_ = store.Update(held("shop", "orders", "b"))
	_ = store.Add(held("billing", "ledger", "c"))
	_ = store.Delete(cache.DeletedFinalStateUnknown{Key: "kube-system/kube-scheduler", Obj: held("kube-system", "kube-scheduler", "s")})
	for _, tc := range []struct{ namespace, name, want string }{
		{"shop", "orders", "b"}, {"billing", "ledger", "c"}, {"kube-system", "kube-scheduler", ""},
	} {
		if got := holderOf(tc.namespace, tc.name); got != tc.want {
			t.Errorf("%s/%s held by %q, want %q", tc.namespace, tc.name, got, tc.want)
		}
	}
	_ = store.Replace([]any{held("shop", "orders", "b")}, "20") // a relist after an outage: ledger went meanwhile
	if got := holderOf("billing", "ledger"); got != "" {
		t.Errorf("billing/ledger, gone from the relist, still held by %q", got)
	}
}

func TestLeaseCacheDropsManagedFields(t *testing.T) {
	c := NewLeaseCache(nil, logr.Discard())
	store := (*leaseStore)(c)
	withFields := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "leasegate-agent", Operation: metav1.ManagedFieldsOperationUpdate},
		}}}
	}
	_ = store.Replace([]any{withFields("listed")}, "1")
	_ = store.Add(withFields("added"))
	_ = store.Update(withFields("updated"))
	for _, name := range []string{"listed", "added", "updated"} {
		l, ok := c.Get("shop", name)
		if !ok {
			t.Errorf("lease %s not cached", name)
		} else if l.ManagedFields != nil {
			t.Errorf("lease %s cached with managedFields %v", name, l.ManagedFields)
		}
	}
}

// The cache reads each lease for judging once, as it stores it: a lookup finds the label read and
// allocates nothing.
func TestLeaseCacheKeepsLeasesReadForJudging(t *testing.T) {
	c := NewLeaseCache(nil, logr.Discard())
	store := (*leaseStore)(c)
	managed := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Labels: map[string]string{contract.Managed: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-a_uid-a")}}
	theirs := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cert-manager"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cm-0_x")}}
	_ = store.Replace([]any{managed}, "1")
	_ = store.Add(theirs)
	for _, tc := range []struct {
		name, holder string
		managed      bool
	}{{"orders", "orders-a_uid-a", true}, {"cert-manager", "cm-0_x", false}} {
		k, ok := c.Get("shop", tc.name)
		if !ok || k.Managed != tc.managed || k.Judged.HolderIdentity != tc.holder {
			t.Errorf("lease %s: found %v, managed %v, holder %q; want managed %v, holder %q", tc.name, ok, k != nil && k.Managed, holderOrNone(k), tc.managed, tc.holder)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.Get("shop", "orders") }); n != 0 {
		t.Errorf("Get allocates %v times per lookup, want 0", n)
	}
}

func holderOrNone(k *leaseapi.Kept) string {
	if k == nil {
		return ""
	}
	return k.Judged.HolderIdentity
}

func BenchmarkLeaseCacheGet(b *testing.B) {
	c := NewLeaseCache(nil, logr.Discard())
	_ = (*leaseStore)(c).Replace([]any{&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}}, "1")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Get("shop", "orders"); !ok {
			b.Fatal("missing")
		}
	}
}
