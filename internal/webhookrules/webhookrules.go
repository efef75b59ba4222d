// Package webhookrules keeps the rules and matchConditions of the fence's ValidatingWebhookConfiguration
// entry (guarded.leasegate.io) in step with the guards, so the API server sends internal/validate exactly
// the guarded writes of gated requesters and no other write ever waits for leasegate.
package webhookrules

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/leasegate/leasegate/internal/apiresources"
	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/validate"
)

// serviceAccountPrefix begins the username of every service account.
const serviceAccountPrefix = "system:serviceaccount:"

// rulesFieldOwner is the server-side apply field manager of those rules. The installer owns the rest of
// the entry, and cert-manager's CA injector owns caBundle: neither is ever touched here.
const rulesFieldOwner = "leasegate-webhook"

// RulesSyncer keeps the rules and matchConditions of the guarded entry in step with the guards: the API
// server then sends only guarded writes from gated requesters, and every other write never waits for
// leasegate.
type RulesSyncer struct {
	Client       client.Client
	Store        *config.Store
	Name         string // the ValidatingWebhookConfiguration, --webhook-configuration
	OwnNamespace string
	// APIs is read again before every apply: which subresources the guarded resources serve.
	APIs *apiresources.Discoverer
	// Version is this webhook's release, applied as the configuration's leasegate.io/webhook-version
	// annotation: what kubectl leasegate check compares injected pods' agents with.
	Version string
}

// SetupWithManager reapplies on every configuration change, on every change of the APIs the server
// serves (a CustomResourceDefinition installed or given a subresource), and on every edit of the webhook
// configuration (an upgrade by the installer, say). It runs on the elected leader.
func (s *RulesSyncer) SetupWithManager(mgr ctrl.Manager) error {
	changes := make(chan event.GenericEvent, 1)
	trigger := func() {
		select {
		case changes <- event.GenericEvent{Object: &admissionregistrationv1.ValidatingWebhookConfiguration{}}:
		default: // one pending reapply covers any number of changes
		}
	}
	s.Store.OnChange(func(*config.Config) { trigger() })
	s.APIs.OnChange(trigger)
	always := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: s.Name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("guarded-webhook-rules").
		For(&admissionregistrationv1.ValidatingWebhookConfiguration{}, builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == s.Name }))).
		WatchesRawSource(source.Channel(changes, always)).
		Complete(s)
}

// Reconcile discovers the guarded resources' subresources and applies the rules for the configuration in
// force. When discovery fails it still applies, with what it knows: a resource it cannot enumerate gets all
// its subresources, so the rules never cover less than the guards.
func (s *RulesSyncer) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	api, discoveryErr := s.APIs.Refresh(ctx)
	cfg := s.Store.Current()
	webhook := admissionregistrationv1ac.ValidatingWebhook().WithName(contract.GuardedWebhook).
		WithRules(Rules(cfg, api)...).
		WithMatchConditions(MatchConditions(cfg, s.OwnNamespace)...)
	apply := admissionregistrationv1ac.ValidatingWebhookConfiguration(s.Name).WithWebhooks(webhook).
		WithAnnotations(map[string]string{contract.WebhookVersion: s.Version})
	if err := s.Client.Apply(ctx, apply, client.FieldOwner(rulesFieldOwner), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying the rules of %s in ValidatingWebhookConfiguration %s: %w", contract.GuardedWebhook, s.Name, err)
	}
	return reconcile.Result{}, discoveryErr
}

// Rules are the admission rules that cover every guarded write: one per group and operation set, with
// the guards' resources merged and sorted so the result is stable, scoped to namespaced objects as the
// decision is. A resource comes with its subresources: all of them ("deployments/*") unless the entry
// excludes some, and then those api says it serves with a write verb, less the excluded. A resource api
// does not know (not installed yet) gets all of them until it does.
func Rules(cfg *config.Config, api *apiresources.Index) []*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration {
	type key struct{ group, ops string }
	resources := map[key]map[string]bool{}
	for _, g := range cfg.Guards {
		for _, r := range g.Resources {
			ops := slices.Clone(r.Operations)
			slices.Sort(ops)
			k := key{r.Group, strings.Join(slices.Compact(ops), ",")}
			if resources[k] == nil {
				resources[k] = map[string]bool{}
			}
			for _, name := range r.Resources {
				resources[k][name] = true
				served, known := api.Lookup(r.Group, name)
				for _, w := range validate.ImpliedWrites {
					if w.Group == r.Group && w.Resource == name && slices.Contains(r.Operations, w.Amounts) &&
						!slices.Contains(r.Operations, w.Sent) && !slices.Contains(r.ExcludeSubresources, w.Subresource) &&
						(!known || slices.Contains(served.Subresources, w.Subresource)) {
						// Sent with its own operation; judged as what it does (validate.ImpliedWrites).
						implied := key{r.Group, w.Sent}
						if resources[implied] == nil {
							resources[implied] = map[string]bool{}
						}
						resources[implied][name+"/"+w.Subresource] = true
					}
				}
				if len(r.ExcludeSubresources) == 0 || !known {
					resources[k][name+"/*"] = true
					continue
				}
				for _, sub := range served.Subresources {
					if !slices.Contains(r.ExcludeSubresources, sub) {
						resources[k][name+"/"+sub] = true
					}
				}
			}
		}
	}
	keys := make([]key, 0, len(resources))
	for k := range resources {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.ops, b.ops)) })
	rules := make([]*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration, 0, len(keys))
	for _, k := range keys {
		var res []string
		for name := range resources[k] {
			// The API server refuses "deployments/scale" beside "deployments/*", which covers it.
			if parent, sub, isSub := strings.Cut(name, "/"); isSub && sub != "*" && resources[k][parent+"/*"] {
				continue
			}
			res = append(res, name)
		}
		slices.Sort(res)
		var ops []admissionregistrationv1.OperationType
		for _, op := range strings.Split(k.ops, ",") {
			ops = append(ops, admissionregistrationv1.OperationType(op))
		}
		rules = append(rules, admissionregistrationv1ac.RuleWithOperations().
			WithOperations(ops...).
			WithAPIGroups(k.group).
			WithAPIVersions("*").
			WithResources(res...).
			WithScope(admissionregistrationv1.NamespacedScope))
	}
	return rules
}

// MatchConditions keep everything but gated requesters away from the webhook: only service accounts
// are fenced, never leasegate's own, never exempt users and groups, and never the control plane. Nodes
// (system:node:*), kube-controller-manager, kube-scheduler and kube-apiserver are users, not service
// accounts; the controllers kube-controller-manager runs as kube-system's service accounts pass unless a
// guard names one ("kube-system/<name>"), as in the decision (guard.gates).
func MatchConditions(cfg *config.Config, ownNamespace string) []*admissionregistrationv1ac.MatchConditionApplyConfiguration {
	controlPlane := `!request.userInfo.username.startsWith(` + strconv.Quote(serviceAccountPrefix+metav1.NamespaceSystem+":") + `)`
	if named := namedSystemAccounts(cfg); len(named) > 0 {
		controlPlane += ` || request.userInfo.username in ` + celList(named)
	}
	conditions := []*admissionregistrationv1ac.MatchConditionApplyConfiguration{
		admissionregistrationv1ac.MatchCondition().WithName("service-accounts").
			WithExpression(`request.userInfo.username.startsWith("` + serviceAccountPrefix + `")`),
		admissionregistrationv1ac.MatchCondition().WithName("not-leasegate").
			WithExpression(`!request.userInfo.username.startsWith(` + strconv.Quote(serviceAccountPrefix+ownNamespace+":") + `)`),
		admissionregistrationv1ac.MatchCondition().WithName("not-control-plane").WithExpression(controlPlane),
	}
	if len(cfg.Exempt.Users) > 0 {
		conditions = append(conditions, admissionregistrationv1ac.MatchCondition().WithName("not-exempt-users").
			WithExpression(`!(request.userInfo.username in `+celList(cfg.Exempt.Users)+`)`))
	}
	if len(cfg.Exempt.Groups) > 0 {
		conditions = append(conditions, admissionregistrationv1ac.MatchCondition().WithName("not-exempt-groups").
			WithExpression(`!request.userInfo.groups.exists(g, g in `+celList(cfg.Exempt.Groups)+`)`))
	}
	return conditions
}

// namedSystemAccounts are the usernames of the kube-system service accounts guards name, sorted.
func namedSystemAccounts(cfg *config.Config) []string {
	var names []string
	for _, g := range cfg.Guards {
		for _, sa := range g.ServiceAccounts {
			if namespace, name, _ := strings.Cut(sa, "/"); namespace == metav1.NamespaceSystem {
				names = append(names, serviceAccountPrefix+namespace+":"+name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func celList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = strconv.Quote(item)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
