// Package oci builds leasegate's container images from its static binaries, without a Docker engine: one
// layer holding the binary, its entrypoint, the non-root user, the OCI version labels, nothing else (no
// shell, no package manager, no writable path the process needs). The same binary, platform and
// creation time give the same digest, so a release is reproducible from its commit.
//
// Dockerfile.webhook and Dockerfile.agent describe the same images for people who build with Docker; a
// test holds them to what Image builds.
package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user the images run as, distroless's "nonroot": the chart's pods and the injected
// agent run as it under Pod Security "restricted".
const NonRoot = "65532:65532"

// Platforms are the platforms a release is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// OCI image spec annotation keys, used as image labels and as index annotations.
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	// refName names an index in an OCI layout, as "<repository>:<tag>".
	refName = "org.opencontainers.image.ref.name"
)

// Image is the image of one static binary for one platform.
type Image struct {
	// Binary is the path of a static binary for Platform; it becomes /<its base name>, the entrypoint.
	Binary   string
	Platform v1.Platform
	// Created is the image's creation time; the Unix epoch when zero. A release uses its commit's time.
	Created time.Time
	Labels  map[string]string
}

// Build makes the image.
func (i Image) Build() (v1.Image, error) {
	data, err := os.ReadFile(i.Binary)
	if err != nil {
		return nil, err
	}
	created := i.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	target := "/" + path.Base(i.Binary)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	header := &tar.Header{Name: target[1:], Mode: 0o755, Size: int64(len(data)), ModTime: created.UTC(), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(header); err != nil {
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
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = i.Platform.OS, i.Platform.Architecture, i.Platform.Variant
	cfg.Created = v1.Time{Time: created.UTC()}
	cfg.Config.Entrypoint = []string{target}
	cfg.Config.User = NonRoot
	cfg.Config.Labels = i.Labels
	return mutate.ConfigFile(img, cfg)
}

// Index makes the multi-platform index of one binary's images, each entry carrying its platform, with
// the labels as the index's annotations.
func Index(labels map[string]string, images ...v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range images {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		platform := cfg.Platform()
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: platform},
		})
	}
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// WriteLayout writes indexes, keyed by "<repository>:<tag>", into a new OCI image layout at dir.
func WriteLayout(dir string, indexes map[string]v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for ref, idx := range indexes {
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refName: ref})); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
	}
	return nil
}

// ReadLayout returns the indexes of an OCI image layout that WriteLayout wrote, keyed by ref name.
func ReadLayout(dir string) (map[string]v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	manifest, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	indexes := map[string]v1.ImageIndex{}
	for _, d := range manifest.Manifests {
		ref := d.Annotations[refName]
		if ref == "" || d.MediaType != types.OCIImageIndex {
			continue
		}
		if indexes[ref], err = root.ImageIndex(d.Digest); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
	}
	return indexes, nil
}

// Push uploads idx as ref with the credentials of the user's Docker configuration (docker login,
// credential helpers) and returns its digest.
func Push(ctx context.Context, ref string, idx v1.ImageIndex, options ...remote.Option) (v1.Hash, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return v1.Hash{}, err
	}
	options = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, options...)
	if err := remote.WriteIndex(tag, idx, options...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return idx.Digest()
}

// WriteArchive writes single-platform images, keyed by the reference to load them as, into one docker
// archive, which `docker load` and `ctr images import` read: the air-gapped path.
func WriteArchive(file string, images map[string]v1.Image) error {
	refs := map[name.Reference]v1.Image{}
	for ref, img := range images {
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("image %q: %w", ref, err)
		}
		refs[tag] = img
	}
	return tarball.MultiRefWriteToFile(file, refs)
}
