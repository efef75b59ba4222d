package checkout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PreviousCommit is release N−1 of the version skew leasegate supports (docs/upgrading.md): the commit
// whose webhook and agents this tree must work beside while helm upgrade and helm rollback run. It is
// main's last commit before stop 36, pinned by hash because every clone of main has it and it does not move
// as main does. The real-cluster upgrade specs install it; the chart's skew test loads this tree's default
// leasegate-config with its config loader. Move it forward when a release is cut.
const PreviousCommit = "68cc3b973f53e6f5ad430737ea4d08be47770c4c"

// ExportCommit writes the tree of commit, from this repository's history, into dir/<short commit> and
// returns that directory: the source of an earlier release to build and install, without touching the
// repository's work trees.
func ExportCommit(commit, dir string) (string, error) {
	if out, err := exec.Command("git", "-C", RepoRoot(), "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("commit %s is not in this clone's history (a shallow clone? run `git fetch --unshallow`): %w: %s",
			commit, err, strings.TrimSpace(string(out)))
	}
	tree := filepath.Join(dir, commit[:min(len(commit), 12)])
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "source.tar")
	if out, err := exec.Command("git", "-C", RepoRoot(), "archive", "--format=tar", "-o", archive, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w: %s", commit, err, strings.TrimSpace(string(out)))
	}
	defer os.Remove(archive)
	if out, err := exec.Command("tar", "-x", "-f", archive, "-C", tree).CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar -x %s: %w: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return tree, nil
}
