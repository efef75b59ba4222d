package lease

import (
	"strings"
	"testing"
)

const uid = "3f1c2a9e-7b4d-4c1a-9e2f-0a1b2c3d4e5f"

func TestHolderFormatNames(t *testing.T) {
	tests := []struct {
		name, format, holder, pod string
		want                      bool
	}{
		{"agent identity: name and UID", "leasegate-agent", "web-0_" + uid, "web-0", true},
		{"agent identity: a recreated pod of the same name is not its predecessor", "leasegate-agent", "web-0_old-uid", "web-0", false},
		{"agent identity: another pod", "leasegate-agent", "web-1_" + uid, "web-0", false},
		{"client-go: hostname and a random UUID", "client-go", "ctrl-0_7d1c2a3e-random", "ctrl-0", true},
		{"client-go: the pod name is a prefix of the holder's", "client-go", "web-1_7d1c2a3e", "web", false},
		{"client-go: the holder's name is a prefix of the pod's", "client-go", "web_7d1c2a3e", "web-1", false},
		{"client-go: an empty suffix, as before formats existed", "client-go", "ctrl-0_", "ctrl-0", true},
		{"client-go: no separator at all", "client-go", "ctrl-0", "ctrl-0", false},
		{"cert-manager: its controller's suffix", "cert-manager", "cm-7f9-external-cert-manager-controller", "cm-7f9", true},
		{"cert-manager: near miss, pod web vs web-1", "cert-manager", "web-1-external-cert-manager-controller", "web", false},
		{"cert-manager: a client-go identity is not cert-manager's", "cert-manager", "cm-7f9_abc", "cm-7f9", false},
		{"pod-name: the name alone", "pod-name", "snapshot-controller-7d8dd", "snapshot-controller-7d8dd", true},
		{"pod-name: near miss, web vs web-1", "pod-name", "web-1", "web", false},
		{"pod-name: near miss, web-1 vs web", "pod-name", "web", "web-1", false},
		{"zen-lead style {pod}-{uid}", "{pod}-{uid}", "web-" + uid, "web", true},
		{"{pod}-{uid}: pod web does not hold web-1's lease", "{pod}-{uid}", "web-1-" + uid, "web", false},
		{"{pod}-{uid}: a wrong UID", "{pod}-{uid}", "web-other", "web", false},
		{"a fixed prefix and suffix", "ops/{pod}.leader", "ops/web-0.leader", "web-0", true},
		{"a fixed prefix and suffix: near miss", "ops/{pod}.leader", "ops/web-0.leader.old", "web-0", false},
		{"{any} before {pod}", "{any}@{pod}", "worker-3@web-0", "web-0", true},
		{"{any} before {pod}: a longer pod name", "{any}@{pod}", "x@web-0", "b-0", false},
		{"{any} before {pod}, empty {any}", "{any}@{pod}", "@web-0", "web-0", true},
		{"{uid} before {pod}", "{uid}/{pod}", uid + "/web-0", "web-0", true},
		{"{uid} before {pod}: another UID", "{uid}/{pod}", "other/web-0", "web-0", false},
		{"an empty holder names nobody", "pod-name", "", "web", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseHolderFormat(tt.format)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Names(tt.holder, tt.pod, uid); got != tt.want {
				t.Errorf("%s.Names(%q, %q) = %v, want %v", tt.format, tt.holder, tt.pod, got, tt.want)
			}
		})
	}
}

func TestParseHolderFormatErrors(t *testing.T) {
	tests := []struct{ name, format, want string }{
		{"an unknown preset", "cert-manger", "neither a preset (cert-manager, client-go, leasegate-agent, pod-name) nor a template with {pod}"},
		{"no {pod}", "{any}_{uid}", "must contain {pod}"},
		{"only {uid}", "x-{uid}", "must contain {pod}"},
		{"two {pod}", "{pod}_{pod}", "{pod} may appear only once"},
		{"{uid} and {any}", "{pod}_{uid}_{any}", "at most two placeholders"},
		{"an unknown placeholder", "{pod}_{hostname}", "unknown placeholder {hostname}; use {pod}, {uid} or {any}"},
		{"an unclosed brace", "{pod}_{any", "a '{' without its '}'"},
		{"a stray closing brace", "{pod}}", "a '}' without its '{'"},
		{"placeholders side by side", "{pod}{uid}", "separate {pod} from the other placeholder with literal text"},
		{"{any} after {pod} joined by a pod-name character", "{pod}-{any}", `ambiguous: with only "-" between {pod} and {any}, pod "web" would hold the lease of pod "web-1"`},
		{"{any} before {pod} joined by pod-name characters", "{any}-x.{pod}", `ambiguous: with only "-x." between {pod} and {any}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHolderFormat(tt.format)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseHolderFormat(%q) = %v, want an error containing %q", tt.format, err, tt.want)
			}
		})
	}
}

func TestHolderFormatString(t *testing.T) {
	for _, s := range []string{"cert-manager", "{pod}-{uid}"} {
		if got := MustParseHolderFormat(s).String(); got != s {
			t.Errorf("String() = %q, want %q as written", got, s)
		}
	}
}

func TestPresetsMatchTheIdentitiesTheyName(t *testing.T) {
	if !AgentFormat.Names(Identity("web-0", uid), "web-0", uid) {
		t.Error("the leasegate-agent preset does not read Identity()")
	}
	for name, template := range Presets {
		if _, err := parseTemplate(template); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
}

func TestHolderFormatFits(t *testing.T) {
	tests := []struct {
		format, holder string
		want           bool
	}{
		{"client-go", "web-1_7d1c", true},
		{"client-go", "web-1-external-cert-manager-controller", false},
		{"client-go", "Web_1", false},
		{"cert-manager", "web-1-external-cert-manager-controller", true},
		{"cert-manager", "web-1_7d1c", false},
		{"pod-name", "web-1", true},
		{"pod-name", "web-1_7d1c", false},
		{"leasegate-agent", "web-1_" + uid, true},
		{"leasegate-agent", "web-1_", false},
		{"{any}@{pod}", "a@b@web", true},
		{"{pod}-{uid}", "web-1-" + uid, true},
	}
	for _, tt := range tests {
		if got := MustParseHolderFormat(tt.format).Fits(tt.holder); got != tt.want {
			t.Errorf("%s.Fits(%q) = %v, want %v", tt.format, tt.holder, got, tt.want)
		}
	}
}

func TestSuggestFormat(t *testing.T) {
	tests := []struct{ name, holder, pod, want string }{
		{"cert-manager's identity names its preset", "cm-0-external-cert-manager-controller", "cm-0", "cert-manager"},
		{"the pod name alone", "cm-0", "cm-0", "pod-name"},
		{"the agent's identity", "cm-0_" + uid, "cm-0", "leasegate-agent"},
		{"a template with the UID", "cm-0-" + uid, "cm-0", "{pod}-{uid}"},
		{"a template with fixed text", "leader:cm-0", "cm-0", "leader:{pod}"},
		{"a holder without the pod's name", "other", "cm-0", ""},
		{"a holder with braces cannot become a template", "{cm-0}", "cm-0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SuggestFormat(tt.holder, tt.pod, uid); got != tt.want {
				t.Errorf("SuggestFormat(%q, %q) = %q, want %q", tt.holder, tt.pod, got, tt.want)
			}
		})
	}
}

func BenchmarkHolderFormatNames(b *testing.B) {
	f := MustParseHolderFormat("cert-manager")
	b.ReportAllocs()
	for b.Loop() {
		if !f.Names("cm-7f9-external-cert-manager-controller", "cm-7f9", uid) {
			b.Fatal("no match")
		}
	}
}
