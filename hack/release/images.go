package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/leasegate/leasegate/internal/oci"
)

// Images are the images of a release, named by their binaries.
var Images = []string{"leasegate-webhook", "leasegate-agent"}

// source is the repository the images are built from.
const source = "https://github.com/leasegate/leasegate"

type imagesOptions struct {
	version, revision, registry, binDir, out string
	created                                  int64
}

func buildImages(o imagesOptions) error {
	if o.version == "" || o.registry == "" || o.binDir == "" || o.out == "" {
		return errors.New("--version, --registry, --bin-dir and --out are required")
	}
	created := time.Unix(o.created, 0).UTC()
	indexes := map[string]v1.ImageIndex{}
	perPlatform := map[string]map[string]v1.Image{} // archive file -> ref -> image
	for _, binary := range Images {
		labels := map[string]string{
			oci.LabelTitle: binary, oci.LabelVersion: o.version, oci.LabelRevision: o.revision,
			oci.LabelCreated: created.Format(time.RFC3339), oci.LabelSource: source,
		}
		ref := strings.TrimSuffix(o.registry, "/") + "/" + binary + ":" + o.version
		var images []v1.Image
		for _, platform := range oci.Platforms {
			dir := platform.OS + "-" + platform.Architecture
			img, err := oci.Image{Binary: filepath.Join(o.binDir, dir, binary), Platform: platform, Created: created, Labels: labels}.Build()
			if err != nil {
				return fmt.Errorf("%s for %s: %w", binary, dir, err)
			}
			images = append(images, img)
			archive := filepath.Join(o.out, "leasegate-images-"+o.version+"-"+dir+".tar")
			if perPlatform[archive] == nil {
				perPlatform[archive] = map[string]v1.Image{}
			}
			perPlatform[archive][ref] = img
		}
		idx, err := oci.Index(labels, images...)
		if err != nil {
			return err
		}
		indexes[ref] = idx
	}
	if err := oci.WriteLayout(filepath.Join(o.out, "oci"), indexes); err != nil {
		return err
	}
	for archive, images := range perPlatform {
		if err := oci.WriteArchive(archive, images); err != nil {
			return err
		}
	}
	return printDigests(indexes)
}

func push(ctx context.Context, layoutDir, digestsFile string) error {
	if layoutDir == "" {
		return errors.New("--layout is required")
	}
	indexes, err := oci.ReadLayout(layoutDir)
	if err != nil {
		return err
	}
	if len(indexes) == 0 {
		return fmt.Errorf("%s holds no images: run make images first", layoutDir)
	}
	pushed := map[string]v1.Hash{}
	for ref, idx := range indexes {
		if pushed[ref], err = oci.Push(ctx, ref, idx); err != nil {
			return err
		}
	}
	out := digestLines(pushed)
	fmt.Print(out)
	if digestsFile == "" {
		return nil
	}
	return os.WriteFile(digestsFile, []byte(out), 0o644)
}

func printDigests(indexes map[string]v1.ImageIndex) error {
	digests := map[string]v1.Hash{}
	for ref, idx := range indexes {
		var err error
		if digests[ref], err = idx.Digest(); err != nil {
			return err
		}
	}
	fmt.Print(digestLines(digests))
	return nil
}

// digestLines lists references as "<reference>@<digest>", sorted, one a line.
func digestLines(digests map[string]v1.Hash) string {
	var lines []string
	for ref, digest := range digests {
		lines = append(lines, ref+"@"+digest.String()+"\n")
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}
