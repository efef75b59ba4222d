package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

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
