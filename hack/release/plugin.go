package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// PluginPlatforms are the os/arch pairs the kubectl plugin is released for: those krew users run.
var PluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"}

// completionShim is the executable kubectl runs to complete `kubectl leasegate ...`.
const completionShim = "kubectl_complete-leasegate"

type pluginOptions struct {
	version, binDir, out, license, shim, manifest string
	created                                       int64
}

// PluginArchive is the name of the archive of the plugin for goos/goarch, as the krew manifest names it.
func PluginArchive(version, goos, goarch string) string {
	return fmt.Sprintf("kubectl-leasegate_%s_%s_%s.tar.gz", version, goos, goarch)
}

// buildPlugin packs binDir/<os>-<arch>/kubectl-leasegate[.exe] with LICENSE and the completion shim
// into an archive per platform, and renders the krew manifest template with each archive's checksum.
// The archives are reproducible: fixed order, owner, modes and times (the commit's), and a gzip header
// without name or time.
func buildPlugin(o pluginOptions) error {
	if o.version == "" || o.binDir == "" || o.out == "" || o.license == "" || o.shim == "" || o.manifest == "" {
		return errors.New("--version, --bin-dir, --out, --license, --shim and --manifest are required")
	}
	created := time.Unix(o.created, 0).UTC()
	license, err := os.ReadFile(o.license)
	if err != nil {
		return err
	}
	shim, err := os.ReadFile(o.shim)
	if err != nil {
		return err
	}
	for _, platform := range PluginPlatforms {
		goos, goarch, _ := strings.Cut(platform, "/")
		binary := "kubectl-leasegate"
		if goos == "windows" {
			binary += ".exe"
		}
		data, err := os.ReadFile(filepath.Join(o.binDir, goos+"-"+goarch, binary))
		if err != nil {
			return err
		}
		archive, err := tarGz(created, []archiveFile{{binary, 0o755, data}, {completionShim, 0o755, shim}, {"LICENSE", 0o644, license}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, PluginArchive(o.version, goos, goarch)), archive, 0o644); err != nil {
			return err
		}
	}
	manifest, err := renderKrewManifest(o.manifest, o.version, o.out)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "leasegate.yaml"), manifest, 0o644)
}

type archiveFile struct {
	name string
	mode int64
	data []byte
}

func tarGz(modified time.Time, files []archiveFile) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		header := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: modified, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(header); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// renderKrewManifest renders krew/leasegate.yaml as krew-release-bot would: {{ .TagName }} is the
// version, and {{ addURIAndSha "<url>" .TagName }} becomes the url's uri and sha256 lines, here from the
// archive in dir the url names.
func renderKrewManifest(file, version, dir string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	funcs := template.FuncMap{"addURIAndSha": func(url, tag string) (string, error) {
		// The url is itself a template, as krew-release-bot reads it.
		u, err := template.New("url").Parse(url)
		if err != nil {
			return "", err
		}
		var rendered strings.Builder
		if err := u.Execute(&rendered, map[string]string{"TagName": tag}); err != nil {
			return "", err
		}
		archive, err := os.ReadFile(filepath.Join(dir, path.Base(rendered.String())))
		if err != nil {
			return "", fmt.Errorf("the manifest names %s: %w", rendered.String(), err)
		}
		sum := sha256.Sum256(archive)
		return fmt.Sprintf("uri: %s\n    sha256: %s", rendered.String(), hex.EncodeToString(sum[:])), nil
	}}
	t, err := template.New(filepath.Base(file)).Funcs(funcs).Parse(string(data))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := t.Execute(&out, map[string]string{"TagName": version}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
