package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/inject"
)

// The findings only check --pre reports (it reports LG008 and LG010 too). They are numbered apart from
// the install's findings, which keep growing from LG001.
const (
	CodeServerTooOld       = "LG101"
	CodeCertManagerMissing = "LG102"
	CodeWouldBeRefused     = "LG103"
)

// MinKubernetesVersion is the chart's kubeVersion (>=1.30.0-0): helm refuses to install on an older
// server. A test holds the two together.
const MinKubernetesVersion = "1.30.0"

// certManagerGroupVersion serves the Issuer and Certificate the chart creates by default.
const certManagerGroupVersion = "cert-manager.io/v1"

// PreCheck inspects a cluster before leasegate is installed: whether the chart installs on its server
// version (every version it accepts runs agents as native sidecars), whether leasegate-config keeps them
// from being ones, whether cert-manager serves what the chart's default
// certificates need, and which running pods in namespace ("" for all) the webhook would refuse when they
// are created again. A leasegate-config already in place is loaded as the webhook would.
func PreCheck(ctx context.Context, cs kubernetes.Interface, namespace string, opts CheckOptions) (*CheckReport, error) {
	r := &CheckReport{APIVersion: StatusAPIVersion, Kind: "CheckReport", ObservedAt: opts.Now.UTC(), Findings: []Finding{}}
	dc := cs.Discovery()
	server, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("asking the API server its version: %w", err)
	}
	r.checkServerVersion(server.GitVersion)
	cfg := r.checkConfig(ctx, cs, opts)
	r.checkNativeSidecars(cfg)
	resources, err := dc.ServerResourcesForGroupVersion(certManagerGroupVersion)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("asking the API server whether it serves %s: %w", certManagerGroupVersion, err)
	case err != nil || !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "certificates" }) ||
		!slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "issuers" }):
		r.add(CodeCertManagerMissing, SeverityError, "APIGroup/cert-manager.io",
			"cert-manager is not installed: the chart's default serving certificate is a cert-manager Certificate, so helm install fails",
			"install cert-manager first (helm install cert-manager jetstack/cert-manager -n cert-manager --create-namespace --set crds.enabled=true), or install leasegate with certificates.certManager.enabled=false and certificates.existingSecret and certificates.caBundle")
	}
	if cfg == nil {
		cfg = config.DefaultConfig()
	}
	if err := r.checkRefusals(ctx, cs, namespace, cfg, opts.LeasegateNamespace); err != nil {
		return nil, err
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return strings.Compare(a.Severity, b.Severity) // "error" < "warning"
	})
	return r, nil
}

// checkServerVersion compares the server's version with the chart's kubeVersion.
func (r *CheckReport) checkServerVersion(gitVersion string) {
	v, err := utilversion.ParseGeneric(gitVersion)
	if err != nil {
		r.add(CodeServerTooOld, SeverityWarning, "kube-apiserver",
			fmt.Sprintf("its version %q is not a version the chart's kubeVersion >=%s can be judged against", gitVersion, MinKubernetesVersion),
			"check the server's version by hand: kubectl version")
		return
	}
	if v.LessThan(utilversion.MustParseGeneric(MinKubernetesVersion)) {
		r.add(CodeServerTooOld, SeverityError, "kube-apiserver",
			fmt.Sprintf("it is %s: the chart needs Kubernetes %s or later (its kubeVersion), so helm install refuses", gitVersion, MinKubernetesVersion),
			"upgrade the cluster to Kubernetes "+MinKubernetesVersion+" or later")
	}
}

// checkRefusals runs the injection webhook's decision over the running pods that opted in: a pod it would
// refuse runs until it is next created (a rollout, a restart, a reschedule), which then fails.
func (r *CheckReport) checkRefusals(ctx context.Context, cs kubernetes.Interface, namespace string, cfg *config.Config, ownNamespace string) error {
	caps, err := inject.DiscoverCapabilities(cs.Discovery())
	if err != nil {
		return err
	}
	namespaces := map[string]map[string]string{}
	if namespace == "" {
		list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing namespaces: %w", err)
		}
		for _, ns := range list.Items {
			namespaces[ns.Name] = ns.Labels
		}
	} else {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading namespace %s: %w", namespace, err)
		}
		namespaces[ns.Name] = ns.Labels
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	opts := inject.Options{Config: cfg, Caps: caps, OwnNamespace: ownNamespace}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if message, refused := WouldRefuse(pod, inject.Namespace{Name: pod.Namespace, Labels: namespaces[pod.Namespace]}, opts); refused {
			r.add(CodeWouldBeRefused, SeverityError, "Pod/"+pod.Namespace+"/"+pod.Name,
				"the webhook would refuse this pod when it is created again (a rollout, a restart, a reschedule): "+message,
				"fix what the message names in the pod's template, or opt the pod out (label leasegate.io/inject=disabled)")
		}
	}
	return nil
}

// WouldRefuse is the injection webhook's decision on a pod created as it runs now; a pod that already
// has an agent was decided before.
func WouldRefuse(pod *corev1.Pod, ns inject.Namespace, opts inject.Options) (string, bool) {
	if inject.AgentOf(pod) != nil {
		return "", false
	}
	if _, err := inject.Inject(pod, ns, opts); err != nil {
		return err.Error(), true
	}
	return "", false
}

// WaitForCheck runs check until it finds no error, or timeout passes: then it returns the last report
// (whose errors make the command exit 1). Each round that still finds errors says so on progress.
func WaitForCheck(ctx context.Context, check func(context.Context) (*CheckReport, error), timeout, interval time.Duration, progress io.Writer) (*CheckReport, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last *CheckReport
	for {
		report, err := check(ctx)
		switch {
		case err == nil:
			last = report
			if report.Errors == 0 {
				return report, nil
			}
			fmt.Fprintf(progress, "kubectl leasegate: %d error(s) left (%s); checking again in %s\n", report.Errors, errorCodes(report), interval)
		case ctx.Err() == nil:
			// A failed round (the API server restarting, say) is waited out like a finding.
			fmt.Fprintf(progress, "kubectl leasegate: %v; checking again in %s\n", err, interval)
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return nil, fmt.Errorf("no check completed within --timeout %s: %w", timeout, err)
			}
			fmt.Fprintf(progress, "kubectl leasegate: errors left after --timeout %s\n", timeout)
			return last, nil
		case <-ticker.C:
		}
	}
}

// errorCodes lists a report's error codes, each once.
func errorCodes(report *CheckReport) string {
	var codes []string
	for _, f := range report.Findings {
		if f.Severity == SeverityError && !slices.Contains(codes, f.Code) {
			codes = append(codes, f.Code)
		}
	}
	return strings.Join(codes, ", ")
}
