package checkout

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestExportCommit(t *testing.T) {
	head, err := exec.Command("git", "-C", RepoRoot(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, tc := range []struct {
		name, commit string
		wantFile     string // a file the exported tree has
		wantErr      string
	}{
		{name: "a commit of this history: its tree, the chart included", commit: strings.TrimSpace(string(head)), wantFile: "charts/leasegate/Chart.yaml"},
		{name: "a commit this clone lacks: the error says how to fetch the history", commit: strings.Repeat("0", 40), wantErr: "git fetch --unshallow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := ExportCommit(tc.commit, t.TempDir())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ExportCommit(%s) = %v, want an error containing %q", tc.commit, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(tree, tc.wantFile)); err != nil {
				t.Errorf("the exported tree lacks %s: %v", tc.wantFile, err)
			}
		})
	}
}
