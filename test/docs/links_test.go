package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// documents are the files whose links must resolve: README.md and every page under docs/.
func documents(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(checkout.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(checkout.RepoRoot(), "README.md")}, pages...)
}

func readMarkdown(t *testing.T, path string) markdown {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseMarkdown(string(data))
}

// TestLinksResolve checks every relative link of README.md and docs/*.md: the file or directory it names
// exists in the repository, and its anchor, if any, is a heading or an HTML id of the markdown file it
// points into (GitHub's anchor rules), or a line of another file (#L12, #L12-L20).
func TestLinksResolve(t *testing.T) {
	root, err := filepath.Abs(checkout.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		anchors[path] = readMarkdown(t, path).anchors()
		return anchors[path]
	}
	for _, doc := range documents(t) {
		doc, err := filepath.Abs(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		t.Run(rel, func(t *testing.T) {
			for _, l := range readMarkdown(t, doc).links() {
				if problem := checkLink(root, doc, l.target, anchorsOf); problem != "" {
					t.Errorf("%s:%d: link %q: %s", rel, l.line, l.target, problem)
				}
			}
		})
	}
}

var (
	absoluteURL = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	lineAnchor  = regexp.MustCompile(`^L\d+(-L\d+)?$`)
)

// checkLink says what is wrong with a link target in the markdown file from, or "" when it resolves.
func checkLink(root, from, target string, anchorsOf func(path string) map[string]bool) string {
	if absoluteURL.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // another site's: not this test's to check
	}
	if target == "" {
		return "empty link target"
	}
	pathPart, fragment, _ := strings.Cut(target, "#")
	pathPart, _, _ = strings.Cut(pathPart, "?")
	path := from
	if pathPart != "" {
		decoded, err := url.PathUnescape(pathPart)
		if err != nil {
			return fmt.Sprintf("not a valid path: %v", err)
		}
		if strings.HasPrefix(decoded, "/") {
			path = filepath.Join(root, decoded)
		} else {
			path = filepath.Join(filepath.Dir(from), decoded)
		}
		if rel, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(rel, "..") {
			return "points outside the repository"
		}
		info, err := os.Stat(path)
		if err != nil {
			return "no such file in the repository"
		}
		if info.IsDir() {
			if fragment != "" {
				return "an anchor on a directory"
			}
			return ""
		}
	}
	if fragment == "" {
		return ""
	}
	if !strings.HasSuffix(path, ".md") {
		if lineAnchor.MatchString(fragment) {
			return ""
		}
		return "an anchor into a file that is not markdown (only #L<line> resolves there)"
	}
	anchors := anchorsOf(path)
	if anchors[fragment] {
		return ""
	}
	rel, _ := filepath.Rel(root, path)
	if near := nearest(fragment, anchors); near != "" {
		return fmt.Sprintf("%s has no heading with anchor #%s (did you mean #%s?)", rel, fragment, near)
	}
	return fmt.Sprintf("%s has no heading with anchor #%s", rel, fragment)
}

// nearest is the anchor that shares the longest prefix with want, to suggest one after a rename.
func nearest(want string, anchors map[string]bool) string {
	best, bestLen := "", 3
	for a := range anchors {
		n := 0
		for n < len(a) && n < len(want) && a[n] == want[n] {
			n++
		}
		if n > bestLen || (n == bestLen && best != "" && a < best) {
			best, bestLen = a, n
		}
	}
	return best
}

func TestAnchorRules(t *testing.T) {
	tests := []struct {
		name     string
		headings []string
		want     []string
	}{
		{"words are lower-cased and joined by hyphens", []string{"## The Leader Agent"}, []string{"the-leader-agent"}},
		{"punctuation is dropped, hyphens and underscores stay", []string{"## Runbook: every election, its budget, and the alerts", "### snake_case and kebab-case!"},
			[]string{"runbook-every-election-its-budget-and-the-alerts", "snake_case-and-kebab-case"}},
		{"a dropped character between spaces leaves two hyphens", []string{"### Failover math (TTL = the candidates' lease duration)"},
			[]string{"failover-math-ttl--the-candidates-lease-duration"}},
		{"code spans keep their text, not their backticks", []string{"## Configuration (`leasegate-config`)", "## `leasegate.io/lease` and `--lease`"},
			[]string{"configuration-leasegate-config", "leasegateiolease-and---lease"}},
		{"an underscore inside a code span stays", []string{"## `leasegate_agent_is_leader`"}, []string{"leasegate_agent_is_leader"}},
		{"emphasis marks go", []string{"## _Why_ a *slice* and **not** a label"}, []string{"why-a-slice-and-not-a-label"}},
		{"links become their text", []string{"## See [the fence](#the-fence) first"}, []string{"see-the-fence-first"}},
		{"closing hashes are not text", []string{"## Install ##"}, []string{"install"}},
		{"letters outside ASCII stay, symbols go", []string{"## Übersicht → naïve µs"}, []string{"übersicht--naïve-µs"}},
		{"duplicates get -1, -2 in order", []string{"## Install", "### Install", "#### Install"}, []string{"install", "install-1", "install-2"}},
		{"a duplicate skips a slug a heading already took", []string{"## a", "## a-1", "## a", "## a"}, []string{"a", "a-1", "a-2", "a-3"}},
		{"a heading spelt like a numbered duplicate gets its own number", []string{"## a", "## a", "## a-1"}, []string{"a", "a-1", "a-1-1"}},
		{"headings in fenced code are no headings", []string{"```yaml", "# AdmissionConfiguration", "```", "## Real"}, []string{"real"}},
		{"escaped punctuation is dropped like any", []string{`## 1\. Install \*now\*`}, []string{"1-install-now"}},
		{"HTML tags go, their text stays", []string{"## Run <code>make</code> once"}, []string{"run-make-once"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, h := range parseMarkdown(strings.Join(tt.headings, "\n")).headings() {
				got = append(got, h.anchor)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("anchors %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLinkChecker(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md":          "# Project\n\n## Install\n\n## Install\n\n<a id=\"explicit\"></a>\n",
		"docs/reference.md":  "# Reference\n\n## Helm values\n",
		"charts/values.yaml": "a: 1\n",
	}
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	anchorsOf := func(path string) map[string]bool {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return parseMarkdown(string(data)).anchors()
	}
	from := filepath.Join(root, "docs", "reference.md")
	tests := []struct {
		name, target, want string
	}{
		{"an anchor in the same page", "#helm-values", ""},
		{"a missing anchor in the same page", "#values", "docs/reference.md has no heading with anchor #values"},
		{"an anchor is case-sensitive", "#Helm-values", "docs/reference.md has no heading with anchor #Helm-values"},
		{"another page by relative path", "../README.md", ""},
		{"a second heading of a name", "../README.md#install-1", ""},
		{"a third one that is not there", "../README.md#install-2", "README.md has no heading with anchor #install-2 (did you mean #install"},
		{"an explicit HTML anchor", "../README.md#explicit", ""},
		{"a page that does not exist", "intro.md", "no such file in the repository"},
		{"a repository file", "../charts/values.yaml", ""},
		{"a line of a repository file", "../charts/values.yaml#L1", ""},
		{"a heading anchor into a file that is not markdown", "../charts/values.yaml#a", "an anchor into a file that is not markdown"},
		{"a directory", "../charts", ""},
		{"a path from the repository root", "/charts/values.yaml", ""},
		{"outside the repository", "../../elsewhere.md", "points outside the repository"},
		{"another site", "https://example.com/x#y", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkLink(root, from, tt.target, anchorsOf)
			if tt.want == "" && got != "" || tt.want != "" && !strings.HasPrefix(got, tt.want) {
				t.Errorf("checkLink(%q) = %q, want %q", tt.target, got, tt.want)
			}
		})
	}
}

func TestLinksFound(t *testing.T) {
	text := strings.Join([]string{
		"See [a](a.md) and ![b](img/b.png \"title\") and [c](<c d.md>).",
		"Not `[code](code.md)` nor:",
		"```",
		"[fenced](fenced.md)",
		"```",
		"[ref]: ref.md#part",
		`<a href="html.md">x</a>`,
		"A [link that",
		"wraps](wrapped.md).",
	}, "\n")
	var got []string
	for _, l := range parseMarkdown(text).links() {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := []string{"1:a.md", "1:img/b.png", "1:c d.md", "6:ref.md#part", "7:html.md", "9:wrapped.md"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("links %q, want %q", got, want)
	}
}
