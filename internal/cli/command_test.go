package cli

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"
)

func TestStatusTableFits120Columns(t *testing.T) {
	var out bytes.Buffer
	if err := RenderStatus(&out, exampleStatus(), OutputTable); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if len(line) > 120 {
			t.Errorf("a %d-column line (the rest belongs in -o wide):\n%s", len(line), line)
		}
	}
}

func TestStatusSaysNoLeasesFound(t *testing.T) {
	empty := &StatusList{APIVersion: StatusAPIVersion, Kind: StatusKind, ObservedAt: observedAt, Items: []LeaseStatus{}}
	for _, format := range []string{OutputTable, OutputWide} {
		var out bytes.Buffer
		if err := RenderStatus(&out, empty, format); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), "No leases found") {
			t.Errorf("-o %s of no leases: %q", format, out.String())
		}
	}
	var out bytes.Buffer
	if err := RenderStatus(&out, empty, OutputJSON); err != nil || !strings.Contains(out.String(), `"items": []`) {
		t.Errorf("-o json of no leases is still the shape with empty items: %q (%v)", out.String(), err)
	}
}

func TestExitCode(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"check found errors", runError{FindingsError{Errors: 2}}, ExitFindings},
		{"the API server refused the request (forbidden): the request failed", runError{apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, "orders", errors.New("no"))}, ExitFindings},
		{"a handover refused", runError{errors.New("lease shop/orders is released: nobody holds it")}, ExitFindings},
		{"an unknown -o value", runError{usageError{errors.New("-o xml")}}, ExitUsage},
		{"cobra's own: an unknown flag or command, a wrong number of arguments", errors.New(`unknown command "stats" for "kubectl leasegate"`), ExitUsage},
		{"connection refused", runError{fmt.Errorf("listing leases: %w", refused)}, ExitUnreachable},
		{"a DNS failure", runError{&url.Error{Op: "Get", URL: "https://nowhere.example", Err: &net.DNSError{Err: "no such host", Name: "nowhere.example"}}}, ExitUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.want {
				t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// TestMainExitCodes runs the command line as kubectl does, against a server that is not there.
func TestMainExitCodes(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// Port 1 on loopback: nothing listens, the connection is refused at once.
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: gone, context: {cluster: gone, user: u, namespace: shop}}]
current-context: gone
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"version needs no cluster", []string{"version"}, 0},
		{"an unknown command", []string{"stats"}, ExitUsage},
		{"an unknown flag", []string{"status", "--colour"}, ExitUsage},
		{"too many arguments", []string{"status", "a", "b"}, ExitUsage},
		{"an -o check has not", []string{"check", "-o", "wide"}, ExitUsage},
		{"--timeout without --wait", []string{"check", "--timeout", "1m"}, ExitUsage},
		{"a context the kubeconfig lacks", []string{"status", "--context", "nope"}, ExitUsage},
		{"status against an unreachable server", []string{"status"}, ExitUnreachable},
		{"check against an unreachable server", []string{"check"}, ExitUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			got := Main(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}, append([]string{"--kubeconfig", kubeconfig}, tc.args...))
			if got != tc.want {
				t.Errorf("exit %d, want %d; stderr: %s", got, tc.want, errOut.String())
			}
		})
	}
}

func TestUsageReadsKubectlLeasegate(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out})
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"status", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kubectl leasegate status [LEASE]") || strings.Contains(out.String(), "kubectl-leasegate status") {
		t.Errorf("status --help does not read as kubectl leasegate:\n%s", out.String())
	}
}

func TestCompletions(t *testing.T) {
	list := exampleStatus()
	if got, want := LeaseCompletions(list, false), []string{"cert-manager-controller\theld by <none>", "orders\theld by orders-5d8f7c9b4-x2x", "reports\treleased by <none>"}; !slices.Equal(got, want) {
		t.Errorf("status's LEASE completions %q, want %q", got, want)
	}
	if got, want := LeaseCompletions(list, true), []string{"orders\theld by orders-5d8f7c9b4-x2x", "reports\treleased by <none>"}; !slices.Equal(got, want) {
		t.Errorf("handover's LEASE completions %q, want only the managed leases %q", got, want)
	}
	orders := &StatusList{Items: list.Items[1:2]}
	if got, want := TargetCompletions(orders), []string{"orders-5d8f7c9b4-q7k"}; !slices.Equal(got, want) {
		t.Errorf("--to completions %q, want the Ready candidates but the holder %q", got, want)
	}

	t.Run("-o values, through cobra's __complete as the shim calls it", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"status", "-o", ""}, Outputs},
			{[]string{"check", "-o", ""}, checkOutputs},
		} {
			var out bytes.Buffer
			cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &bytes.Buffer{}})
			cmd.SetOut(&out)
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append([]string{"__complete"}, tc.args...))
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if got := lines[:len(lines)-1]; !slices.Equal(got, tc.want) {
				t.Errorf("%v completes %q, want %q", tc.args, got, tc.want)
			}
		}
	})
}

// TestEveryCheckCodeHasItsSection: each finding links to "### <code>" in docs/plugin.md, so every code a
// Code constant names (this package's sources, whoever adds one) must have that heading.
func TestEveryCheckCodeHasItsSection(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "plugin.md"))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (LG\d+)\b`).FindAllStringSubmatch(string(docs), -1) {
		headings[m[1]] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(spec.Values) {
					continue
				}
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				code, _ := strconv.Unquote(lit.Value)
				codes++
				if !headings[code] {
					t.Errorf("%s (%s, %s) has no \"### %s\" section in docs/plugin.md, which its findings link to", code, name.Name, file, code)
				}
				if want := DocsURL + "#" + strings.ToLower(code); DocsFor(code) != want {
					t.Errorf("DocsFor(%s) = %s, want %s", code, DocsFor(code), want)
				}
			}
			return true
		})
	}
	if codes < 15 {
		t.Errorf("found %d Code constants; the parser missed some", codes)
	}
}

func TestMinKubernetesVersionIsTheChartsKubeVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "leasegate", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		KubeVersion string `json:"kubeVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if want := ">=" + MinKubernetesVersion + "-0"; chart.KubeVersion != want {
		t.Errorf("the chart's kubeVersion is %q, check --pre judges by %q: change MinKubernetesVersion with it", chart.KubeVersion, want)
	}
}

func TestCheckServerVersion(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		want          []string
	}{
		{"the chart's oldest", "v1.30.0", nil},
		{"a newer one with a vendor suffix", "v1.33.2-eks-1234", nil},
		{"too old for the chart", "v1.29.8", []string{SeverityError}},
		{"unreadable: said so, not guessed", "custom", []string{SeverityWarning}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &CheckReport{}
			r.checkServerVersion(tc.version)
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.Severity)
				if f.Code != CodeServerTooOld {
					t.Errorf("code %s", f.Code)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %v, want %v", got, tc.want)
			}
		})
	}
}
