// Package cluster starts a whole single-node Kubernetes cluster on this machine for the end-to-end suite:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet and kube-proxy, with
// images built without a registry or a Docker engine, and tears it down without a trace.
package cluster

import (
	"fmt"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/leasegate/leasegate/internal/oci"
)

// NonRoot is the user images run as, as the Dockerfiles say.
const NonRoot = oci.NonRoot

// Image is an image of one static binary for this node (linux/<this machine's architecture>), built as `make images` builds the
// release images: the binary at /<its name>, the entrypoint, a non-root user, nothing else.
type Image struct {
	// Ref is the tag containerd will know it by, e.g. "ghcr.io/leasegate/leasegate-agent:v0.1.0".
	Ref string
	// Binary is the path of a static binary.
	Binary string
}

// Build makes the image.
func (i Image) Build() (v1.Image, error) {
	return oci.Image{Binary: i.Binary, Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}.Build()
}

// WriteArchive writes images as one docker archive, which `ctr -n k8s.io images import` reads.
func WriteArchive(file string, images ...Image) error {
	built := map[string]v1.Image{}
	for _, i := range images {
		img, err := i.Build()
		if err != nil {
			return fmt.Errorf("image %q: %w", i.Ref, err)
		}
		built[i.Ref] = img
	}
	return oci.WriteArchive(file, built)
}
