// Package cluster starts a whole single-node Kubernetes cluster on this machine for the end-to-end suite:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet and kube-proxy, with
// images built without a registry or a Docker engine, and tears it down without a trace.
package cluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// NonRoot is the user images run as, as the Dockerfiles' distroless base does.
const NonRoot = "65532:65532"

// Image is an image of one static binary, as Dockerfile.webhook and Dockerfile.agent build them: the
// binary at /<its name>, the entrypoint, a non-root user, nothing else.
type Image struct {
	// Ref is the tag containerd will know it by, e.g. "ghcr.io/leasegate/leasegate-agent:v0.1.0".
	Ref string
	// Binary is the path of a static binary.
	Binary string
}

// epoch makes images reproducible: the same binary gives the same digest.
var epoch = time.Unix(0, 0)

// Build makes the image.
func (i Image) Build() (v1.Image, error) {
	data, err := os.ReadFile(i.Binary)
	if err != nil {
		return nil, err
	}
	target := "/" + path.Base(i.Binary)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: target[1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{target}
	cfg.Config.User = NonRoot
	return mutate.ConfigFile(img, cfg)
}

// WriteArchive writes images as one docker archive, which `ctr -n k8s.io images import` reads.
func WriteArchive(file string, images ...Image) error {
	refs := map[name.Reference]v1.Image{}
	for _, i := range images {
		ref, err := name.ParseReference(i.Ref)
		if err != nil {
			return fmt.Errorf("image %q: %w", i.Ref, err)
		}
		img, err := i.Build()
		if err != nil {
			return fmt.Errorf("image %q: %w", i.Ref, err)
		}
		refs[ref] = img
	}
	return tarball.MultiRefWriteToFile(file, refs)
}
