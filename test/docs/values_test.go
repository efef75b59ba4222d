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

	"github.com/leasegate/leasegate/test/framework/checkout"
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
	schema, err := os.ReadFile(filepath.Join(checkout.ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(checkout.ChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := valuesTable(schema, values)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(checkout.RepoRoot(), "docs", "reference.md")
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
	Description string
	Enum        []any
	// Ref is a "$ref" to a definition of the same file ("#/definitions/<name>" or "#/$defs/<name>").
	Ref         string
	Properties  orderedProperties
	Definitions map[string]*schemaNode
}

type orderedProperties struct {
	names []string
	nodes map[string]*schemaNode
}

func (n *schemaNode) UnmarshalJSON(data []byte) error {
	var plain struct {
		Description string                 `json:"description"`
		Enum        []any                  `json:"enum"`
		Ref         string                 `json:"$ref"`
		Properties  json.RawMessage        `json:"properties"`
		Definitions map[string]*schemaNode `json:"definitions"`
		Defs        map[string]*schemaNode `json:"$defs"`
	}
	if err := json.Unmarshal(data, &plain); err != nil {
		return err
	}
	n.Description, n.Enum, n.Ref = plain.Description, plain.Enum, plain.Ref
	n.Definitions = plain.Definitions
	if n.Definitions == nil {
		n.Definitions = plain.Defs
	}
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

// resolve finds the definition a local "$ref" names.
func (n *schemaNode) resolve(ref string) (*schemaNode, error) {
	for _, prefix := range []string{"#/definitions/", "#/$defs/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			if def := n.Definitions[name]; def != nil {
				return def, nil
			}
		}
	}
	return nil, fmt.Errorf("$ref %q names no definition of values.schema.json", ref)
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
func valuesTable(schemaJSON, valuesYAML []byte) (string, error) {
	var schema schemaNode
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		return "", fmt.Errorf("values.schema.json: %w", err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(valuesYAML, &values); err != nil {
		return "", fmt.Errorf("values.yaml: %w", err)
	}
	var b strings.Builder
	b.WriteString("\n| value | default | description |\n|---|---|---|\n")
	var walk func(path []string, n *schemaNode) error
	walk = func(path []string, n *schemaNode) error {
		if n.Ref != "" {
			def, err := schema.resolve(n.Ref)
			if err != nil {
				return fmt.Errorf("value %s: %w", strings.Join(path, "."), err)
			}
			resolved := *def
			if n.Description != "" { // the property's own description says more than the shared one
				resolved.Description = n.Description
			}
			n = &resolved
		}
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

func TestValuesTableRows(t *testing.T) {
	tests := []struct {
		name, schema, values string
		want                 []string
		wantErr              string
	}{
		{"rows in the schema's order, nested values by their path",
			`{"properties": {"z": {"description": "last"}, "a": {"properties": {"b": {"description": "nested"}}}}}`, "z: 1\na: {b: x}\n",
			[]string{"| `z` | `1` | last |", "| `a.b` | `x` | nested |"}, ""},
		{"a map or a list is one row", `{"properties": {"labels": {"type": "object", "description": "extra labels"}}}`, "labels: {k: v}\n",
			[]string{"| `labels` | `{k: v}` | extra labels |"}, ""},
		{"allowed values are added unless the description names them",
			`{"properties": {"p": {"description": "policy", "enum": ["Fail", "Ignore"]}, "q": {"description": "Fail or Ignore", "enum": ["Fail", "Ignore"]}}}`, "p: Fail\nq: Ignore\n",
			[]string{"| `p` | `Fail` | policy; one of `Fail`, `Ignore` |", "| `q` | `Ignore` | Fail or Ignore |"}, ""},
		{"a value values.yaml leaves out", `{"properties": {"digest": {"description": "image digest"}}}`, "{}\n",
			[]string{"| `digest` | none | image digest |"}, ""},
		{"pipes and placeholders are escaped", `{"properties": {"l": {"description": "a|b as <namespace>/<name>"}}}`, "l: \"x|y\"\n",
			[]string{"| `l` | `x\\|y` | a\\|b as &lt;namespace>/&lt;name> |"}, ""},
		{"a $ref is followed, the property's own description first",
			`{"definitions": {"res": {"description": "resources", "properties": {"limits": {"description": "limits"}}}}, "properties": {"r": {"$ref": "#/definitions/res"}}}`, "r: {limits: {}}\n",
			[]string{"| `r.limits` | `{}` | limits |"}, ""},
		{"a value without a description is an error", `{"properties": {"x": {"type": "string"}}}`, "x: a\n",
			nil, "value x has no description in values.schema.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := valuesTable([]byte(tt.schema), []byte(tt.values))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rows := strings.Split(strings.TrimSpace(table), "\n")[2:]
			if !slices.Equal(rows, tt.want) {
				t.Errorf("rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
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
