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

// opBit is an admission operation's bit; 0 for any other string. A switch, not a map: it runs on every
// guarded write, and comparing a few short constants costs less than hashing the operation.
func opBit(operation string) opMask {
	switch operation {
	case "CREATE":
		return 1
	case "UPDATE":
		return 2
	case "DELETE":
		return 4
	case "CONNECT":
		return 8
	}
	return 0
}

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
	if req.Subresource == "" {
		return 0 // every implied write is a subresource's
	}
	for i := range ImpliedWrites {
		if w := &ImpliedWrites[i]; w.Subresource == req.Subresource && w.Resource == req.Resource && w.Group == req.Group && w.Sent == req.Operation {
			return opBit(w.Amounts)
		}
	}
	return 0
}

type groupResource struct{ group, resource string }

// namespacedName is a map key that needs no string concatenation, so lookups do not allocate.
type namespacedName struct{ namespace, name string }

// smallSet is the most entries a set or table keeps in a slice rather than a map. Comparing a string
// with a few others (unequal lengths fail at once) costs less than hashing it; configurations name a
// handful of exempt groups, accounts per guard and guarded resources, and larger ones fall back to maps.
const smallSet = 8

// set is a set of comparable values: a slice while small, a map beyond smallSet.
type set[T comparable] struct {
	small []T
	large map[T]struct{}
}

func newSet[T comparable](items []T) set[T] {
	var s set[T]
	for _, item := range items {
		s.add(item)
	}
	return s
}

func (s *set[T]) add(item T) {
	switch {
	case s.has(item):
	case s.large != nil:
		s.large[item] = struct{}{}
	case len(s.small) < smallSet:
		s.small = append(s.small, item)
	default:
		s.large = make(map[T]struct{}, 2*smallSet)
		for _, v := range s.small {
			s.large[v] = struct{}{}
		}
		s.large[item] = struct{}{}
		s.small = nil
	}
}

func (s *set[T]) has(item T) bool {
	if s.large != nil {
		_, ok := s.large[item]
		return ok
	}
	for _, v := range s.small {
		if v == item {
			return true
		}
	}
	return false
}

func (s *set[T]) empty() bool { return len(s.small) == 0 && len(s.large) == 0 }

// guard is a config.Guard compiled for matching.
type guard struct {
	name string
	// leaseNamespace is "" when the lease lives in the namespace of the request.
	leaseNamespace, leaseName string
	// serviceAccounts gated; all service accounts when both are empty (gatesAll).
	accountsAnywhere set[string]
	accounts         set[namespacedName]
	gatesAll         bool
	namespaces       *set[string] // nil: every namespace
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

// resourceRules are the rules of one guarded resource.
type resourceRules struct {
	groupResource
	rules []rule
}

// ruleTable finds the rules of a resource: a slice while few resources are guarded, a map beyond
// smallSet.
type ruleTable struct {
	small []resourceRules
	large map[groupResource][]rule
}

func (t *ruleTable) lookup(group, resource string) []rule {
	if t.large != nil {
		return t.large[groupResource{group, resource}]
	}
	for i := range t.small {
		if e := &t.small[i]; e.resource == resource && e.group == group {
			return e.rules
		}
	}
	return nil
}

// Policy is a configuration compiled for deciding: one lookup finds the guards of a resource, and
// deciding allocates nothing when the write passes.
type Policy struct {
	rules           ruleTable
	exemptUsers     set[string]
	exemptGroups    set[string]
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
		exemptUsers:         newSet(cfg.Exempt.Users),
		exemptGroups:        newSet(cfg.Exempt.Groups),
		missingIdentity:     cfg.MissingPodIdentity,
		margin:              cfg.Election.ClockSkewMargin.Duration,
		defaultLeaseSeconds: int32(cfg.Election.LeaseDuration.Duration / time.Second),
	}
	rules := map[groupResource][]rule{}
	var order []groupResource // the resources in the order the configuration names them
	for i := range cfg.Guards {
		g := &cfg.Guards[i]
		cg := &guard{name: g.Name, enforcement: g.Enforcement}
		cg.leaseNamespace, cg.leaseName = splitQualified(g.Lease)
		cg.multiCluster = g.LeaseKind == contract.LeaseKindMultiClusterLease
		if g.HolderFormat != "" {
			cg.holderFormat = lease.MustParseHolderFormat(g.HolderFormat) // validated by config.Load
		}
		for _, sa := range g.ServiceAccounts {
			if ns, name := splitQualified(sa); ns == "" {
				cg.accountsAnywhere.add(name)
			} else {
				cg.accounts.add(namespacedName{ns, name})
			}
		}
		cg.gatesAll = cg.accountsAnywhere.empty() && cg.accounts.empty()
		if len(g.Namespaces) > 0 {
			namespaces := newSet(g.Namespaces)
			cg.namespaces = &namespaces
		}
		for _, r := range g.Resources {
			var ops opMask
			for _, op := range r.Operations {
				ops |= opBit(op)
			}
			for _, resource := range r.Resources {
				key := groupResource{r.Group, resource}
				if _, seen := rules[key]; !seen {
					order = append(order, key)
				}
				rules[key] = append(rules[key], rule{guard: cg, ops: ops, exclude: r.ExcludeSubresources})
			}
		}
	}
	if len(order) > smallSet {
		p.rules.large = rules
	} else {
		for _, key := range order {
			p.rules.small = append(p.rules.small, resourceRules{key, rules[key]})
		}
	}
	return p
}

// gates reports whether the guard applies to requests from this service account. kube-system's are the
// control plane's controllers (the namespace controller, the garbage collector, ...): a guard gates one
// only by naming it, "kube-system/<name>".
func (g *guard) gates(saNamespace, saName string) bool {
	if saNamespace == metav1.NamespaceSystem {
		return g.accounts.has(namespacedName{saNamespace, saName})
	}
	if g.gatesAll {
		return true
	}
	return g.accountsAnywhere.has(saName) || g.accounts.has(namespacedName{saNamespace, saName})
}

// namesPodOf says whether a holder that names the requester's pod in format is that pod; the requester
// runs as service account saNamespace/saName. A format with the pod's UID names one pod; one without it
// names every pod of that name in any namespace, so it counts only for pods of the lease's namespace
// (where a controller's pods elect, as client-go's and controller-runtime's do by default) or running as a
// service account the guard names with its namespace (a controller that keeps its lease elsewhere:
// cert-manager's in kube-system, say).
func (g *guard) namesPodOf(format *lease.HolderFormat, saNamespace, saName, leaseNamespace string) bool {
	if format.NamesUID() {
		return true
	}
	return saNamespace == leaseNamespace || g.accounts.has(namespacedName{saNamespace, saName})
}

func splitQualified(s string) (namespace, name string) {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return ns, name
	}
	return "", s
}
