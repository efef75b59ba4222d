package lease

import (
	"fmt"
	"sort"
	"strings"
)

// A HolderFormat says how the holders of a lease name a pod in holderIdentity. Controllers differ:
// leasegate's agent writes "<pod>_<uid>", client-go's examples and controller-runtime "<hostname>_<uuid>",
// cert-manager "<hostname>-external-cert-manager-controller", many controllers the pod name alone, and a
// pod's hostname is its name. The fence reads a holder through the format of the guard, so it can tell
// whether the holder is the pod asking.
//
// A format is written as a template: literal text around exactly one {pod}, and at most one of {uid}
// (the pod's UID, matched exactly) or {any} (any text, such as a random suffix), each separated from
// {pod} by literal text. {any} must be separated from {pod} by a character no pod name has (pod names
// are DNS subdomains: a-z, 0-9, '-', '.'), or it would be ambiguous: with "{pod}-{any}", pod "web" would
// hold the lease of pod "web-1". Well-known formats also have a preset name.
//
// Matching never allocates: it runs in the fence for every guarded write.
type HolderFormat struct {
	template string
	// The template is lits[0] vars[0] lits[1] vars[1] lits[2]; vars[1] is none when it has one placeholder.
	lits [3]string
	vars [2]placeholder
}

type placeholder uint8

const (
	none placeholder = iota
	podName
	podUID
	anyText
)

var placeholderNames = map[string]placeholder{"{pod}": podName, "{uid}": podUID, "{any}": anyText}

// Presets are the well-known holder formats by name.
var Presets = map[string]string{
	// leasegate's agent: the UID tells a recreated pod (a StatefulSet replica) from its predecessor.
	"leasegate-agent": "{pod}" + identitySeparator + "{uid}",
	// client-go's examples, controller-runtime and kubebuilder's scaffolds: "<hostname>_<random UUID>".
	"client-go": "{pod}_{any}",
	// cert-manager's controller (cmd/controller/app/controller.go).
	"cert-manager": "{pod}-external-cert-manager-controller",
	// The pod name or the hostname alone: the kubernetes-csi sidecars, the snapshot controller, and
	// controllers that write POD_NAME.
	"pod-name": "{pod}",
}

// AgentFormat is how leasegate's agents name themselves: Identity's format.
var AgentFormat = MustParseHolderFormat("leasegate-agent")

// ClientGoFormat is client-go's and controller-runtime's default identity.
var ClientGoFormat = MustParseHolderFormat("client-go")

// ParseHolderFormat reads a preset name or a template. Its errors say what is wrong and how to fix it.
func ParseHolderFormat(s string) (*HolderFormat, error) {
	if template, ok := Presets[s]; ok {
		f, err := parseTemplate(template)
		if err == nil {
			f.template = s
		}
		return f, err
	}
	if !strings.ContainsAny(s, "{}") {
		return nil, fmt.Errorf("neither a preset (%s) nor a template with {pod}", strings.Join(PresetNames(), ", "))
	}
	return parseTemplate(s)
}

// MustParseHolderFormat is ParseHolderFormat for formats known to be valid.
func MustParseHolderFormat(s string) *HolderFormat {
	f, err := ParseHolderFormat(s)
	if err != nil {
		panic(err)
	}
	return f
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for name := range Presets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func parseTemplate(s string) (*HolderFormat, error) {
	f := &HolderFormat{template: s}
	rest, n := s, 0
	for {
		open := strings.IndexByte(rest, '{')
		if closing := strings.IndexByte(rest, '}'); closing >= 0 && (open < 0 || closing < open) {
			return nil, fmt.Errorf("a '}' without its '{'")
		}
		if open < 0 {
			f.lits[n] = rest
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("a '{' without its '}'")
		}
		name := rest[open : open+end+1]
		p, ok := placeholderNames[name]
		if !ok {
			return nil, fmt.Errorf("unknown placeholder %s; use {pod}, {uid} or {any}", name)
		}
		if n == len(f.vars) {
			return nil, fmt.Errorf("at most two placeholders: {pod}, and {uid} or {any}")
		}
		f.lits[n], f.vars[n] = rest[:open], p
		rest = rest[open+end+1:]
		n++
	}
	switch {
	case f.vars[0] != podName && f.vars[1] != podName:
		return nil, fmt.Errorf("must contain {pod}")
	case f.vars[0] == f.vars[1]:
		return nil, fmt.Errorf("{pod} may appear only once")
	case f.vars[1] != none && f.lits[1] == "":
		return nil, fmt.Errorf("separate {pod} from the other placeholder with literal text, such as '_'")
	case (f.vars[0] == anyText || f.vars[1] == anyText) && !hasNonPodNameChar(f.lits[1]):
		return nil, fmt.Errorf("ambiguous: with only %q between {pod} and {any}, pod \"web\" would hold the lease of pod \"web-1\"; "+
			"separate them with a character no pod name has, such as '_', or use {uid}", f.lits[1])
	}
	return f, nil
}

// isPodNameChar reports whether c may occur in a pod name, a DNS subdomain.
func isPodNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}

func hasNonPodNameChar(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isPodNameChar(s[i]) {
			return true
		}
	}
	return false
}

// NamesUID reports whether the format carries the pod's UID ({uid}). Without it a holder names a pod by
// its name alone, which a pod of another namespace may share.
func (f *HolderFormat) NamesUID() bool { return f.vars[0] == podUID || f.vars[1] == podUID }

// String is the format as written: a preset name or a template.
func (f *HolderFormat) String() string { return f.template }

// Names reports whether holder names the pod with this name and UID. It does not allocate.
func (f *HolderFormat) Names(holder, pod, uid string) bool {
	value := func(p placeholder) string {
		if p == podName {
			return pod
		}
		return uid
	}
	rest, ok := strings.CutPrefix(holder, f.lits[0])
	if !ok {
		return false
	}
	if f.vars[0] == anyText {
		// lits[0] {any} lits[1] {pod} lits[2]: read from the end.
		if rest, ok = strings.CutSuffix(rest, f.lits[2]); !ok {
			return false
		}
		if rest, ok = strings.CutSuffix(rest, pod); !ok {
			return false
		}
		_, ok = strings.CutSuffix(rest, f.lits[1])
		return ok
	}
	if rest, ok = strings.CutPrefix(rest, value(f.vars[0])); !ok {
		return false
	}
	if rest, ok = strings.CutPrefix(rest, f.lits[1]); !ok {
		return false
	}
	switch f.vars[1] {
	case none:
		return rest == ""
	case anyText:
		return strings.HasSuffix(rest, f.lits[2])
	}
	rest, ok = strings.CutPrefix(rest, value(f.vars[1]))
	return ok && rest == f.lits[2]
}

// Fits reports whether holder names some pod in this format: literal text where the template has it, a
// possible pod name for {pod}, and text for {uid}. A holder that fits names a pod, even if not the one
// asking; one that does not may be written in another format.
func (f *HolderFormat) Fits(holder string) bool {
	rest, ok := strings.CutPrefix(holder, f.lits[0])
	if !ok {
		return false
	}
	if f.vars[1] == none {
		rest, ok = strings.CutSuffix(rest, f.lits[1])
		return ok && isPodName(rest)
	}
	if rest, ok = strings.CutSuffix(rest, f.lits[2]); !ok {
		return false
	}
	// rest is <first> lits[1] <second>: try every place lits[1] occurs.
	for offset := 0; ; {
		i := strings.Index(rest[offset:], f.lits[1])
		if i < 0 {
			return false
		}
		first, second := rest[:offset+i], rest[offset+i+len(f.lits[1]):]
		if fitsPlaceholder(f.vars[0], first) && fitsPlaceholder(f.vars[1], second) {
			return true
		}
		offset += i + 1
	}
}

func fitsPlaceholder(p placeholder, s string) bool {
	switch p {
	case podName:
		return isPodName(s)
	case podUID:
		return s != ""
	}
	return true
}

func isPodName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isPodNameChar(s[i]) {
			return false
		}
	}
	return true
}

// SuggestFormat is the format in which holder names the pod with this name and UID, for a holder that
// contains the pod's name but does not fit the format a guard reads it with: a preset's name where one
// matches, else a template. "" when no valid format comes of it.
func SuggestFormat(holder, pod, uid string) string {
	if !strings.Contains(holder, pod) || strings.ContainsAny(holder, "{}") {
		return ""
	}
	template := holder
	if uid != "" {
		template = strings.Replace(template, uid, "{uid}", 1)
	}
	template = strings.Replace(template, pod, "{pod}", 1)
	for _, name := range PresetNames() {
		if Presets[name] == template {
			return name
		}
	}
	if _, err := parseTemplate(template); err != nil {
		return ""
	}
	return template
}
