package docs

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// layoutRow is one row of README.md's layout table: a folder and the one line that says what it is.
type layoutRow struct {
	line int
	dir  string
	job  string
}

var layoutCells = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|\\s*(.*?)\\s*\\|\\s*$")

// layoutTable reads the table under README.md's "Layout" heading.
func layoutTable(t *testing.T) []layoutRow {
	t.Helper()
	readme := readMarkdown(t, filepath.Join(checkout.RepoRoot(), "README.md"))
	start, end := -1, len(readme.lines)
	for _, h := range readme.headings() {
		switch {
		case start < 0 && h.level == 2 && h.text == "Layout":
			start = h.line
		case start >= 0 && h.level <= 2:
			end = min(end, h.line)
		}
	}
	if start < 0 {
		t.Fatal(`README.md has no "## Layout" section: it lists every package and folder with one line each`)
	}
	var rows []layoutRow
	for i := start + 1; i < end; i++ {
		if readme.inCode[i] {
			continue
		}
		if m := layoutCells.FindStringSubmatch(readme.lines[i]); m != nil {
			rows = append(rows, layoutRow{line: i + 1, dir: strings.TrimSuffix(m[1], "/"), job: m[2]})
		}
	}
	return rows
}

// goPackageDirs are the folders of the repository's tracked Go files, testdata excluded (not packages).
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--", "*.go")
	cmd.Dir = checkout.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v (the test reads the tracked tree; run it inside a clone)", err)
	}
	var dirs []string
	for _, file := range strings.Fields(string(out)) {
		dir := path.Dir(file)
		if dir == "." || slices.Contains(strings.Split(dir, "/"), "testdata") {
			continue
		}
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// TestLayoutMatchesTree keeps README.md's layout table true: every Go package has exactly one row saying
// what it is, and every row names a folder that exists.
func TestLayoutMatchesTree(t *testing.T) {
	rows := layoutTable(t)
	listed := map[string]int{}
	for _, r := range rows {
		if prev, dup := listed[r.dir]; dup {
			t.Errorf("README.md:%d: %s is listed again (first on line %d): one row per folder", r.line, r.dir, prev)
		}
		listed[r.dir] = r.line
		if r.job == "" {
			t.Errorf("README.md:%d: %s has no description: say in one line what it is", r.line, r.dir)
		}
		if info, err := os.Stat(filepath.Join(checkout.RepoRoot(), r.dir)); err != nil || !info.IsDir() {
			t.Errorf("README.md:%d: %s is not a folder of the repository: remove the row or fix the path", r.line, r.dir)
		}
	}
	for _, dir := range goPackageDirs(t) {
		if _, ok := listed[dir]; !ok {
			t.Errorf("package %s is missing from README.md's layout table: add a row saying in one line what it is", dir)
		}
	}
}
