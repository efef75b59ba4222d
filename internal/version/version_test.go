package version

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	settings := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	for _, tc := range []struct {
		name, revision string
		info           *debug.BuildInfo
		want           string
	}{
		{"stamped by make: the stamp wins over the VCS info", "v0.2.0-3-g4e9b266", settings("vcs.revision", "4e9b266e0000"), "v0.2.0 (revision v0.2.0-3-g4e9b266)"},
		{"go build in a clean checkout: a development build of that commit", "", settings("vcs.revision", "4e9b266e0000", "vcs.modified", "false"), "v0.2.0-dev (development build, revision 4e9b266e0000)"},
		{"go build with local changes says so", "", settings("vcs.revision", "4e9b266e0000", "vcs.modified", "true"), "v0.2.0-dev (development build, revision 4e9b266e0000 with local changes)"},
		{"built outside a repository (-buildvcs=false)", "", settings(), "v0.2.0-dev (development build, revision unknown)"},
		{"no build info at all", "", nil, "v0.2.0-dev (development build, revision unknown)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe("v0.2.0", tc.revision, tc.info); got != tc.want {
				t.Errorf("describe = %q, want %q", got, tc.want)
			}
		})
	}
}
