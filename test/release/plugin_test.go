package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// pluginPlatforms are the platforms krew users run, each an archive of the release.
var pluginPlatforms = []struct{ os, arch string }{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"}, {"windows", "arm64"},
}

// krewManifest is the part of krew's Plugin that the archives must agree with.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version   string         `json:"version"`
		Platforms []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	Sha256 string `json:"sha256"`
	Bin    string `json:"bin"`
}

// TestPluginArchives runs `make plugin` as make release does: an archive per platform with the binary
// built for it, the completion shim and LICENSE, and the krew manifest naming each with its checksum.
func TestPluginArchives(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the plugin for six platforms")
	}
	dir := t.TempDir()
	makeTarget(t, "plugin", "VERSION="+version, "RELEASE_DIR="+dir)
	tag := "v" + version
	root := checkout.RepoRoot()
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	shim, err := os.ReadFile(filepath.Join(root, "cmd", "kubectl-leasegate", "kubectl_complete-leasegate"))
	if err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(filepath.Join(dir, "leasegate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest krewManifest
	if err := yaml.Unmarshal(data, &manifest); err != nil {
		t.Fatalf("leasegate.yaml is not YAML: %v\n%s", err, data)
	}
	if manifest.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || manifest.Kind != "Plugin" || manifest.Metadata.Name != "leasegate" || manifest.Spec.Version != tag {
		t.Errorf("manifest %s %s %s version %s, want a krew Plugin leasegate at %s", manifest.APIVersion, manifest.Kind, manifest.Metadata.Name, manifest.Spec.Version, tag)
	}
	if len(manifest.Spec.Platforms) != len(pluginPlatforms) {
		t.Errorf("the manifest has %d platforms, want %d", len(manifest.Spec.Platforms), len(pluginPlatforms))
	}

	for _, p := range pluginPlatforms {
		t.Run(p.os+"/"+p.arch, func(t *testing.T) {
			name := fmt.Sprintf("kubectl-leasegate_%s_%s_%s.tar.gz", tag, p.os, p.arch)
			archive, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			binary := "kubectl-leasegate"
			if p.os == "windows" {
				binary += ".exe"
			}
			files := untarGz(t, archive)
			if got, want := keys(files), []string{"LICENSE", binary, "kubectl_complete-leasegate"}; !slices.Equal(got, sorted(want)) {
				t.Fatalf("%s holds %v, want %v", name, got, sorted(want))
			}
			if !bytes.Equal(files["LICENSE"].data, license) || !bytes.Equal(files["kubectl_complete-leasegate"].data, shim) {
				t.Errorf("%s: LICENSE or the shim differ from the repository's", name)
			}
			if files[binary].mode != 0o755 || files["kubectl_complete-leasegate"].mode != 0o755 {
				t.Errorf("%s: the binary and the shim must be executable: %o, %o", name, files[binary].mode, files["kubectl_complete-leasegate"].mode)
			}
			if got := binaryPlatform(t, files[binary].data); got != p.os+"/"+p.arch {
				t.Errorf("%s holds a binary for %s", name, got)
			}

			i := slices.IndexFunc(manifest.Spec.Platforms, func(m krewPlatform) bool {
				return m.Selector.MatchLabels["os"] == p.os && m.Selector.MatchLabels["arch"] == p.arch
			})
			if i < 0 {
				t.Fatalf("the manifest has no platform os=%s arch=%s", p.os, p.arch)
			}
			m := manifest.Spec.Platforms[i]
			sum := sha256.Sum256(archive)
			if want := "https://github.com/leasegate/leasegate/releases/download/" + tag + "/" + name; m.URI != want {
				t.Errorf("uri %s, want %s", m.URI, want)
			}
			if m.Sha256 != hex.EncodeToString(sum[:]) {
				t.Errorf("sha256 %s, the archive's is %x", m.Sha256, sum)
			}
			if m.Bin != binary {
				t.Errorf("bin %s, the archive holds %s", m.Bin, binary)
			}
		})
	}

	t.Run("the binary says its release and commit", func(t *testing.T) {
		if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
			t.Skip("runs the linux binary")
		}
		files := untarGz(t, mustRead(t, filepath.Join(dir, fmt.Sprintf("kubectl-leasegate_%s_linux_%s.tar.gz", tag, runtime.GOARCH))))
		bin := filepath.Join(t.TempDir(), "kubectl-leasegate")
		if err := os.WriteFile(bin, files["kubectl-leasegate"].data, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatal(err)
		}
		revision, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("kubectl-leasegate %s (revision %s)\n", tag, strings.TrimSpace(string(revision))); string(out) != want {
			t.Errorf("version says %q, want %q", out, want)
		}
	})
}

type archived struct {
	mode int64
	data []byte
}

func untarGz(t *testing.T, archive []byte) map[string]archived {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]archived{}
	for {
		header, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[header.Name] = archived{header.Mode, data}
	}
}

// binaryPlatform reads the os/arch a binary was built for from its headers.
func binaryPlatform(t *testing.T, data []byte) string {
	t.Helper()
	if f, err := elf.NewFile(bytes.NewReader(data)); err == nil {
		return "linux/" + map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	}
	if f, err := macho.NewFile(bytes.NewReader(data)); err == nil {
		return "darwin/" + map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
	}
	if f, err := pe.NewFile(bytes.NewReader(data)); err == nil {
		return "windows/" + map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
	}
	return "unknown"
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
