package contract_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/lease"
)

var update = flag.Bool("update", false, "rewrite testdata/agent-contract.golden from the current code")

const contractGolden = "testdata/agent-contract.golden"

// TestAgentContractIsBackwardCompatible pins the surface between the webhook and the agents it injected:
// the names and values in this package (annotations, labels, environment, port), the agent container's
// name and the environment the webhook reads back from it, the JSON of the status annotation, of
// LEASEGATE_ELECTIONS and of the agent's /leader, and the agent's HTTP routes. Pods keep the agent they
// were injected with until they are created again, so for months agents of several releases run beside
// one webhook, and beside each other on one Lease: a name removed or a value changed here breaks them.
func TestAgentContractIsBackwardCompatible(t *testing.T) {
	got := agentContract(t)
	if *update {
		if err := os.WriteFile(contractGolden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(contractGolden)
	if err != nil {
		t.Fatalf("no %s: run go test ./internal/contract -update to create it", contractGolden)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var removed, added []string
	for _, line := range want {
		if !slices.Contains(got, line) {
			removed = append(removed, line)
		}
	}
	for _, line := range got {
		if !slices.Contains(want, line) {
			added = append(added, line)
		}
	}
	if len(removed) > 0 {
		t.Errorf("the agent-webhook contract lost what agents of earlier releases rely on:\n  %s\n"+
			"their pods run until they are created again, beside this webhook and this release's agents on the same Lease. "+
			"Keep the old name and value working beside the new one (read both), or version it (a new name, the old one still read), "+
			"say so in docs/upgrading.md, then run go test ./internal/contract -update",
			strings.Join(removed, "\n  "))
	}
	if len(added) > 0 {
		t.Errorf("the agent-webhook contract grew (backward compatible, as long as an older agent may ignore it):\n  %s\n"+
			"run go test ./internal/contract -update to pin it", strings.Join(added, "\n  "))
	}
}

// agentContract lists the surface, one line per name, sorted.
func agentContract(t *testing.T) []string {
	var lines []string
	for name, value := range constants(t, "contract.go") {
		lines = append(lines, fmt.Sprintf("contract.%s = %s", name, value))
	}
	lines = append(lines, "agent container name = "+strconv.Quote(inject.AgentContainer))
	for _, name := range inject.GivenEnv {
		lines = append(lines, "webhook reads from the agent container: env "+name)
	}
	for _, route := range routes(t, "../agent/server.go", constants(t, "contract.go")) {
		lines = append(lines, "agent route: "+route)
	}
	lines = append(lines, jsonFields("leasegate.io/status", reflect.TypeFor[inject.Status]())...)
	lines = append(lines, jsonFields("LEASEGATE_ELECTIONS[]", reflect.TypeFor[lease.ElectionSpec]())...)
	lines = append(lines, jsonFields("agent /leader", reflect.TypeFor[lease.Status]())...)
	slices.Sort(lines)
	return lines
}

// constants are the package's constants, name -> Go literal, read from its source: a constant renamed,
// removed or given another value shows here.
func constants(t *testing.T, file string) map[string]string {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s: constant %s is not a literal; the contract golden reads literals", file, name.Name)
				}
				out[name.Name] = lit.Value
			}
		}
	}
	return out
}

// routes are the patterns the agent's server registers (mux.Handle and mux.HandleFunc): string literals
// and this package's constants (contract, name -> Go literal) joined with +.
func routes(t *testing.T, file string, contract map[string]string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Handle" || sel.Sel.Name == "HandleFunc") {
			pattern, ok := routePattern(call.Args[0], contract)
			if !ok {
				t.Fatalf("%s: a route pattern is neither a string literal nor literals and contract constants joined with +", file)
			}
			out = append(out, pattern)
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("%s registers no routes that read as mux.Handle(\"...\") or mux.HandleFunc(\"...\")", file)
	}
	return out
}

func routePattern(e ast.Expr, contract map[string]string) (string, bool) {
	literal := func(s string) (string, bool) {
		v, err := strconv.Unquote(s)
		return v, err == nil
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return literal(e.Value)
		}
	case *ast.SelectorExpr:
		if pkg, ok := e.X.(*ast.Ident); ok && pkg.Name == "contract" {
			if v, ok := contract[e.Sel.Name]; ok {
				return literal(v)
			}
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, okX := routePattern(e.X, contract)
			y, okY := routePattern(e.Y, contract)
			return x + y, okX && okY
		}
	}
	return "", false
}

// jsonFields are a JSON document's field names with their Go types, nested structs followed (time.Time
// and lease.Duration are strings in JSON).
func jsonFields(prefix string, typ reflect.Type) []string {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		out = append(out, fmt.Sprintf("json %s.%s: %s", prefix, name, ft.String()))
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() && ft != reflect.TypeFor[lease.Duration]() {
			out = append(out, jsonFields(prefix+"."+name, ft)...)
		}
	}
	return out
}
