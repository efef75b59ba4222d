package cluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestConfigTemplates renders each config template with sample values and reads the result back as
// containerd, the CNI plugins and kubelet will.
func TestConfigTemplates(t *testing.T) {
	sample := nodeConfig{
		Root:        "/tmp/node dir/containerd/root",
		State:       "/tmp/node dir/containerd/state",
		Socket:      "/tmp/node dir/containerd.sock",
		PauseImage:  "registry.k8s.io/pause:3.10",
		CNIConfDir:  "/tmp/node dir/cni",
		Bridge:      "lc9",
		PodCIDR:     "10.1.0.0/16",
		Gateway:     "10.1.0.1",
		ServiceCIDR: "10.2.0.0/16",
		IPAMDir:     "/tmp/node dir/cni-ipam",
		PodLogsDir:  "/tmp/node dir/pod-logs",
		Address:     "10.1.0.254",
	}
	for _, tc := range []struct {
		name, template string
		check          func(t *testing.T, rendered []byte)
	}{
		{
			name:     "conflist is JSON with the bridge, its subnet, gateway, service route and IPAM directory",
			template: "10-leasegate.conflist",
			check: func(t *testing.T, rendered []byte) {
				var conflist struct {
					Plugins []struct {
						Bridge string `json:"bridge"`
						IPAM   struct {
							Ranges  [][]struct{ Subnet, Gateway string } `json:"ranges"`
							Routes  []struct{ Dst string }               `json:"routes"`
							DataDir string                               `json:"dataDir"`
						} `json:"ipam"`
					} `json:"plugins"`
				}
				if err := json.Unmarshal(rendered, &conflist); err != nil {
					t.Fatalf("not JSON: %v\n%s", err, rendered)
				}
				if len(conflist.Plugins) != 1 || len(conflist.Plugins[0].IPAM.Ranges) != 1 ||
					len(conflist.Plugins[0].IPAM.Ranges[0]) != 1 || len(conflist.Plugins[0].IPAM.Routes) != 1 {
					t.Fatalf("want one bridge plugin with one range and one route:\n%s", rendered)
				}
				plugin := conflist.Plugins[0]
				r := plugin.IPAM.Ranges[0][0]
				if plugin.Bridge != sample.Bridge || r.Subnet != sample.PodCIDR || r.Gateway != sample.Gateway ||
					plugin.IPAM.Routes[0].Dst != sample.ServiceCIDR || plugin.IPAM.DataDir != sample.IPAMDir {
					t.Errorf("bridge %q, subnet %q, gateway %q, route %q, dataDir %q; want %q, %q, %q, %q, %q",
						plugin.Bridge, r.Subnet, r.Gateway, plugin.IPAM.Routes[0].Dst, plugin.IPAM.DataDir,
						sample.Bridge, sample.PodCIDR, sample.Gateway, sample.ServiceCIDR, sample.IPAMDir)
				}
			},
		},
		{
			name:     "kubelet.yaml is YAML with the containerd socket and evicting only on a nearly full disk",
			template: "kubelet.yaml",
			check: func(t *testing.T, rendered []byte) {
				var kubelet struct {
					ContainerRuntimeEndpoint string            `json:"containerRuntimeEndpoint"`
					PodLogsDir               string            `json:"podLogsDir"`
					Address                  string            `json:"address"`
					EvictionHard             map[string]string `json:"evictionHard"`
				}
				if err := yaml.Unmarshal(rendered, &kubelet); err != nil {
					t.Fatalf("not YAML: %v\n%s", err, rendered)
				}
				if want := "unix://" + sample.Socket; kubelet.ContainerRuntimeEndpoint != want {
					t.Errorf("containerRuntimeEndpoint %q, want %q", kubelet.ContainerRuntimeEndpoint, want)
				}
				if kubelet.PodLogsDir != sample.PodLogsDir || kubelet.Address != sample.Address {
					t.Errorf("podLogsDir %q, address %q; want %q, %q", kubelet.PodLogsDir, kubelet.Address, sample.PodLogsDir, sample.Address)
				}
				if got := kubelet.EvictionHard["nodefs.available"]; got != "1%" {
					t.Errorf("evictionHard nodefs.available %q, want 1%%", got)
				}
			},
		},
		{
			name:     "containerd.toml quotes the pause image as the sandbox image",
			template: "containerd.toml",
			check: func(t *testing.T, rendered []byte) {
				if want := "\n  sandbox_image = \"" + sample.PauseImage + "\"\n"; !strings.Contains(string(rendered), want) {
					t.Errorf("no line %q in\n%s", strings.TrimSpace(want), rendered)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), tc.template)
			if err := writeConfig(tc.template, file, sample); err != nil {
				t.Fatal(err)
			}
			rendered, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, rendered)
		})
	}
}
