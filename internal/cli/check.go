package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
)

// Severities of a Finding: an error makes `check` exit non-zero.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Finding is one problem `check` found, with what to do about it.
type Finding struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	// Object is what the finding is about, as kind/namespace/name or kind/name.
	Object  string `json:"object"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
	// Docs is the code's section of docs/plugin.md: what it means and how to fix it, at length.
	Docs string `json:"docs"`
}

// DocsURL is docs/plugin.md, whose "### <code>" section each finding links to.
const DocsURL = "https://github.com/leasegate/leasegate/blob/main/docs/plugin.md"

// DocsFor is the link to code's section: GitHub's anchor of a "### LG001" heading is "lg001".
func DocsFor(code string) string { return DocsURL + "#" + strings.ToLower(code) }

// CheckReport is what `kubectl leasegate check` reports (-o json|yaml: apiVersion leasegate.io/v1alpha1,
// kind CheckReport).
type CheckReport struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	ObservedAt time.Time `json:"observedAt"`
	Findings   []Finding `json:"findings"`
	Errors     int       `json:"errors"`
	Warnings   int       `json:"warnings"`
}

// The findings' codes, each documented under its own heading in docs/plugin.md.
const (
	CodeWebhookConfigurationMissing = "LG001"
	CodeWebhookEntryMissing         = "LG002"
	CodeFailurePolicy               = "LG003"
	CodeCABundleInvalid             = "LG004"
	CodeCABundleExpiring            = "LG005"
	CodeWebhookUnreachable          = "LG006"
	CodeGuardedRulesStale           = "LG007"
	CodeConfigInvalid               = "LG008"
	CodeAgentTiming                 = "LG009"
	CodeNoNativeSidecars            = "LG010"
	CodeDisruptionBudgetBlocks      = "LG011"
	CodeConfigDeprecated            = "LG012"
	CodeAgentOlderThanWebhook       = "LG013"
)

// caExpiryWarning is how far ahead `check` warns of a CA bundle's expiry: cert-manager renews a month
// before by default, so a bundle this close to expiring is not being renewed.
const caExpiryWarning = 30 * 24 * time.Hour

// expectedEntries are leasegate's webhook entries and the failure policy the chart gives each by default.
var expectedEntries = []struct {
	mutating bool
	name     string
	policy   admissionregistrationv1.FailurePolicyType
}{
	{true, "pods.leasegate.io", admissionregistrationv1.Fail},
	{true, "labelled-pods.leasegate.io", admissionregistrationv1.Fail},
	{false, contract.GuardedWebhook, admissionregistrationv1.Fail},
	{false, "leases.leasegate.io", admissionregistrationv1.Ignore},
	{false, "evictions.leasegate.io", admissionregistrationv1.Fail},
	{false, "endpointslices.leasegate.io", admissionregistrationv1.Ignore},
	{false, "services.leasegate.io", admissionregistrationv1.Ignore},
	{false, "config.leasegate.io", admissionregistrationv1.Fail},
}

// CheckOptions say where leasegate is installed.
type CheckOptions struct {
	LeasegateNamespace, ConfigName, WebhookConfiguration string
	Now                                                  time.Time
}

// Check inspects the install and the elections in namespace ("" for all).
func Check(ctx context.Context, cs kubernetes.Interface, namespace string, opts CheckOptions) (*CheckReport, error) {
	r := &CheckReport{APIVersion: StatusAPIVersion, Kind: "CheckReport", ObservedAt: opts.Now.UTC(), Findings: []Finding{}}
	admission := cs.AdmissionregistrationV1()
	reinstall := "helm upgrade --install leasegate charts/leasegate -n " + opts.LeasegateNamespace + " (or --webhook-configuration if you renamed it)"
	var hooks []webhookEntry
	mutating, err := admission.MutatingWebhookConfigurations().Get(ctx, opts.WebhookConfiguration, metav1.GetOptions{})
	haveMutating := err == nil
	switch {
	case apierrors.IsNotFound(err):
		r.add(CodeWebhookConfigurationMissing, SeverityError, "MutatingWebhookConfiguration/"+opts.WebhookConfiguration,
			"pods are not injected: the mutating webhook configuration is missing",
			reinstall)
	case err != nil:
		return nil, err
	default:
		for _, w := range mutating.Webhooks {
			hooks = append(hooks, webhookEntry{true, w.Name, w.FailurePolicy, w.ClientConfig, nil})
		}
	}
	validating, err := admission.ValidatingWebhookConfigurations().Get(ctx, opts.WebhookConfiguration, metav1.GetOptions{})
	haveValidating := err == nil
	webhookVersion := ""
	switch {
	case apierrors.IsNotFound(err):
		r.add(CodeWebhookConfigurationMissing, SeverityError, "ValidatingWebhookConfiguration/"+opts.WebhookConfiguration,
			"nothing is fenced: the validating webhook configuration is missing",
			reinstall)
	case err != nil:
		return nil, err
	default:
		webhookVersion = validating.Annotations[contract.WebhookVersion]
		for _, w := range validating.Webhooks {
			hooks = append(hooks, webhookEntry{false, w.Name, w.FailurePolicy, w.ClientConfig, w.Rules})
		}
	}
	r.checkEntries(hooks, haveMutating, haveValidating)
	reached := map[string]bool{}
	for _, h := range hooks {
		r.checkCABundle(h, opts.Now)
		if key := clientKey(h.client); !reached[key] {
			reached[key] = true
			r.checkReachable(ctx, cs, h)
		}
	}

	cfg := r.checkConfig(ctx, cs, opts)
	if cfg != nil && haveValidating {
		r.checkGuardedRules(cfg, hooks, opts.WebhookConfiguration)
	}
	if err := r.checkAgents(ctx, cs, namespace, webhookVersion); err != nil {
		return nil, err
	}
	r.checkNativeSidecars(cfg)
	if err := r.checkDisruptionBudgets(ctx, cs, namespace); err != nil {
		return nil, err
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return strings.Compare(a.Severity, b.Severity) // "error" < "warning"
	})
	return r, nil
}

type webhookEntry struct {
	mutating bool
	name     string
	policy   *admissionregistrationv1.FailurePolicyType
	client   admissionregistrationv1.WebhookClientConfig
	rules    []admissionregistrationv1.RuleWithOperations
}

func (r *CheckReport) add(code, severity, object, message, fix string) {
	r.Findings = append(r.Findings, Finding{Code: code, Severity: severity, Object: object, Message: message, Fix: fix, Docs: DocsFor(code)})
	if severity == SeverityError {
		r.Errors++
	} else {
		r.Warnings++
	}
}

func entryObject(h webhookEntry) string {
	if h.mutating {
		return "MutatingWebhookConfiguration entry " + h.name
	}
	return "ValidatingWebhookConfiguration entry " + h.name
}

// checkEntries finds missing entries and failure policies other than the chart's.
func (r *CheckReport) checkEntries(hooks []webhookEntry, haveMutating, haveValidating bool) {
	for _, want := range expectedEntries {
		if want.mutating && !haveMutating || !want.mutating && !haveValidating {
			continue // the whole configuration is missing: reported once
		}
		i := slices.IndexFunc(hooks, func(h webhookEntry) bool { return h.mutating == want.mutating && h.name == want.name })
		if i < 0 {
			r.add(CodeWebhookEntryMissing, SeverityError, entryObject(webhookEntry{mutating: want.mutating, name: want.name}),
				"the entry is missing from the webhook configuration", "reinstall the chart: helm upgrade leasegate charts/leasegate (hand edits are undone by it)")
			continue
		}
		if got := hooks[i].policy; got == nil || *got != want.policy {
			policy := "<unset>"
			if got != nil {
				policy = string(*got)
			}
			why := "writes pass unchecked while the webhook is down"
			if want.policy == admissionregistrationv1.Ignore {
				why = "every Lease write waits on the webhook, so an outage stops elections"
			}
			r.add(CodeFailurePolicy, SeverityWarning, entryObject(hooks[i]),
				fmt.Sprintf("failurePolicy is %s, not %s: %s", policy, want.policy, why),
				"set webhook.failurePolicy in the chart's values back to the default, unless you chose this")
		}
	}
}

// checkCABundle finds a caBundle that is empty, unreadable, expired or about to expire.
func (r *CheckReport) checkCABundle(h webhookEntry, now time.Time) {
	certs, err := parseCertificates(h.client.CABundle)
	switch {
	case len(h.client.CABundle) == 0:
		r.add(CodeCABundleInvalid, SeverityError, entryObject(h), "caBundle is empty: the API server cannot trust the webhook, and every call fails",
			"check that cert-manager's cainjector runs and that the configuration keeps its cert-manager.io/inject-ca-from annotation")
		return
	case err != nil:
		r.add(CodeCABundleInvalid, SeverityError, entryObject(h), "caBundle holds no valid PEM certificate: "+err.Error(),
			"let cert-manager's cainjector rewrite it (kubectl annotate ... cert-manager.io/inject-ca-from=<namespace>/<certificate> --overwrite)")
		return
	}
	for _, c := range certs {
		switch left := c.NotAfter.Sub(now); {
		case left <= 0:
			r.add(CodeCABundleInvalid, SeverityError, entryObject(h),
				fmt.Sprintf("the CA %q in caBundle expired at %s: every call fails TLS", c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339)),
				"renew the CA certificate (cmctl renew, or delete its Secret so cert-manager issues a new one)")
		case left < caExpiryWarning:
			r.add(CodeCABundleExpiring, SeverityWarning, entryObject(h),
				fmt.Sprintf("the CA %q in caBundle expires in %s (%s)", c.Subject.CommonName, left.Round(time.Hour), c.NotAfter.UTC().Format(time.RFC3339)),
				"check that cert-manager renews it: kubectl get certificate -n <namespace>")
		}
	}
}

func parseCertificates(bundle []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no CERTIFICATE block")
	}
	return certs, nil
}

func clientKey(c admissionregistrationv1.WebhookClientConfig) string {
	if c.Service != nil {
		return c.Service.Namespace + "/" + c.Service.Name
	}
	if c.URL != nil {
		return *c.URL
	}
	return ""
}

// checkReachable asks whether the webhook can answer: a Service must have ready endpoints; a URL must
// answer HTTPS with a certificate caBundle trusts.
func (r *CheckReport) checkReachable(ctx context.Context, cs kubernetes.Interface, h webhookEntry) {
	switch {
	case h.client.Service != nil:
		svc := h.client.Service
		endpoints, err := cs.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name,
		})
		if err != nil {
			r.add(CodeWebhookUnreachable, SeverityError, "Service/"+svc.Namespace+"/"+svc.Name, "cannot list its endpoints: "+err.Error(), "check your access (kubectl auth can-i list endpointslices)")
			return
		}
		for _, s := range endpoints.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					return
				}
			}
		}
		r.add(CodeWebhookUnreachable, SeverityError, "Service/"+svc.Namespace+"/"+svc.Name,
			"no ready endpoint: every pod creation in opted-in namespaces and every guarded write fails (failurePolicy Fail)",
			"kubectl -n "+svc.Namespace+" get pods -l app.kubernetes.io/name=leasegate-webhook; kubectl -n "+svc.Namespace+" logs deploy/leasegate-webhook")
	case h.client.URL != nil:
		if err := probeURL(ctx, *h.client.URL, h.client.CABundle); err != nil {
			r.add(CodeWebhookUnreachable, SeverityError, entryObject(h), "the webhook at "+*h.client.URL+" does not answer: "+err.Error(),
				"start leasegate-webhook there, or fix the URL and caBundle")
		}
	}
}

// probeURL sends a GET over TLS, trusting only caBundle: any HTTP answer proves the server is up and
// presents a certificate the API server would trust.
func probeURL(ctx context.Context, url string, caBundle []byte) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caBundle)
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// checkConfig loads leasegate-config as the webhook would.
func (r *CheckReport) checkConfig(ctx context.Context, cs kubernetes.Interface, opts CheckOptions) *config.Config {
	cfg, err := loadConfig(ctx, cs, opts.LeasegateNamespace, opts.ConfigName)
	if err != nil {
		r.add(CodeConfigInvalid, SeverityError, "ConfigMap/"+opts.LeasegateNamespace+"/"+opts.ConfigName, err.Error(),
			"fix the field named; the webhook keeps the last valid configuration in force until then")
		return nil
	}
	for _, warning := range cfg.Warnings {
		r.add(CodeConfigDeprecated, SeverityWarning, "ConfigMap/"+opts.LeasegateNamespace+"/"+opts.ConfigName, warning,
			"edit leasegate-config as the warning says; it applies as it is until then")
	}
	return cfg
}

// checkGuardedRules compares guarded.leasegate.io's rules with what the guards need.
func (r *CheckReport) checkGuardedRules(cfg *config.Config, hooks []webhookEntry, name string) {
	i := slices.IndexFunc(hooks, func(h webhookEntry) bool { return !h.mutating && h.name == contract.GuardedWebhook })
	if i < 0 {
		return
	}
	covered := map[string]bool{}
	for _, rule := range hooks[i].rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, op := range rule.Operations {
					covered[g+"|"+res+"|"+string(op)] = true
				}
			}
		}
	}
	var missing []string
	for _, g := range cfg.Guards {
		for _, res := range g.Resources {
			for _, resource := range res.Resources {
				var ops []string
				for _, op := range res.Operations {
					if !covered[res.Group+"|"+resource+"|"+op] && !covered["*|"+resource+"|"+op] && !covered[res.Group+"|*|"+op] && !covered[res.Group+"|"+resource+"|*"] {
						ops = append(ops, op)
					}
				}
				if len(ops) > 0 {
					missing = append(missing, fmt.Sprintf("%s %s (guard %s)", strings.Join(ops, "/"), groupResource(res.Group, resource), g.Name))
				}
			}
		}
	}
	if len(missing) > 0 {
		r.add(CodeGuardedRulesStale, SeverityError, "ValidatingWebhookConfiguration/"+name,
			"the guarded entry's rules do not send these writes to the fence, so they pass unchecked: "+strings.Join(missing, ", "),
			"leasegate-webhook's elected replica restores the rules within seconds; if they stay stale, read its logs (RulesSyncer) and check it may patch the configuration")
	}
}

func groupResource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// checkAgents finds injected pods whose agent timing breaks retry < renew deadline < lease duration
// (injected before a rule was enforced, or edited by hand): such an agent refuses to start; and
// workloads whose agents are older than the webhook (olderAgents).
func (r *CheckReport) checkAgents(ctx context.Context, cs kubernetes.Interface, namespace, webhookVersion string) error {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: contract.Injected + "=true"})
	if err != nil {
		return fmt.Errorf("listing injected pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		for _, e := range agentElections(pod) {
			if err := e.Timing().Validate(); err != nil {
				r.add(CodeAgentTiming, SeverityError, "Pod/"+pod.Namespace+"/"+pod.Name, "its agent's timing breaks the rules: "+err.Error(),
					"fix the pod template's leasegate.io/ timing annotations (or takeover) and roll the workload")
			}
		}
	}
	for _, f := range olderAgents(pods.Items, webhookVersion) {
		r.add(f.Code, f.Severity, f.Object, f.Message, f.Fix)
	}
	return nil
}

// checkNativeSidecars warns when leasegate-config keeps agents from being native sidecars, so start:
// leader and on-loss: restart are refused. Every supported Kubernetes (1.30+) has them.
func (r *CheckReport) checkNativeSidecars(cfg *config.Config) {
	if cfg != nil && cfg.Agent.NativeSidecar == config.NativeSidecarNever {
		r.add(CodeNoNativeSidecars, SeverityWarning, "leasegate-config agent.nativeSidecar",
			"agent.nativeSidecar is never: agents run as regular containers, and start: leader and on-loss: restart are refused",
			"set agent.nativeSidecar: auto in leasegate-config")
	}
}

// checkDisruptionBudgets warns of PodDisruptionBudgets that allow no disruption over pods that elect:
// draining the leader's node (a planned handover by eviction) waits on them.
func (r *CheckReport) checkDisruptionBudgets(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	pdbs, err := cs.PolicyV1().PodDisruptionBudgets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	for _, pdb := range pdbs.Items {
		if pdb.Status.DisruptionsAllowed > 0 || pdb.Spec.Selector == nil {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		req, _ := k8slabels.NewRequirement(contract.Injected, "=", []string{"true"})
		pods, err := cs.CoreV1().Pods(pdb.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.Add(*req).String()})
		if err != nil {
			return fmt.Errorf("listing the pods of PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
		}
		if len(pods.Items) == 0 {
			continue
		}
		r.add(CodeDisruptionBudgetBlocks, SeverityWarning, "PodDisruptionBudget/"+pdb.Namespace+"/"+pdb.Name,
			fmt.Sprintf("it allows no disruption over %d pod(s) that elect (%s): evicting the leader, as kubectl drain does, waits until it does", len(pods.Items), pods.Items[0].Name),
			"allow one disruption (maxUnavailable: 1): a follower takes over within the takeover budget")
	}
	return nil
}

// RenderCheck writes report in format: a table (wide is the same), JSON or YAML.
func RenderCheck(w io.Writer, report *CheckReport, format string) error {
	switch format {
	case OutputJSON, OutputYAML:
		return renderDocument(w, report, format)
	case OutputTable, OutputWide:
		if len(report.Findings) == 0 {
			_, err := fmt.Fprintln(w, "No problems found.")
			return err
		}
		t := newTable(w)
		fmt.Fprintln(t, "SEVERITY\tCODE\tOBJECT\tMESSAGE\tFIX\tDOCS")
		for _, f := range report.Findings {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Code, f.Object, f.Message, f.Fix, f.Docs)
		}
		if err := t.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "%d error(s), %d warning(s)\n", report.Errors, report.Warnings)
		return err
	}
	return fmt.Errorf("unknown output format %q: use one of %s", format, strings.Join(Outputs, ", "))
}
