// Package version is the release leasegate was built as, set at link time (make build, make images and
// make release do it):
//
//	go build -ldflags "-X github.com/leasegate/leasegate/internal/version.Version=v0.2.0 \
//	  -X github.com/leasegate/leasegate/internal/version.Revision=$(git describe --tags --always --dirty)"
package version

import (
	"fmt"
	"runtime/debug"
)

// Version is the release tag; images are tagged with it, so the default agent image matches the webhook.
var Version = "v0.1.0"

// Revision is the source the binary was built from, as make stamps it (git describe); empty in a binary
// built by plain go build or go install, which is then a development build of Version's source.
var Revision string

// String is what `kubectl leasegate version`, `--version` and the start-up log say: the release, and the
// revision, or, for a build make did not stamp, that it is a development build and of which commit.
func String() string {
	info, _ := debug.ReadBuildInfo()
	return describe(Version, Revision, info)
}

func describe(version, revision string, info *debug.BuildInfo) string {
	if revision != "" {
		return fmt.Sprintf("%s (revision %s)", version, revision)
	}
	vcs := map[string]string{}
	if info != nil {
		for _, s := range info.Settings {
			vcs[s.Key] = s.Value
		}
	}
	switch rev := vcs["vcs.revision"]; {
	case rev == "":
		return version + "-dev (development build, revision unknown)"
	case vcs["vcs.modified"] == "true":
		return fmt.Sprintf("%s-dev (development build, revision %s with local changes)", version, rev)
	default:
		return fmt.Sprintf("%s-dev (development build, revision %s)", version, rev)
	}
}
