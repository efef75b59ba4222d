// Package checkout is what the suites and programs find in this leasegate checkout: its root, the versions
// hack/versions.env pins and the control plane and tools `make` builds at them, binaries built from its
// packages (or from an earlier commit's, exported from git), the chart and the monitoring it ships. It
// starts nothing.
package checkout

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// RepoRoot is the leasegate checkout this file belongs to.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// ControlPlaneAssets is the directory of the kube-apiserver and etcd the suites run: $KUBEBUILDER_ASSETS
// when the user sets it, otherwise the one `make controlplane` builds at the pinned versions.
func ControlPlaneAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	versions, err := PinnedVersions()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(RepoRoot(), "bin", "controlplane", versions["KUBERNETES_VERSION"]+"-"+versions["ETCD_VERSION"])
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("no kube-apiserver in %s: run `make controlplane` (or set KUBEBUILDER_ASSETS)", dir)
	}
	return dir, nil
}

// PinnedVersions reads hack/versions.env, the one place versions are pinned. KUBE_VERSION=1.30 in the
// environment selects another supported minor (KUBERNETES_VERSION_1_30) as KUBERNETES_VERSION, as make
// and the hack/ scripts do.
func PinnedVersions() (map[string]string, error) {
	f, err := os.Open(filepath.Join(RepoRoot(), "hack", "versions.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	versions := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if key, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			versions[key] = value
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if minor := os.Getenv("KUBE_VERSION"); minor != "" {
		selected, ok := versions["KUBERNETES_VERSION_"+strings.ReplaceAll(minor, ".", "_")]
		if !ok {
			var supported []string
			for key := range versions {
				if rest, ok := strings.CutPrefix(key, "KUBERNETES_VERSION_"); ok {
					supported = append(supported, strings.ReplaceAll(rest, "_", "."))
				}
			}
			slices.Sort(supported)
			return nil, fmt.Errorf("KUBE_VERSION=%s is not a supported minor: set it to one of %s (hack/versions.env)", minor, strings.Join(supported, ", "))
		}
		versions["KUBERNETES_VERSION"] = selected
	}
	return versions, nil
}
