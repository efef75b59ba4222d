// Package framework is the harness shared by leasegate's e2e suite, demo and failover benchmark: a real
// kube-apiserver and etcd, pods with real pod-bound service account tokens, and agents run as processes
// of the built binary. It is test code; the product never imports it.
package framework

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot is the leasegate checkout this file belongs to.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	env    *envtest.Environment
	Config *rest.Config // system:masters
	Client kubernetes.Interface
}

// StartControlPlane starts kube-apiserver and etcd through envtest, with the CRDs in crdDirs installed.
// The binaries come from KUBEBUILDER_ASSETS when the user sets it, otherwise from what
// `make controlplane` built into bin/ at the versions pinned in hack/versions.env.
func StartControlPlane(crdDirs ...string) (*ControlPlane, error) {
	return StartControlPlaneWithFlags(nil, crdDirs...)
}

// StartControlPlaneWithFlags is StartControlPlane with kube-apiserver flags (name without "--" -> value)
// set besides envtest's own.
func StartControlPlaneWithFlags(apiServerFlags map[string]string, crdDirs ...string) (*ControlPlane, error) {
	assets, err := controlPlaneAssets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: true}
	for name, value := range apiServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	config, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{env: env, Config: config, Client: client}, nil
}

// Address is the API server's host:port.
func (c *ControlPlane) Address() string {
	u, err := url.Parse(c.Config.Host)
	if err != nil || u.Host == "" {
		return c.Config.Host
	}
	return u.Host
}

// EtcdURL is the address of the API server's etcd (plain HTTP on loopback), for tests that want an etcd
// of their own to write to: they must keep to keys outside the API server's prefix (/registry).
func (c *ControlPlane) EtcdURL() string { return c.env.ControlPlane.Etcd.URL.String() }

// Stop stops the API server and etcd and removes their data.
func (c *ControlPlane) Stop() error { return c.env.Stop() }

// Metrics are the API server's own metrics.
func (c *ControlPlane) Metrics(ctx context.Context) (Metrics, error) {
	body, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(body)
}

// RSSBytes are the resident set sizes of the API server and etcd, which envtest starts as this process's
// children; zero for one not found.
func (c *ControlPlane) RSSBytes() (apiServer, etcd int64) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		data, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
		lparen, rparen := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
		fields := strings.Fields(string(data[rparen+1:]))
		if lparen < 0 || rparen < lparen || len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data[:lparen])))
		switch string(data[lparen+1 : rparen]) {
		case "kube-apiserver":
			apiServer, _ = RSSBytes(pid)
		case "etcd":
			etcd, _ = RSSBytes(pid)
		}
	}
	return apiServer, etcd
}

func controlPlaneAssets() (string, error) {
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
