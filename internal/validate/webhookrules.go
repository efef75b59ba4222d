package validate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/leasegate/leasegate/internal/config"
)

// GuardedWebhook is the entry of the ValidatingWebhookConfiguration whose rules follow the guards.
const GuardedWebhook = "guarded.leasegate.io"

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
}

// SetupWithManager reapplies on every configuration change and on every edit of the webhook
// configuration (an upgrade by the installer, say). It runs on the elected leader.
func (s *RulesSyncer) SetupWithManager(mgr ctrl.Manager) error {
	changes := make(chan event.GenericEvent, 1)
	s.Store.OnChange(func(*config.Config) {
		select {
		case changes <- event.GenericEvent{Object: &admissionregistrationv1.ValidatingWebhookConfiguration{}}:
		default: // one pending reapply covers any number of changes
		}
	})
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

// Reconcile applies the rules for the configuration in force.
func (s *RulesSyncer) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	cfg := s.Store.Current()
	webhook := admissionregistrationv1ac.ValidatingWebhook().WithName(GuardedWebhook).
		WithRules(Rules(cfg)...).
		WithMatchConditions(MatchConditions(cfg, s.OwnNamespace)...)
	apply := admissionregistrationv1ac.ValidatingWebhookConfiguration(s.Name).WithWebhooks(webhook)
	if err := s.Client.Apply(ctx, apply, client.FieldOwner(rulesFieldOwner), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying the rules of %s in ValidatingWebhookConfiguration %s: %w", GuardedWebhook, s.Name, err)
	}
	return reconcile.Result{}, nil
}

// Rules are the admission rules that cover every guarded write: one per group and operation set, with
// the guards' resources merged and sorted so the result is stable.
func Rules(cfg *config.Config) []*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration {
	type key struct{ group, ops string }
	resources := map[key][]string{}
	for _, g := range cfg.Guards {
		for _, r := range g.Resources {
			ops := slices.Clone(r.Operations)
			slices.Sort(ops)
			k := key{r.Group, strings.Join(ops, ",")}
			resources[k] = append(resources[k], r.Resources...)
		}
	}
	keys := make([]key, 0, len(resources))
	for k := range resources {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.ops, b.ops)) })
	rules := make([]*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration, 0, len(keys))
	for _, k := range keys {
		res := resources[k]
		slices.Sort(res)
		res = slices.Compact(res)
		var ops []admissionregistrationv1.OperationType
		for _, op := range strings.Split(k.ops, ",") {
			ops = append(ops, admissionregistrationv1.OperationType(op))
		}
		rules = append(rules, admissionregistrationv1ac.RuleWithOperations().
			WithOperations(ops...).
			WithAPIGroups(k.group).
			WithAPIVersions("*").
			WithResources(res...).
			WithScope(admissionregistrationv1.AllScopes))
	}
	return rules
}

// MatchConditions keep everything but gated requesters away from the webhook: only service accounts
// are fenced, never leasegate's own, never exempt users and groups.
func MatchConditions(cfg *config.Config, ownNamespace string) []*admissionregistrationv1ac.MatchConditionApplyConfiguration {
	conditions := []*admissionregistrationv1ac.MatchConditionApplyConfiguration{
		admissionregistrationv1ac.MatchCondition().WithName("service-accounts").
			WithExpression(`request.userInfo.username.startsWith("` + saPrefix + `")`),
		admissionregistrationv1ac.MatchCondition().WithName("not-leasegate").
			WithExpression(`!request.userInfo.username.startsWith(` + strconv.Quote(saPrefix+ownNamespace+":") + `)`),
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

func celList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = strconv.Quote(item)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
