// Command release builds and publishes leasegate's release artifacts without a Docker engine; the
// Makefile's images, push and release targets call it.
//
//	release images --version v0.2.0 --revision <commit> --created <unix seconds> --registry R --bin-dir D --out O
//	    D/linux-<arch>/leasegate-{webhook,agent} -> O/oci (an OCI layout: one multi-platform index per
//	    image, named R/<image>:<version>) and O/leasegate-images-<version>-linux-<arch>.tar (docker
//	    archives, both images named as the chart installs them by default, for kind load image-archive,
//	    ctr images import, docker load)
//	release push --layout O/oci --digests O/digests.txt
//	    pushes every index of the layout with the Docker configuration's credentials
//	release plugin --version v0.2.0 --created <unix seconds> --bin-dir D --out O --license LICENSE \
//	    --shim cmd/kubectl-leasegate/kubectl_complete-leasegate --manifest krew/leasegate.yaml
//	    D/<os>-<arch>/kubectl-leasegate[.exe] -> O/kubectl-leasegate_<version>_<os>_<arch>.tar.gz (with
//	    LICENSE and the completion shim) and O/leasegate.yaml, the krew manifest with their checksums
//	release changelog --version v0.2.0
//	    the changelog section of the commits since the previous tag
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release images|push|plugin|changelog [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var run func() error
	switch os.Args[1] {
	case "images":
		var o imagesOptions
		flags.StringVar(&o.version, "version", "", "release tag, e.g. v0.2.0")
		flags.StringVar(&o.revision, "revision", "", "the commit built")
		flags.Int64Var(&o.created, "created", 0, "creation time in Unix seconds (the commit's time, for reproducible digests)")
		flags.StringVar(&o.registry, "registry", "", "registry and path the images are named in, e.g. ghcr.io/leasegate")
		flags.StringVar(&o.binDir, "bin-dir", "", "directory with linux-<arch>/leasegate-webhook and leasegate-agent")
		flags.StringVar(&o.out, "out", "", "output directory")
		run = func() error { return buildImages(o) }
	case "push":
		var layoutDir, digests string
		flags.StringVar(&layoutDir, "layout", "", "OCI layout written by release images")
		flags.StringVar(&digests, "digests", "", "file to write <reference>@<digest> lines to")
		run = func() error { return push(ctx, layoutDir, digests) }
	case "plugin":
		var o pluginOptions
		flags.StringVar(&o.version, "version", "", "release tag, e.g. v0.2.0")
		flags.Int64Var(&o.created, "created", 0, "the archives' file times in Unix seconds (the commit's time, for reproducible archives)")
		flags.StringVar(&o.binDir, "bin-dir", "", "directory with <os>-<arch>/kubectl-leasegate[.exe]")
		flags.StringVar(&o.out, "out", "", "output directory")
		flags.StringVar(&o.license, "license", "", "the LICENSE file every archive holds")
		flags.StringVar(&o.shim, "shim", "", "the completion shim kubectl_complete-leasegate")
		flags.StringVar(&o.manifest, "manifest", "", "the krew manifest template")
		run = func() error { return buildPlugin(o) }
	case "changelog":
		var version string
		flags.StringVar(&version, "version", "", "release tag, e.g. v0.2.0")
		run = func() error { return changelog(os.Stdout, version) }
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: images, push, plugin or changelog\n", os.Args[1])
		os.Exit(2)
	}
	_ = flags.Parse(os.Args[2:])
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release "+os.Args[1]+":", err)
		os.Exit(1)
	}
}
