package release

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/oci"
	"github.com/leasegate/leasegate/test/framework/checkout"
)

// TestImagesForKind: `make images` with no settings writes, per platform, an archive naming both images as
// the chart installs them with no values, so `kind load image-archive` and then `helm install` with no
// --set run what was built. Where containerd is at hand, the archive is imported as kind imports it.
func TestImagesForKind(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four binaries")
	}
	tools, err := checkout.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := tools.RenderChart("leasegate-system")
	if err != nil {
		t.Fatal(err)
	}
	want := chartImages(t, rendered)

	dir := t.TempDir()
	makeTarget(t, "images", "RELEASE_DIR="+dir)

	for _, platform := range oci.Platforms {
		tag := want[0][strings.LastIndex(want[0], ":")+1:]
		archive := filepath.Join(dir, "leasegate-images-"+tag+"-linux-"+platform.Architecture+".tar")
		t.Run(platform.Architecture, func(t *testing.T) {
			if got := archiveTags(t, archive); !slices.Equal(got, want) {
				t.Errorf("%s names %v; the chart installs %v", filepath.Base(archive), got, want)
			}
			if platform.Architecture != "amd64" {
				return
			}
			imported, err := ctrImport(t, archive)
			if errors.Is(err, errNoContainerd) {
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range want {
				if !slices.Contains(imported, ref) {
					t.Errorf("ctr images import of %s gave %v, without %s", filepath.Base(archive), imported, ref)
				}
			}
		})
	}
}

// chartImages are the webhook's and the agent's images of a rendered chart, sorted.
func chartImages(t *testing.T, rendered []byte) []string {
	var images []string
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct{ Name string }
			Data     map[string]string `json:"data"`
			Spec     struct {
				Template struct {
					Spec struct {
						Containers []struct{ Image string }
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			continue
		}
		switch {
		case obj.Kind == "Deployment":
			images = append(images, obj.Spec.Template.Spec.Containers[0].Image)
		case obj.Kind == "ConfigMap" && obj.Metadata.Name == "leasegate-config":
			cfg, err := config.Load([]byte(obj.Data[config.Key]))
			if err != nil {
				t.Fatal(err)
			}
			images = append(images, cfg.Agent.Image)
		}
	}
	if len(images) != 2 {
		t.Fatalf("the chart renders images %v, want the webhook's and the agent's", images)
	}
	slices.Sort(images)
	return images
}

// archiveTags are the names a docker archive's manifest.json gives its images, sorted.
func archiveTags(t *testing.T, archive string) []string {
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		header, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no manifest.json", archive)
		}
		if err != nil {
			t.Fatal(err)
		}
		if header.Name != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			t.Fatal(err)
		}
		var tags []string
		for _, m := range manifest {
			tags = append(tags, m.RepoTags...)
		}
		slices.Sort(tags)
		return tags
	}
}

var errNoContainerd = errors.New("no containerd to import into (needs root, containerd and ctr): the import is not checked")

// ctrImport imports archive into a containerd of its own as `kind load image-archive` does on a node
// (ctr images import --all-platforms --digests into namespace k8s.io) and lists the images it holds.
func ctrImport(t *testing.T, archive string) ([]string, error) {
	if os.Getuid() != 0 {
		return nil, errNoContainerd
	}
	for _, binary := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(binary); err != nil {
			return nil, errNoContainerd
		}
	}
	dir, err := os.MkdirTemp("", "containerd")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	daemon := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	var logs strings.Builder
	daemon.Stdout, daemon.Stderr = &logs, &logs
	if err := daemon.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = daemon.Process.Kill(); _ = daemon.Wait() }()
	ctr := func(args ...string) ([]byte, error) {
		return exec.Command("ctr", append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	}
	// Up once it answers; a minute is far beyond its start-up, and only bounds a broken one.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := ctr("version"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("containerd did not answer:\n%s", logs.String())
		}
	}
	if out, err := ctr("images", "import", "--all-platforms", "--digests", archive); err != nil {
		return nil, fmt.Errorf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls", "-q")
	if err != nil {
		return nil, fmt.Errorf("ctr images ls: %v\n%s", err, out)
	}
	return strings.Fields(string(out)), nil
}
