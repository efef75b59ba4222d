package cluster

import (
	"archive/tar"
	"io"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// TestImagesMatchTheDockerfiles builds the agent's image as the cluster suite will, writes the archive
// containerd imports, reads it back, and checks what the Dockerfile promises: one layer holding the
// static binary, its entrypoint, a non-root user, reproducible digests.
func TestImagesMatchTheDockerfiles(t *testing.T) {
	dir := t.TempDir()
	binary, err := checkout.BuildAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	image := Image{Ref: "ghcr.io/leasegate/leasegate-agent:v0.1.0", Binary: binary}
	archive := filepath.Join(dir, "images.tar")
	if err := WriteArchive(archive, image); err != nil {
		t.Fatal(err)
	}

	tag, err := name.NewTag(image.Ref)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("the archive does not hold %s: %v", image.Ref, err)
	}
	cfg, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/leasegate-agent" {
		t.Errorf("config: user %q, entrypoint %q; want 65532:65532 and [/leasegate-agent]", cfg.Config.User, cfg.Config.Entrypoint)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	layers, err := loaded.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want exactly the binary's", len(layers), err)
	}
	contents, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer contents.Close()
	tr := tar.NewReader(contents)
	header, err := tr.Next()
	if err != nil || header.Name != "leasegate-agent" || header.Mode != 0o755 {
		t.Fatalf("layer entry %+v (%v), want leasegate-agent with mode 0755", header, err)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("the layer holds more than the binary")
	}

	first, err := image.Build()
	if err != nil {
		t.Fatal(err)
	}
	again, err := image.Build()
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("the same binary gave two digests, %s and %s: images must be reproducible", d1, d2)
	}
	builtLayers, _ := first.Layers()
	want, _ := builtLayers[0].DiffID()
	got, _ := layers[0].DiffID()
	if got != want {
		t.Errorf("the archive's layer is %s, the image's %s", got, want)
	}
}
