package cluster

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"text/template"
)

//go:embed config
var configFiles embed.FS

// configs are the templates of containerd's, CNI's and kubelet's config files, named by their file names.
var configs = template.Must(template.ParseFS(configFiles, "config/*"))

// nodeConfig is what the templates in config/ are rendered from.
type nodeConfig struct {
	// containerd.toml
	Root, State, Socket, PauseImage, CNIConfDir string
	// 10-leasegate.conflist
	Bridge, PodCIDR, Gateway, ServiceCIDR, IPAMDir string
	// kubelet.yaml, with Socket
	PodLogsDir, Address string
}

// nodeConfig fills the templates with this node's paths and the harness's fixed addresses.
func (n *Node) nodeConfig() nodeConfig {
	return nodeConfig{
		Root:        n.path("containerd/root"),
		State:       n.path("containerd/state"),
		Socket:      n.socket,
		PauseImage:  n.pauseImage,
		CNIConfDir:  n.path("cni"),
		Bridge:      bridge,
		PodCIDR:     podCIDR,
		Gateway:     gateway,
		ServiceCIDR: serviceCIDR,
		IPAMDir:     n.path("cni-ipam"),
		PodLogsDir:  n.path("pod-logs"),
		Address:     gateway,
	}
}

// writeConfig renders the template config/name into file, writing nothing if rendering fails.
func writeConfig(name, file string, c nodeConfig) error {
	var b bytes.Buffer
	if err := configs.ExecuteTemplate(&b, name, c); err != nil {
		return fmt.Errorf("rendering %s: %w", file, err)
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}
