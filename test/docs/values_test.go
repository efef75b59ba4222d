package docs

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework"
)

var update = flag.Bool("update", false, "regenerate the Helm values table of docs/reference.md from the chart's values.schema.json and values.yaml")

// The generated table sits between these lines of docs/reference.md; -update rewrites what is between.
const (
	valuesBegin = "<!-- BEGIN values table: generated from charts/leasegate/values.schema.json and values.yaml by `go test ./test/docs -update`; edit those, not this table -->"
	valuesEnd   = "<!-- END values table -->"
)

// TestHelmValuesTable keeps docs/reference.md's values table the chart's: a row for every value the
// schema has (its path, its default from values.yaml, its description from the schema), in the schema's
// order. A new value in the schema, or a new description, makes it stale; -update regenerates it.
func TestHelmValuesTable(t *testing.T) {
	want, err := valuesTable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(framework.RepoRoot(), "docs", "reference.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	begin, end := strings.Index(text, valuesBegin), strings.Index(text, valuesEnd)
	if begin < 0 || end < begin {
		t.Fatalf("docs/reference.md has no generated values table: put the lines\n%s\n%s\nwhere it goes, then run go test ./test/docs -update", valuesBegin, valuesEnd)
	}
	current := text[begin+len(valuesBegin) : end]
	if current == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(text[:begin+len(valuesBegin)]+want+text[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/reference.md's Helm values table is not the chart's: run go test ./test/docs -update and review the diff\n%s", lineDiff(current, want))
}

// schemaNode is one property of values.schema.json, with its own properties in the file's order.
type schemaNode struct {
	Description string `json:"description"`
	Enum        []any  `json:"enum"`
	Properties  orderedProperties
}

type orderedProperties struct {
	names []string
	nodes map[string]*schemaNode
}

func (n *schemaNode) UnmarshalJSON(data []byte) error {
	var plain struct {
		Description string          `json:"description"`
		Enum        []any           `json:"enum"`
		Properties  json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(data, &plain); err != nil {
		return err
	}
	n.Description, n.Enum = plain.Description, plain.Enum
	if plain.Properties == nil {
		return nil
	}
	names, err := objectKeys(plain.Properties)
	if err != nil {
		return err
	}
	var nodes map[string]*schemaNode
	if err := json.Unmarshal(plain.Properties, &nodes); err != nil {
		return err
	}
	n.Properties = orderedProperties{names: names, nodes: nodes}
	return nil
}

// objectKeys are the keys of a JSON object in the order written.
func objectKeys(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var keys []string
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, key.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// valuesTable renders the values table: one row per leaf of the schema (a property without properties
// of its own: a scalar, a list, or a map such as nodeSelector).
func valuesTable() (string, error) {
	data, err := os.ReadFile(filepath.Join(framework.ChartDir(), "values.schema.json"))
	if err != nil {
		return "", err
	}
	var schema schemaNode
	if err := json.Unmarshal(data, &schema); err != nil {
		return "", fmt.Errorf("values.schema.json: %w", err)
	}
	data, err = os.ReadFile(filepath.Join(framework.ChartDir(), "values.yaml"))
	if err != nil {
		return "", err
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		return "", fmt.Errorf("values.yaml: %w", err)
	}
	var b strings.Builder
	b.WriteString("\n| value | default | description |\n|---|---|---|\n")
	var walk func(path []string, n *schemaNode) error
	walk = func(path []string, n *schemaNode) error {
		if len(n.Properties.names) == 0 {
			if n.Description == "" {
				return fmt.Errorf("value %s has no description in values.schema.json: every value needs one, the reference shows it", strings.Join(path, "."))
			}
			def, ok := lookup(values, path)
			shown := "none"
			if ok {
				shown = "`" + strings.ReplaceAll(flowYAML(def), "|", `\|`) + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.Join(path, "."), shown, cell(describe(n)))
			return nil
		}
		for _, name := range n.Properties.names {
			if err := walk(append(slices.Clip(path), name), n.Properties.nodes[name]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil, &schema); err != nil {
		return "", err
	}
	return b.String(), nil
}

// describe is a value's description, with the values its enum allows unless the description names them.
func describe(n *schemaNode) string {
	d := strings.Join(strings.Fields(n.Description), " ")
	var missing bool
	var allowed []string
	for _, v := range n.Enum {
		s := flowYAML(v)
		allowed = append(allowed, "`"+s+"`")
		missing = missing || !strings.Contains(d, s)
	}
	if missing {
		d = strings.TrimSuffix(d, ".") + "; one of " + strings.Join(allowed, ", ")
	}
	return d
}

// cell escapes what would end a table cell, and the "<" that would start an HTML tag and hide a
// placeholder such as <namespace>.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;").Replace(s)
}

func lookup(values map[string]any, path []string) (any, bool) {
	var v any = values
	for _, name := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[name]; !ok {
			return nil, false
		}
	}
	return v, true
}

// flowYAML writes a default as one line of YAML, as a user would write it with --set or in a values file.
func flowYAML(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		var back any
		if v == "" || yaml.Unmarshal([]byte(v), &back) != nil || back != v || strings.ContainsAny(v, ",[]{}#") {
			return strconv.Quote(v)
		}
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		items := make([]string, len(v))
		for i, item := range v {
			items[i] = flowYAML(item)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		items := make([]string, len(keys))
		for i, k := range keys {
			items[i] = k + ": " + flowYAML(v[k])
		}
		return "{" + strings.Join(items, ", ") + "}"
	}
	return fmt.Sprint(v)
}

func TestFlowYAML(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"an empty string is quoted", `""`, `""`},
		{"a plain string is not", `ghcr.io/leasegate`, `ghcr.io/leasegate`},
		{"a string that reads as a number is quoted", `"1"`, `"1"`},
		{"a string that reads as a boolean is quoted", `"true"`, `"true"`},
		{"a number", `1000`, `1000`},
		{"an empty list", `[]`, `[]`},
		{"a list", `[system:masters]`, `[system:masters]`},
		{"a map, keys sorted", `{requests: {memory: 64Mi, cpu: 50m}}`, `{requests: {cpu: 50m, memory: 64Mi}}`},
		{"a URL", `https://github.com/leasegate/leasegate/blob/main/README.md`, `https://github.com/leasegate/leasegate/blob/main/README.md`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			if err := yaml.Unmarshal([]byte(tt.yaml), &v); err != nil {
				t.Fatal(err)
			}
			if got := flowYAML(v); got != tt.want {
				t.Errorf("flowYAML(%s) = %s, want %s", tt.yaml, got, tt.want)
			}
		})
	}
}

// lineDiff lists the lines only one side has, to show what regeneration would change.
func lineDiff(have, want string) string {
	var b strings.Builder
	haveLines, wantLines := strings.Split(have, "\n"), strings.Split(want, "\n")
	for _, l := range haveLines {
		if !slices.Contains(wantLines, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range wantLines {
		if !slices.Contains(haveLines, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
