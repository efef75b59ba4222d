// Package release tests the release a user installs: `make release` against a registry on loopback, the
// images it pushes (both platforms, user, entrypoint, labels, file tree), the air-gapped archives, the
// packaged chart installed server-side with one registry value, checksums and changelog, reproducible
// digests, and the Dockerfiles held to the same images.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/oci"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

const version = "0.2.0"

var images = []string{"leasegate-webhook", "leasegate-agent"}

// elfMachines are the ELF machine of a binary built for each architecture.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// makeTarget runs a Makefile target from the repository root, as a user would.
func makeTarget(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", args...)
	cmd.Dir = checkout.RepoRoot()
	// A make that runs these tests must not pass its own flags on.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "MAKEFLAGS=") || strings.HasPrefix(e, "MFLAGS=") || strings.HasPrefix(e, "MAKELEVEL=")
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four binaries")
	}
	tools, err := checkout.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer server.Close()
	registryPath := strings.TrimPrefix(server.URL, "http://") + "/leasegate"
	dir := t.TempDir()
	releaseDir := filepath.Join(dir, "first")

	makeTarget(t, "release", "VERSION="+version, "IMAGE_REGISTRY="+registryPath, "RELEASE_DIR="+releaseDir)

	indexes, err := oci.ReadLayout(filepath.Join(releaseDir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	revision, err := exec.Command("git", "-C", checkout.RepoRoot(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]v1.Hash{}
	for _, image := range images {
		ref := registryPath + "/" + image + ":v" + version
		idx, ok := indexes[ref]
		if !ok {
			t.Fatalf("the OCI layout has no %s; it has %v", ref, keys(indexes))
		}
		digests[ref], _ = idx.Digest()
		t.Run(image, func(t *testing.T) {
			checkIndex(t, idx, image, strings.TrimSpace(string(revision)))
		})
	}

	t.Run("pushed to the registry, pulled back by tag with the same digests", func(t *testing.T) {
		recorded, err := os.ReadFile(filepath.Join(releaseDir, "digests.txt"))
		if err != nil {
			t.Fatal(err)
		}
		for ref, want := range digests {
			pulled, err := remote.Index(mustTag(t, ref))
			if err != nil {
				t.Fatalf("pulling %s: %v", ref, err)
			}
			if got, _ := pulled.Digest(); got != want {
				t.Errorf("%s: pulled %s, built %s", ref, got, want)
			}
			if !strings.Contains(string(recorded), ref+"@"+want.String()+"\n") {
				t.Errorf("digests.txt lacks %s@%s:\n%s", ref, want, recorded)
			}
		}
	})

	t.Run("air-gapped archives hold both images per platform, as in the index", func(t *testing.T) {
		for _, platform := range oci.Platforms {
			archive := filepath.Join(releaseDir, fmt.Sprintf("leasegate-images-v%s-linux-%s.tar", version, platform.Architecture))
			for _, image := range images {
				ref := registryPath + "/" + image + ":v" + version
				loaded, err := tarball.ImageFromPath(archive, ptrTo(mustTag(t, ref)))
				if err != nil {
					t.Fatalf("%s: %v", archive, err)
				}
				want, err := imageFor(indexes[ref], platform)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := diffIDs(t, loaded), diffIDs(t, want); !slices.Equal(got, want) {
					t.Errorf("%s in %s: layers %v, the index's %v", ref, archive, got, want)
				}
			}
		}
	})

	t.Run("checksums and changelog", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(releaseDir, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		files := 0
		scanner := bufio.NewScanner(bytes.NewReader(sums))
		for scanner.Scan() {
			sum, file, _ := strings.Cut(scanner.Text(), "  ")
			data, err := os.ReadFile(filepath.Join(releaseDir, file))
			if err != nil {
				t.Fatal(err)
			}
			if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
				t.Errorf("SHA256SUMS: %s does not match", file)
			}
			files++
		}
		if files != 3+len(pluginPlatforms) {
			t.Errorf("SHA256SUMS lists %d files, want the chart, the two image archives and the plugin's %d:\n%s", files, len(pluginPlatforms), sums)
		}
		changelog, err := os.ReadFile(filepath.Join(releaseDir, "CHANGELOG.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^## v` + regexp.QuoteMeta(version) + ` \(\d{4}-\d\d-\d\d\)\n\n- .+ \([0-9a-f]+\)\n`).Match(changelog) {
			t.Errorf("CHANGELOG.md is not a release section:\n%.300s", changelog)
		}
	})

	t.Run("the packaged chart installs, server-side, with its images at the release's registry", func(t *testing.T) {
		chart := filepath.Join(releaseDir, "leasegate-"+version+".tgz")
		meta, err := tools.RunHelm("show", "chart", chart)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"version: " + version, "appVersion: v" + version} {
			if !strings.Contains(string(meta), want+"\n") {
				t.Errorf("Chart.yaml of the package lacks %q:\n%s", want, meta)
			}
		}
		cp, err := process.StartControlPlane(tools.CertManagerCRDs)
		if err != nil {
			t.Fatal(err)
		}
		defer cp.Stop()
		kubeconfig := filepath.Join(dir, "admin.kubeconfig")
		if err := cp.AdminKubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leasegate-system"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		install := func(extra ...string) string {
			args := append([]string{"install", "leasegate", chart, "--kubeconfig", kubeconfig, "--namespace", "leasegate-system",
				"--dry-run=server"}, extra...)
			out, err := tools.RunHelm(args...)
			if err != nil {
				t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
			}
			return string(out)
		}
		for registry, manifest := range map[string]string{
			registryPath:                       install(),
			"registry.example.internal/mirror": install("--set", "image.registry=registry.example.internal/mirror"),
		} {
			for _, image := range images {
				want := registry + "/" + image + ":v" + version
				if !strings.Contains(manifest, want) {
					t.Errorf("with image.registry %s, the install does not use %s", registry, want)
				}
			}
			if strings.Contains(manifest, "ghcr.io/leasegate") {
				t.Errorf("with image.registry %s, an image still comes from ghcr.io/leasegate", registry)
			}
		}
	})

	t.Run("reproducible: the same commit gives the same digests", func(t *testing.T) {
		again := filepath.Join(dir, "again")
		makeTarget(t, "images", "VERSION="+version, "IMAGE_REGISTRY="+registryPath, "RELEASE_DIR="+again)
		rebuilt, err := oci.ReadLayout(filepath.Join(again, "oci"))
		if err != nil {
			t.Fatal(err)
		}
		for ref, want := range digests {
			if got, _ := rebuilt[ref].Digest(); got != want {
				t.Errorf("%s: %s, then %s", ref, want, got)
			}
		}
	})

	t.Run("the Dockerfiles describe the same images", func(t *testing.T) {
		for _, image := range images {
			idx := indexes[registryPath+"/"+image+":v"+version]
			img, err := imageFor(idx, oci.Platforms[0])
			if err != nil {
				t.Fatal(err)
			}
			checkDockerfile(t, image, img)
		}
	})
}

// checkIndex checks a release index: one image per platform, each the static binary for that platform
// and nothing else, run as non-root, with the OCI labels.
func checkIndex(t *testing.T, idx v1.ImageIndex, image, revision string) {
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := manifest.Annotations[oci.LabelVersion]; got != "v"+version {
		t.Errorf("index annotation %s = %q, want v%s", oci.LabelVersion, got, version)
	}
	var platforms []string
	for _, d := range manifest.Manifests {
		platforms = append(platforms, d.Platform.String())
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Fatalf("platforms %v, want %v", platforms, want)
	}
	for _, platform := range oci.Platforms {
		img, err := imageFor(idx, platform)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.User != oci.NonRoot || !slices.Equal(cfg.Config.Entrypoint, []string{"/" + image}) || cfg.Architecture != platform.Architecture {
			t.Errorf("%s: user %q, entrypoint %q, architecture %s", platform, cfg.Config.User, cfg.Config.Entrypoint, cfg.Architecture)
		}
		labels := cfg.Config.Labels
		for key, want := range map[string]string{
			oci.LabelTitle: image, oci.LabelVersion: "v" + version, oci.LabelRevision: revision,
			oci.LabelSource: "https://github.com/leasegate/leasegate",
		} {
			if labels[key] != want {
				t.Errorf("%s: label %s = %q, want %q", platform, key, labels[key], want)
			}
		}
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(labels[oci.LabelCreated]) {
			t.Errorf("%s: label %s = %q, want the commit's time in RFC 3339", platform, oci.LabelCreated, labels[oci.LabelCreated])
		}
		files := fileTree(t, img)
		if len(files) != 1 || files["/"+image] == nil {
			t.Fatalf("%s: file tree %v, want only /%s", platform, keys(files), image)
		}
		binary, err := elf.NewFile(bytes.NewReader(files["/"+image]))
		if err != nil {
			t.Fatalf("%s: /%s is not an ELF binary: %v", platform, image, err)
		}
		if binary.Machine != elfMachines[platform.Architecture] {
			t.Errorf("%s: /%s is built for %s", platform, image, binary.Machine)
		}
		if binary.Section(".interp") != nil {
			t.Errorf("%s: /%s is dynamically linked; the image has no libc", platform, image)
		}
	}
}

// checkDockerfile holds Dockerfile.<name> to the image make images builds: its last stage starts from
// scratch and copies in only the binary at the same path, with the same user, entrypoint and label keys.
func checkDockerfile(t *testing.T, image string, img v1.Image) {
	data, err := os.ReadFile(filepath.Join(checkout.RepoRoot(), "Dockerfile."+strings.TrimPrefix(image, "leasegate-")))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	stages := strings.Split(text, "\nFROM ")
	final := stages[len(stages)-1]
	cfg, _ := img.ConfigFile()
	var copies, labels []string
	for _, line := range strings.Split(final, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "scratch":
		case "COPY":
			copies = append(copies, fields[len(fields)-1])
		case "USER":
			if fields[1] != cfg.Config.User {
				t.Errorf("Dockerfile USER %s, the image runs as %s", fields[1], cfg.Config.User)
			}
		case "ENTRYPOINT":
			if want := fmt.Sprintf(`["%s"]`, cfg.Config.Entrypoint[0]); fields[1] != want {
				t.Errorf("Dockerfile ENTRYPOINT %s, the image's %s", fields[1], want)
			}
		case "LABEL":
			for _, kv := range fields[1:] {
				key, _, _ := strings.Cut(kv, "=")
				labels = append(labels, key)
			}
		case "ARG":
		default:
			t.Errorf("Dockerfile's last stage has %q, which make images does not do", line)
		}
	}
	if !strings.HasPrefix(final, "scratch") {
		t.Errorf("Dockerfile's last stage is FROM %.40s, want scratch: the image holds only the binary", final)
	}
	if want := []string{cfg.Config.Entrypoint[0]}; !slices.Equal(copies, want) {
		t.Errorf("Dockerfile copies %v into the image, make images puts %v", copies, want)
	}
	slices.Sort(labels)
	if want := keys(cfg.Config.Labels); !slices.Equal(labels, want) {
		t.Errorf("Dockerfile labels %v, the image's %v", labels, want)
	}
}

// fileTree reads every file of an image's layers.
func fileTree(t *testing.T, img v1.Image) map[string][]byte {
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			header, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if header.Mode != 0o755 || header.Uid != 0 {
				t.Errorf("%s: mode %o, owner %d; want 0755, root-owned and read-only to the non-root user", header.Name, header.Mode, header.Uid)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimPrefix(header.Name, "/")] = data
		}
		rc.Close()
	}
	return files
}

func imageFor(idx v1.ImageIndex, platform v1.Platform) (v1.Image, error) {
	manifest, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range manifest.Manifests {
		if d.Platform != nil && d.Platform.Equals(platform) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s", platform)
}

func diffIDs(t *testing.T, img v1.Image) []v1.Hash {
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var ids []v1.Hash
	for _, l := range layers {
		id, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func mustTag(t *testing.T, ref string) name.Tag {
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

func ptrTo[T any](v T) *T { return &v }

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
