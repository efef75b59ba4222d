package validate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/config"
)

// The fence decides on every guarded write: its decisions allocate nothing, whatever the verdict. Times
// are the benchmarks' (BenchmarkDecide*); allocations are deterministic, so they are held here.
func TestDecideAllocatesNothing(t *testing.T) {
	p := testPolicy(t, "")
	cfg, err := config.Load([]byte(holderFormatConfig))
	if err != nil {
		t.Fatal(err)
	}
	formats := Compile(cfg, "leasegate-system")
	tests := []struct {
		name   string
		policy *Policy
		leases LeaseGetter
		req    *Request
		want   Reason
	}{
		{"allow", p, leases, &Request{Requester: pod("shop", "orders", "orders-a", "uid-a"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}, HoldsLease},
		{"deny", p, leases, &Request{Requester: pod("shop", "orders", "orders-b", "uid-b"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}, HeldByAnother},
		{"allow through a holder format", formats, holderFormatLeases, &Request{Requester: pod("cert-manager", "cert-manager", "cm-0", "u0"), Operation: "CREATE", Group: "cert-manager.io", Resource: "certificaterequests", Namespace: "shop"}, HoldsLease},
		{"deny, holder in another namespace", formats, holderFormatLeases, &Request{Requester: pod("evil", "cert-manager", "cm-0", "u-evil"), Operation: "CREATE", Group: "cert-manager.io", Resource: "certificaterequests", Namespace: "shop"}, HolderInOtherNamespace},
		{"deny, lease missing", p, leases, &Request{Requester: pod("other", "orders", "orders-a", "uid-a"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "other"}, LeaseMissing},
		{"not gated", p, leases, &Request{Requester: pod("shop", "billing", "billing-a", "uid-x"), Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}, NotGated},
		{"exempt", p, leases, &Request{Requester: &Requester{Username: "ci-bot"}, Operation: "UPDATE", Group: "apps", Resource: "deployments", Namespace: "shop"}, Exempt},
		{"not guarded", p, leases, &Request{Requester: pod("shop", "orders", "orders-b", "uid-b"), Operation: "UPDATE", Resource: "pods", Namespace: "shop"}, NotGuarded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v := tt.policy.Decide(tt.req, tt.leases, now); v.Reason != tt.want {
				t.Fatalf("Decide() = %s, want %s", v.Reason.Code(), tt.want.Code())
			}
			if n := testing.AllocsPerRun(100, func() { tt.policy.Decide(tt.req, tt.leases, now) }); n != 0 {
				t.Errorf("Decide() allocates %v times per call, want 0", n)
			}
		})
	}
}

// The lease guard judges every renewal of every lease leasegate manages: nothing it decides allocates.
func TestDecideLeaseWriteAllocatesNothing(t *testing.T) {
	p := testPolicy(t, "")
	held := heldLease("shop", "orders", "orders-a_uid-a", 2*time.Second, true)
	expired := heldLease("shop", "orders", "orders-a_uid-a", 20*time.Second, true)
	tests := []struct {
		name string
		w    *LeaseWrite
		want Reason
	}{
		{"a renewal", &LeaseWrite{Requester: pod("shop", "orders", "orders-a", "uid-a"), Old: held, New: heldLease("shop", "orders", "orders-a_uid-a", 0, true), GivenSeconds: 15}, HoldsLease},
		{"a take of an expired lease", &LeaseWrite{Requester: pod("shop", "orders", "orders-b", "uid-b"), Old: expired, New: counted(heldLease("shop", "orders", "orders-b_uid-b", 0, true), 5), GivenSeconds: 15}, HoldsLease},
		{"a take of a held lease", &LeaseWrite{Requester: pod("shop", "orders", "orders-b", "uid-b"), Old: held, New: counted(heldLease("shop", "orders", "orders-b_uid-b", 0, true), 5), GivenSeconds: 15}, TakeUnexpired},
		{"a foreign holder", &LeaseWrite{Requester: pod("shop", "orders", "orders-b", "uid-b"), Old: expired, New: heldLease("shop", "orders", "orders-c_uid-c", 0, true), GivenSeconds: 15}, ForeignHolder},
		{"a delete", &LeaseWrite{Requester: pod("shop", "orders", "orders-a", "uid-a"), Old: held}, DeleteLease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v := p.DecideLeaseWrite(tt.w, now); v.Reason != tt.want {
				t.Fatalf("DecideLeaseWrite() = %s, want %s", v.Reason.Code(), tt.want.Code())
			}
			if n := testing.AllocsPerRun(100, func() { p.DecideLeaseWrite(tt.w, now) }); n != 0 {
				t.Errorf("DecideLeaseWrite() allocates %v times per call, want 0", n)
			}
		})
	}
}

// impliedOps returns at once for a write to a resource itself: every implied write must be a
// subresource's.
func TestImpliedWritesAreSubresources(t *testing.T) {
	for _, w := range ImpliedWrites {
		if w.Subresource == "" {
			t.Errorf("implied write %+v names no subresource", w)
		}
	}
}

// Configurations beyond smallSet resources or entries keep maps: the same decisions either way.
func TestPolicyLargeSets(t *testing.T) {
	var s set[string]
	for i := range 3 * smallSet {
		s.add(string(rune('a' + i)))
		s.add(string(rune('a' + i))) // a repeat changes nothing
	}
	if s.large == nil || len(s.large) != 3*smallSet {
		t.Fatalf("a set of %d: small %d, large %d", 3*smallSet, len(s.small), len(s.large))
	}
	for i := range 3 * smallSet {
		if !s.has(string(rune('a' + i))) {
			t.Errorf("missing %q", string(rune('a'+i)))
		}
	}
	if s.has("A") || s.empty() {
		t.Error("has an entry never added, or is empty")
	}
	var small set[string]
	if !small.empty() || small.has("") {
		t.Error("the zero set is not empty")
	}
}

func TestDecideWithLargeSets(t *testing.T) {
	var b strings.Builder
	b.WriteString("guards:\n- name: many\n  lease: orders\n  serviceAccounts: [")
	for i := range 2 * smallSet {
		fmt.Fprintf(&b, "sa-%d, other/sa-%d, ", i, i)
	}
	b.WriteString("orders]\n  namespaces: [")
	for i := range 2 * smallSet {
		fmt.Fprintf(&b, "ns-%d, ", i)
	}
	b.WriteString("shop]\n  resources:\n")
	for i := range 2 * smallSet {
		fmt.Fprintf(&b, "  - {group: example.com, resources: [things-%d]}\n", i)
	}
	b.WriteString("exempt: {groups: [")
	for i := range 2 * smallSet {
		fmt.Fprintf(&b, "group-%d, ", i)
	}
	b.WriteString("system:masters]}\n")
	cfg, err := config.Load([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(cfg, "leasegate-system")
	if p.rules.large == nil || p.exemptGroups.large == nil {
		t.Fatal("a large configuration compiled to slices")
	}
	last := fmt.Sprintf("things-%d", 2*smallSet-1)
	for _, tt := range []decideCase{
		{"the holder's write passes", pod("shop", "orders", "orders-a", "uid-a"), "UPDATE", "example.com", last, "shop",
			Verdict{Outcome: Allowed, Reason: HoldsLease, Guard: "many", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"a follower's write is denied", pod("shop", "orders", "orders-b", "uid-b"), "UPDATE", "example.com", "things-0", "shop",
			Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "many", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}},
		{"an account the guard does not name passes", pod("shop", "billing", "billing-a", "uid-x"), "UPDATE", "example.com", "things-0", "shop",
			Verdict{Reason: NotGated}},
		{"a namespace the guard does not name passes", pod("elsewhere", "orders", "orders-b", "uid-b"), "UPDATE", "example.com", "things-0", "elsewhere",
			Verdict{Reason: NotGated}},
		{"an exempt group passes", &Requester{Username: "system:serviceaccount:shop:orders", Groups: []string{"system:masters"}}, "UPDATE", "example.com", "things-0", "shop",
			Verdict{Reason: Exempt}},
		{"a resource no guard covers passes", pod("shop", "orders", "orders-b", "uid-b"), "UPDATE", "example.com", "others", "shop",
			Verdict{Reason: NotGuarded}},
	} {
		req := &Request{Requester: tt.requester, Operation: tt.op, Group: tt.group, Resource: tt.res, Namespace: tt.namespace}
		if got := p.Decide(req, leases, now); got != tt.want {
			t.Errorf("%s: Decide() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
