// Package validate is leasegate's validating webhooks, the fence: a pure decision of whether a write may
// pass (Policy.Decide for guarded resources, DecideLeaseWrite for the Leases themselves, DecideEviction,
// DecideLeaderEndpoints), and the admission handlers around it with their Events and metrics. The cache of
// guarded Leases it judges by is internal/leasecache; the webhook rules that send it the guarded writes
// are internal/webhookrules.
package validate

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// Operation bits, so a guard's operations are one mask test.
type opMask uint8

var opBits = map[string]opMask{"CREATE": 1, "UPDATE": 2, "DELETE": 4, "CONNECT": 8}

// ImpliedWrite is a subresource write whose request operation (Sent) is not what it does to the resource
// (Amounts).
type ImpliedWrite struct{ Group, Resource, Subresource, Sent, Amounts string }

// ImpliedWrites are the subresource writes whose request operation is not what they do to the resource: an eviction is a CREATE of pods/eviction that deletes the pod, a binding a CREATE of
// pods/binding that sets its node. A guard that fences the operation they amount to fences them too, in
// the rules (a rule for the subresource with the operation sent) and in the decision, whatever
// operations it lists: otherwise a guard on pods with operations [UPDATE, DELETE] would let a follower
// delete a pod by evicting it.
var ImpliedWrites = [...]ImpliedWrite{
	{"", "pods", "eviction", "CREATE", "DELETE"},
	{"", "pods", "binding", "CREATE", "UPDATE"},
}

// impliedOps is the operation a write amounts to on its resource, beyond its own; 0 for most.
func impliedOps(req *Request) opMask {
	for _, w := range ImpliedWrites {
		if w.Subresource == req.Subresource && w.Resource == req.Resource && w.Group == req.Group && w.Sent == req.Operation {
			return opBits[w.Amounts]
		}
	}
	return 0
}

type groupResource struct{ group, resource string }

// namespacedName is a map key that needs no string concatenation, so lookups do not allocate.
type namespacedName struct{ namespace, name string }

// guard is a config.Guard compiled for matching.
type guard struct {
	name string
	// leaseNamespace is "" when the lease lives in the namespace of the request.
	leaseNamespace, leaseName string
	// serviceAccounts gated; all service accounts when both are empty.
	accountsAnywhere map[string]bool
	accounts         map[namespacedName]bool
	namespaces       map[string]bool // nil: every namespace
	enforcement      config.Enforcement
	// holderFormat reads the lease's holder; nil: by the lease (defaultHolderFormat).
	holderFormat *lease.HolderFormat
	// multiCluster: the guard names a MultiClusterLease, judged by its status.
	multiCluster bool
}

type rule struct {
	guard *guard
	ops   opMask
	// exclude are the subresources the guard leaves out; every other subresource of the resource is
	// guarded with it.
	exclude []string
}

// Policy is a configuration compiled for deciding: one map lookup finds the guards of a resource, and
// deciding allocates nothing when the write passes.
type Policy struct {
	rules           map[groupResource][]rule
	exemptUsers     map[string]bool
	exemptGroups    map[string]bool
	missingIdentity config.Enforcement
	margin          time.Duration
	// defaultLeaseSeconds is election.leaseDuration in whole seconds, as an agent writes it: the longest
	// term a pod whose injection recorded none may claim.
	defaultLeaseSeconds int32
	// ownAccounts is "system:serviceaccount:<leasegate's namespace>:": leasegate provisions and removes
	// Leases itself and is never fenced.
	ownAccounts string
}

// Compile turns a defaulted, validated configuration into a Policy for leasegate running in
// ownNamespace.
func Compile(cfg *config.Config, ownNamespace string) *Policy {
	p := &Policy{
		ownAccounts:         saPrefix + ownNamespace + ":",
		rules:               map[groupResource][]rule{},
		exemptUsers:         set(cfg.Exempt.Users),
		exemptGroups:        set(cfg.Exempt.Groups),
		missingIdentity:     cfg.MissingPodIdentity,
		margin:              cfg.Election.ClockSkewMargin.Duration,
		defaultLeaseSeconds: int32(cfg.Election.LeaseDuration.Duration / time.Second),
	}
	for i := range cfg.Guards {
		g := &cfg.Guards[i]
		cg := &guard{name: g.Name, enforcement: g.Enforcement, accountsAnywhere: map[string]bool{}, accounts: map[namespacedName]bool{}}
		cg.leaseNamespace, cg.leaseName = splitQualified(g.Lease)
		cg.multiCluster = g.LeaseKind == contract.LeaseKindMultiClusterLease
		if g.HolderFormat != "" {
			cg.holderFormat = lease.MustParseHolderFormat(g.HolderFormat) // validated by config.Load
		}
		for _, sa := range g.ServiceAccounts {
			if ns, name := splitQualified(sa); ns == "" {
				cg.accountsAnywhere[name] = true
			} else {
				cg.accounts[namespacedName{ns, name}] = true
			}
		}
		if len(g.Namespaces) > 0 {
			cg.namespaces = set(g.Namespaces)
		}
		for _, r := range g.Resources {
			var ops opMask
			for _, op := range r.Operations {
				ops |= opBits[op]
			}
			for _, resource := range r.Resources {
				key := groupResource{r.Group, resource}
				p.rules[key] = append(p.rules[key], rule{guard: cg, ops: ops, exclude: r.ExcludeSubresources})
			}
		}
	}
	return p
}

// gates reports whether the guard applies to requests from this service account. kube-system's are the
// control plane's controllers (the namespace controller, the garbage collector, ...): a guard gates one
// only by naming it, "kube-system/<name>".
func (g *guard) gates(saNamespace, saName string) bool {
	if saNamespace == metav1.NamespaceSystem {
		return g.accounts[namespacedName{saNamespace, saName}]
	}
	if len(g.accountsAnywhere) == 0 && len(g.accounts) == 0 {
		return true
	}
	return g.accountsAnywhere[saName] || g.accounts[namespacedName{saNamespace, saName}]
}

// namesPodOf says whether a holder that names requester's pod in format is that pod. A format with the
// pod's UID names one pod; one without it names every pod of that name in any namespace, so it counts
// only for pods of the lease's namespace (where a controller's pods elect, as client-go's and
// controller-runtime's do by default) or running as a service account the guard names with its namespace
// (a controller that keeps its lease elsewhere: cert-manager's in kube-system, say).
func (g *guard) namesPodOf(format *lease.HolderFormat, requester *Requester, leaseNamespace string) bool {
	if format.NamesUID() {
		return true
	}
	namespace, name, ok := requester.serviceAccount()
	return ok && (namespace == leaseNamespace || g.accounts[namespacedName{namespace, name}])
}

func splitQualified(s string) (namespace, name string) {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return ns, name
	}
	return "", s
}

func set(items []string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, item := range items {
		m[item] = true
	}
	return m
}
