package docs

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/leasegate/leasegate/internal/agent"
	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	_ "github.com/leasegate/leasegate/internal/manager" // every collector leasegate-webhook registers
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
	"github.com/leasegate/leasegate/test/framework/checkout"
)

const referencePage = "docs/reference.md"

// The sections of docs/reference.md the test reads, by heading text. Each names its items in the code
// spans of a table column.
const (
	sectionLabels         = "Labels"
	sectionAnnotations    = "Annotations"
	sectionAppEnv         = "Environment of the app containers"
	sectionConfig         = "`leasegate-config` fields"
	sectionMultiAPI       = "MultiClusterLease API"
	sectionAgentEnv       = "Agent settings"
	sectionAgentMetric    = "Agent metrics"
	sectionWebhookFlag    = "Webhook flags"
	sectionWebhookMet     = "Webhook metrics"
	sectionAgentPaths     = "Agent endpoints"
	sectionWebhookPaths   = "Webhook endpoints"
	sectionWebhookEntries = "Webhook configuration entries"
	sectionReasons        = "Decision reasons"
	sectionEvents         = "Events"
)

func reference(t *testing.T) markdown {
	t.Helper()
	return readMarkdown(t, filepath.Join(checkout.RepoRoot(), referencePage))
}

// documented are the code spans of column col (from 0) of the tables in a section of the reference (the
// first heading of that text, down to the next of its level or higher).
func documented(t *testing.T, ref markdown, section string, col int) []string {
	t.Helper()
	lines, ok := ref.section(section)
	if !ok {
		t.Fatalf("%s has no heading %q: the reference test reads that section", referencePage, section)
	}
	var out []string
	for _, c := range tableCells(lines, col) {
		out = append(out, codeSpans(c)...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: section %q has no table naming anything in column %d", referencePage, section, col+1)
	}
	return out
}

// compare reports, both ways, what the code has that the reference does not and the reverse; section
// is the heading of the reference's section, or several.
func compare(t *testing.T, what, source string, inCode, inDocs []string, section string) {
	t.Helper()
	for _, name := range uniqueSorted(inCode) {
		if !slices.Contains(inDocs, name) {
			t.Errorf("%s %s is in the code (%s) but not in %s, section %s: add a row for it", what, name, source, referencePage, section)
		}
	}
	for _, name := range uniqueSorted(inDocs) {
		if !slices.Contains(inCode, name) {
			t.Errorf("%s %s is in %s, section %s, but not in the code (%s): remove or rename its row", what, name, referencePage, section, source)
		}
	}
}

func uniqueSorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// contractConstants are the string constants of internal/contract, by name, read from its source (Go
// cannot list a package's constants otherwise).
func contractConstants(t *testing.T) map[string]string {
	t.Helper()
	return stringConstants(t, filepath.Join(checkout.RepoRoot(), "internal", "contract"))
}

func stringConstants(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, file := range goFiles(t, dir) {
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}

// goFiles are the parsed non-test Go files of a directory.
func goFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestReferenceNamesEveryLabelAndAnnotation: the leasegate.io/ names of internal/contract are exactly
// those the Labels and Annotations sections name.
func TestReferenceNamesEveryLabelAndAnnotation(t *testing.T) {
	var inCode []string
	for _, v := range contractConstants(t) {
		if strings.HasPrefix(v, "leasegate.io/") {
			inCode = append(inCode, v)
		}
	}
	ref := reference(t)
	var inDocs []string
	for _, section := range []string{sectionLabels, sectionAnnotations} {
		for _, name := range documented(t, ref, section, 0) {
			if strings.HasPrefix(name, "leasegate.io/") {
				inDocs = append(inDocs, name)
			}
		}
	}
	compare(t, "label or annotation", "internal/contract/contract.go", inCode, inDocs, strconv.Quote(sectionLabels)+" or "+strconv.Quote(sectionAnnotations))
}

var (
	usageFlag = regexp.MustCompile(`(?m)^  -(\S+)`)
	usageEnv  = regexp.MustCompile(`\(env (\w+)\)`)
)

// agentSettings are the agent's settings as its usage text lists them: environment variable -> flag.
func agentSettings(t *testing.T) map[string]string {
	t.Helper()
	var usage bytes.Buffer
	agent.Usage(&usage)
	out := map[string]string{}
	entries := usageFlag.FindAllStringSubmatchIndex(usage.String(), -1)
	for i, e := range entries {
		end := usage.Len()
		if i+1 < len(entries) {
			end = entries[i+1][0]
		}
		env := usageEnv.FindStringSubmatch(usage.String()[e[0]:end])
		if env == nil {
			t.Fatalf("agent flag -%s names no environment variable in its usage: every agent setting has one", usage.String()[e[2]:e[3]])
		}
		out[env[1]] = "--" + usage.String()[e[2]:e[3]]
	}
	if len(out) == 0 {
		t.Fatal("agent.Usage lists no settings")
	}
	return out
}

// getenvCalls are the variables the Go files of dir read by name with os.Getenv or os.LookupEnv, or with
// a function value named getenv (os.Getenv passed in, so that a unit test can pass its own).
func getenvCalls(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, dir) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			switch fun := call.Fun.(type) {
			case *ast.Ident:
				if fun.Name != "getenv" {
					return true
				}
			case *ast.SelectorExpr:
				if pkg, ok := fun.X.(*ast.Ident); !ok || pkg.Name != "os" || (fun.Sel.Name != "Getenv" && fun.Sel.Name != "LookupEnv") {
					return true
				}
			default:
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, _ := strconv.Unquote(lit.Value)
				out = append(out, name)
			}
			return true
		})
	}
	return out
}

// TestReferenceNamesEveryAgentSetting: the agent's settings (environment variable and flag, from its
// settings table) and whatever else cmd/agent reads from the environment are the rows of Agent
// settings, each variable beside its own flag; the variables internal/contract gives the app containers
// are those of their section.
func TestReferenceNamesEveryAgentSetting(t *testing.T) {
	settings := agentSettings(t)
	ref := reference(t)
	lines, ok := ref.section(sectionAgentEnv)
	if !ok {
		t.Fatalf("%s has no heading %q", referencePage, sectionAgentEnv)
	}
	envCol, flagCol := tableCells(lines, 0), tableCells(lines, 1)
	docFlags := map[string][]string{}
	var docEnv []string
	for i, c := range envCol {
		for _, env := range codeSpans(c) {
			docEnv = append(docEnv, env)
			docFlags[env] = codeSpans(flagCol[i])
		}
	}
	inCode := append(slices.Collect(maps.Keys(settings)), getenvCalls(t, filepath.Join(checkout.RepoRoot(), "cmd", "agent"))...)
	compare(t, "agent environment variable", "internal/agent/settings.go and cmd/agent", inCode, docEnv, strconv.Quote(sectionAgentEnv))
	for env, flag := range settings {
		if got, ok := docFlags[env]; ok && !slices.Equal(got, []string{flag}) {
			t.Errorf("%s, section %q: %s's flag is %s, the row says %q", referencePage, sectionAgentEnv, env, flag, got)
		}
	}

	// Given to the app containers: the Env constants of internal/contract that are no agent setting must
	// be in their section, and what it names must be Env constants (the pod's identity and the lease
	// are both).
	var required, allowed []string
	for name, v := range contractConstants(t) {
		if !strings.HasPrefix(name, "Env") {
			continue
		}
		if strings.HasSuffix(v, "_") {
			v += "<ELECTION>" // a prefix: the variable's name ends with the election's
		}
		allowed = append(allowed, v)
		if _, setting := settings[v]; !setting {
			required = append(required, v)
		}
	}
	inDocs := documented(t, ref, sectionAppEnv, 0)
	for _, v := range uniqueSorted(required) {
		if !slices.Contains(inDocs, v) {
			t.Errorf("app container environment variable %s is in the code (internal/contract/contract.go) but not in %s, section %q: add a row for it", v, referencePage, sectionAppEnv)
		}
	}
	for _, v := range uniqueSorted(inDocs) {
		if !slices.Contains(allowed, v) {
			t.Errorf("app container environment variable %s is in %s, section %q, but not in the code (internal/contract/contract.go): remove or rename its row", v, referencePage, sectionAppEnv)
		}
	}
}

// TestReferenceNamesEveryWebhookFlag: the flags leasegate-webhook -h lists (its own, controller-runtime's
// --kubeconfig and zap's logging flags) are the rows of Webhook flags. The binary is built and asked,
// so the flag set is exactly the one cmd/webhook assembles.
func TestReferenceNamesEveryWebhookFlag(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not in PATH: this test runs `go run ./cmd/webhook -h`: %v", err)
	}
	cmd := exec.Command(goTool, "run", "./cmd/webhook", "-h")
	cmd.Dir = checkout.RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./cmd/webhook -h: %v\n%s", err, out)
	}
	var inCode []string
	for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
		inCode = append(inCode, "--"+m[1])
	}
	if len(inCode) == 0 {
		t.Fatalf("leasegate-webhook -h lists no flags:\n%s", out)
	}
	compare(t, "webhook flag", "cmd/webhook", inCode, documented(t, reference(t), sectionWebhookFlag, 0), strconv.Quote(sectionWebhookFlag))
}

// metric is a metric's name and its label names, as the code registers it or the reference writes it
// (name{label,label}).
type metric struct {
	name   string
	labels []string
}

func (m metric) String() string {
	if len(m.labels) == 0 {
		return m.name
	}
	return m.name + "{" + strings.Join(m.labels, ",") + "}"
}

var documentedMetric = regexp.MustCompile(`^([a-z_:][a-z0-9_:]*)(?:\{([a-z_,]*)\})?$`)

func documentedMetrics(t *testing.T, section string) []string {
	t.Helper()
	var out []string
	for _, span := range documented(t, reference(t), section, 0) {
		m := documentedMetric.FindStringSubmatch(span)
		if m == nil {
			t.Errorf("%s, section %q: %q is not a metric as name{label,...}", referencePage, section, span)
			continue
		}
		labels := strings.Split(m[2], ",")
		if m[2] == "" {
			labels = nil
		}
		slices.Sort(labels)
		out = append(out, metric{m[1], labels}.String())
	}
	return out
}

var descFields = regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)

// TestReferenceNamesEveryWebhookMetric: the leasegate_ metrics registered with controller-runtime's
// registry, which leasegate-webhook serves, each with its labels, are the rows of Webhook metrics. They
// are read from the collectors' descriptions, so a vector that has not counted anything yet is there too.
func TestReferenceNamesEveryWebhookMetric(t *testing.T) {
	collector, ok := metrics.Registry.(prometheus.Collector)
	if !ok {
		t.Fatalf("controller-runtime's metrics.Registry (%T) cannot describe its collectors", metrics.Registry)
	}
	descs := make(chan *prometheus.Desc)
	go func() {
		collector.Describe(descs)
		close(descs)
	}()
	var inCode []string
	for d := range descs {
		m := descFields.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the description %s", d)
		}
		if !strings.HasPrefix(m[1], "leasegate_") {
			continue // controller-runtime's and client-go's own
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if name, _, ok := strings.Cut(l, "="); ok {
				labels = append(labels, name)
			}
		}
		for _, l := range strings.Split(m[3], ",") {
			if l != "" {
				labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
			}
		}
		slices.Sort(labels)
		inCode = append(inCode, metric{m[1], labels}.String())
	}
	compare(t, "webhook metric", "the collectors registered with controller-runtime's metrics.Registry", inCode, documentedMetrics(t, sectionWebhookMet), strconv.Quote(sectionWebhookMet))
}

// TestReferenceNamesEveryAgentMetric runs an agent with every optional part on (the mutation gate, a
// MultiClusterLease), against an API server that is not there, and reads its /metrics: the leasegate_
// metrics it serves, with their labels, are the rows of Agent metrics.
func TestReferenceNamesEveryAgentMetric(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
current-context: none
contexts: [{name: none, context: {cluster: none, user: none}}]
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := freeAddress(t)
	settings, err := agent.LoadSettings([]string{
		"--pod-name", "p", "--pod-namespace", "ns", "--pod-uid", "u", "--lease", "l", "--kubeconfig", kubeconfig,
		"--listen", listen, "--lease-kind", contract.LeaseKindMultiClusterLease,
		"--gate-upstream", "127.0.0.1:1", "--gate-listen", "127.0.0.1:0",
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(settings, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})

	families := scrape(t, "http://"+listen+"/metrics", stopped, &runErr)
	var inCode []string
	for name, family := range families {
		if !strings.HasPrefix(name, "leasegate_") {
			continue // the Go runtime's and the process's
		}
		var labels []string
		for _, m := range family.GetMetric() {
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		slices.Sort(labels)
		inCode = append(inCode, metric{name, slices.Compact(labels)}.String())
	}
	compare(t, "agent metric", "internal/agent and internal/gate, as a running agent serves them", inCode, documentedMetrics(t, sectionAgentMetric), strconv.Quote(sectionAgentMetric))
}

// freeAddress is a loopback address with a port nothing listens on now.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape reads a /metrics endpoint, waiting for the agent to listen; it fails if the agent stops first.
func scrape(t *testing.T, url string, stopped <-chan struct{}, runErr *error) map[string]*dto.MetricFamily {
	t.Helper()
	for {
		resp, err := http.Get(url)
		if err != nil {
			select {
			case <-stopped:
				t.Fatalf("the agent stopped before serving %s: %v", url, *runErr)
			case <-time.After(10 * time.Millisecond): // Run has not started serving yet
			}
			continue
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		return families
	}
}

// TestReferenceNamesEveryConfigField: the json fields of config.Config, down to the types of package
// config, are the rows of the leasegate-config section.
func TestReferenceNamesEveryConfigField(t *testing.T) {
	inCode := jsonFields(reflect.TypeFor[config.Config](), "")
	compare(t, "leasegate-config field", "the json tags of internal/config's types", inCode, documented(t, reference(t), sectionConfig, 0), strconv.Quote(sectionConfig))
}

// TestReferenceNamesEveryMultiClusterLeaseField: the spec and status fields of the MultiClusterLease
// API are the rows of its section.
func TestReferenceNamesEveryMultiClusterLeaseField(t *testing.T) {
	inCode := append(jsonFields(reflect.TypeFor[v1alpha1.MultiClusterLeaseSpec](), "spec."), jsonFields(reflect.TypeFor[v1alpha1.MultiClusterLeaseStatus](), "status.")...)
	var inDocs []string
	for _, name := range documented(t, reference(t), sectionMultiAPI, 0) {
		if strings.HasPrefix(name, "spec.") || strings.HasPrefix(name, "status.") {
			inDocs = append(inDocs, name)
		}
	}
	compare(t, "MultiClusterLease field", "pkg/multicluster/v1alpha1/types.go", inCode, inDocs, strconv.Quote(sectionMultiAPI))
}

// jsonFields are the json names of a struct's fields, as dotted paths (a list's elements as name[]):
// fields whose type is a struct of the struct's own package are followed, others (metav1.Duration,
// corev1.ResourceRequirements) are one field.
func jsonFields(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := f.Type
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" || strings.Contains(opts, "inline") {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			out = append(out, jsonFields(ft, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
			if ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath() {
				path += "[]"
			}
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath() {
			out = append(out, jsonFields(ft, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

func TestJSONFields(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type embedded struct {
		Kind string `json:"kind"`
	}
	type outer struct {
		embedded `json:",inline"`
		Plain    string        `json:"plain,omitempty"`
		Nested   inner         `json:"nested"`
		List     []inner       `json:"list"`
		Strings  []string      `json:"strings"`
		Foreign  time.Duration `json:"foreign"`
		Skipped  string        `json:"-"`
	}
	got := jsonFields(reflect.TypeFor[outer](), "")
	want := []string{"kind", "plain", "nested.a", "list[].a", "strings", "foreign"}
	if !slices.Equal(got, want) {
		t.Errorf("jsonFields = %q, want %q", got, want)
	}
}

// TestReferenceNamesEveryEndpoint: the agent's HTTP paths (as internal/agent registers them on its mux,
// from internal/contract's constants) are the rows of Agent endpoints, and the webhook's admission paths
// (internal/manager's *Path constants) those of Webhook endpoints.
func TestReferenceNamesEveryEndpoint(t *testing.T) {
	contractPaths := contractConstants(t)
	// pattern is the value of a mux pattern: string literals and contract constants joined with +.
	var pattern func(e ast.Expr) (string, bool)
	pattern = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				v, err := strconv.Unquote(e.Value)
				return v, err == nil
			}
		case *ast.SelectorExpr:
			if pkg, ok := e.X.(*ast.Ident); ok && pkg.Name == "contract" {
				v, ok := contractPaths[e.Sel.Name]
				return v, ok
			}
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				x, okX := pattern(e.X)
				y, okY := pattern(e.Y)
				return x + y, okX && okY
			}
		}
		return "", false
	}
	var agentPaths []string
	for _, f := range goFiles(t, filepath.Join(checkout.RepoRoot(), "internal", "agent")) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			p, ok := pattern(call.Args[0])
			if !ok {
				t.Fatalf("a mux pattern in internal/agent is neither a string literal nor literals and contract constants joined with +: update this test")
			}
			_, path, _ := strings.Cut(p, " ") // "GET /leader/{election}"
			agentPaths = append(agentPaths, strings.NewReplacer("{", "<", "}", ">").Replace(path))
			return true
		})
	}
	ref := reference(t)
	compare(t, "agent endpoint", "the mux of internal/agent/server.go", agentPaths, documented(t, ref, sectionAgentPaths, 0), strconv.Quote(sectionAgentPaths))

	var webhookPaths []string
	for name, v := range stringConstants(t, filepath.Join(checkout.RepoRoot(), "internal", "manager")) {
		if strings.HasSuffix(name, "Path") {
			webhookPaths = append(webhookPaths, v)
		}
	}
	var documentedPaths []string
	for _, p := range documented(t, ref, sectionWebhookPaths, 1) {
		if strings.HasPrefix(p, "/mutate-") || strings.HasPrefix(p, "/validate-") {
			documentedPaths = append(documentedPaths, p)
		}
	}
	compare(t, "webhook path", "the *Path constants of internal/manager", webhookPaths, documentedPaths, strconv.Quote(sectionWebhookPaths))
}

// TestReferenceNamesEveryWebhookEntry: the entries of the webhook configurations the chart renders
// (config/webhook/webhooks.yaml, which test/chart keeps the chart's) are the rows of their section.
func TestReferenceNamesEveryWebhookEntry(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(checkout.RepoRoot(), "config", "webhook", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var inCode []string
	for _, m := range regexp.MustCompile(`(?m)^- name: (\S+)`).FindAllStringSubmatch(string(data), -1) {
		inCode = append(inCode, m[1])
	}
	compare(t, "webhook configuration entry", "config/webhook/webhooks.yaml, the chart's templates/webhooks.yaml", inCode, documented(t, reference(t), sectionWebhookEntries, 0), strconv.Quote(sectionWebhookEntries))
}

// TestReferenceNamesEveryDecisionReason: the reason codes of internal/validate (its reasonCodes table)
// are the rows of Decision reasons.
func TestReferenceNamesEveryDecisionReason(t *testing.T) {
	var inCode []string
	for _, f := range goFiles(t, filepath.Join(checkout.RepoRoot(), "internal", "validate")) {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "reasonCodes" || len(vs.Values) != 1 {
				return true
			}
			lit, ok := vs.Values[0].(*ast.CompositeLit)
			if !ok {
				t.Fatalf("internal/validate's reasonCodes is no composite literal: update this test")
			}
			for _, elt := range lit.Elts {
				if kv, ok := elt.(*ast.KeyValueExpr); ok {
					if s, ok := kv.Value.(*ast.BasicLit); ok && s.Kind == token.STRING {
						code, _ := strconv.Unquote(s.Value)
						inCode = append(inCode, code)
					}
				}
			}
			return false
		})
	}
	if len(inCode) == 0 {
		t.Fatal("found no reasonCodes in internal/validate: update this test")
	}
	compare(t, "decision reason", "reasonCodes in internal/validate/decide.go", inCode, documented(t, reference(t), sectionReasons, 0), strconv.Quote(sectionReasons))
}

// TestReferenceNamesEveryEventReason: the reasons of the Events leasegate-webhook records (every
// Recorder.Eventf(regarding, related, type, reason, ...) under internal/) are the rows of Events.
func TestReferenceNamesEveryEventReason(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(checkout.RepoRoot(), "internal", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var inCode []string
	contractConstants := stringConstants(t, filepath.Join(checkout.RepoRoot(), "internal", "contract"))
	for _, dir := range dirs {
		constants := stringConstants(t, dir)
		for _, f := range goFiles(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 5 {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Eventf" {
					return true
				}
				switch reason := call.Args[3].(type) {
				case *ast.BasicLit:
					v, _ := strconv.Unquote(reason.Value)
					inCode = append(inCode, v)
				case *ast.Ident:
					v, ok := constants[reason.Name]
					if !ok {
						t.Errorf("%s: the reason %s of an Eventf call is no string constant of its package: name it with one, or teach this test", dir, reason.Name)
					}
					inCode = append(inCode, v)
				case *ast.SelectorExpr:
					pkg, ok := reason.X.(*ast.Ident)
					v, found := contractConstants[reason.Sel.Name]
					if !ok || pkg.Name != "contract" || !found {
						t.Errorf("%s: the reason of an Eventf call is a selector other than a string constant of internal/contract: teach this test", dir)
					}
					inCode = append(inCode, v)
				default:
					t.Errorf("%s: an Eventf call whose reason is neither a string nor a constant of its package or internal/contract: teach this test", dir)
				}
				return true
			})
		}
	}
	compare(t, "Event reason", "the Eventf calls under internal/", inCode, documented(t, reference(t), sectionEvents, 0), strconv.Quote(sectionEvents))
}
