package checkout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tools are the pinned helm and cert-manager that `make tools` builds into bin/tools.
type Tools struct {
	Helm string
	// CertManagerController and CertManagerCAInjector are cert-manager's binaries; CertManagerCRDs the
	// directory of its CRDs.
	CertManagerController, CertManagerCAInjector, CertManagerCRDs string
	// PrometheusOperatorCRDs is the directory of the ServiceMonitor, PodMonitor and PrometheusRule CRDs.
	PrometheusOperatorCRDs string
	// KubeVersion is the Kubernetes version charts are rendered for: the control plane's.
	KubeVersion string
}

// FindTools locates the pinned tools, or says how to build them.
func FindTools() (*Tools, error) {
	v, err := PinnedVersions()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(RepoRoot(), "bin", "tools")
	t := &Tools{
		Helm:                   filepath.Join(dir, "helm-"+v["HELM_VERSION"]),
		CertManagerController:  filepath.Join(dir, "cert-manager-"+v["CERT_MANAGER_BINARIES_VERSION"], "controller"),
		CertManagerCAInjector:  filepath.Join(dir, "cert-manager-"+v["CERT_MANAGER_BINARIES_VERSION"], "cainjector"),
		CertManagerCRDs:        filepath.Join(dir, "cert-manager-crds-"+v["CERT_MANAGER_CRDS_VERSION"]),
		PrometheusOperatorCRDs: filepath.Join(dir, "prometheus-operator-crds-"+v["PROMETHEUS_OPERATOR_VERSION"]),
		KubeVersion:            v["KUBERNETES_VERSION"],
	}
	for _, path := range []string{t.Helm, t.CertManagerController, t.CertManagerCAInjector, t.CertManagerCRDs, t.PrometheusOperatorCRDs} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s is missing: run `make tools`", path)
		}
	}
	return t, nil
}

// ChartDir is charts/leasegate.
func ChartDir() string { return filepath.Join(RepoRoot(), "charts", "leasegate") }

// RenderChart runs `helm template` on charts/leasegate, as a user's install in namespace would render it.
func (t *Tools) RenderChart(namespace string, valuesFiles ...string) ([]byte, error) {
	args := []string{"template", "leasegate", ChartDir(), "--namespace", namespace, "--kube-version", t.KubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	return t.RunHelm(args...)
}

// LintChart runs `helm lint --strict` with the values files.
func (t *Tools) LintChart(valuesFiles ...string) ([]byte, error) {
	args := []string{"lint", "--strict", ChartDir(), "--kube-version", t.KubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	return t.RunHelm(args...)
}

// InstallChart runs `helm install leasegate charts/leasegate --create-namespace` into namespace of the cluster kubeconfig
// points at, with the values in valuesFile: docs/install.md's Helm install.
func (t *Tools) InstallChart(kubeconfig, namespace, valuesFile string) ([]byte, error) {
	return t.RunHelm("install", "leasegate", ChartDir(), "--kubeconfig", kubeconfig, "--namespace", namespace, "--create-namespace", "--values", valuesFile)
}

// UpgradeChart runs `helm upgrade leasegate charts/leasegate` with the values in valuesFile.
func (t *Tools) UpgradeChart(kubeconfig, namespace, valuesFile string) ([]byte, error) {
	return t.RunHelm("upgrade", "leasegate", ChartDir(), "--kubeconfig", kubeconfig, "--namespace", namespace, "--values", valuesFile)
}

// RunHelm runs the pinned helm, away from the user's own configuration and caches.
func (t *Tools) RunHelm(args ...string) ([]byte, error) {
	cmd := exec.Command(t.Helm, args...)
	// Keep helm away from the user's own configuration and caches.
	home := os.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/helm-config", "HELM_CACHE_HOME="+home+"/helm-cache", "HELM_DATA_HOME="+home+"/helm-data")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if exit, ok := err.(*exec.ExitError); ok {
			stderr = strings.TrimSpace(string(exit.Stderr))
		}
		return out, fmt.Errorf("helm %s: %w: %s", args[0], err, stderr)
	}
	return out, nil
}
