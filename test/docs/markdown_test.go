// Package docs keeps the documentation true: every relative link and anchor in README.md and docs/
// resolves, docs/reference.md names exactly the annotations, labels, environment variables, flags,
// endpoints, webhook entries, decision and Event reasons, metrics and configuration fields the code has,
// and its Helm values table is generated from the chart's schema. It reads the code side from the code
// itself (the contract constants, the agent's settings, the webhook's flag set, the metrics registries,
// the configuration types), never from a list kept by hand.
package docs

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// A markdown file as this package reads it: its lines, with fenced code blocks marked, since neither
// headings nor links count inside them.
type markdown struct {
	lines  []string
	inCode []bool
}

var fence = regexp.MustCompile("^ {0,3}(```+|~~~+)")

func parseMarkdown(text string) markdown {
	m := markdown{lines: strings.Split(text, "\n")}
	m.inCode = make([]bool, len(m.lines))
	open := ""
	for i, line := range m.lines {
		f := fence.FindStringSubmatch(line)
		switch {
		case open == "" && f != nil:
			open = f[1]
			m.inCode[i] = true
		case open != "":
			m.inCode[i] = true
			// A fence closes with at least as many of the same character, and nothing after them.
			if f != nil && f[1][0] == open[0] && len(f[1]) >= len(open) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), f[1][:1])) == "" {
				open = ""
			}
		}
	}
	return m
}

// heading is an ATX heading: its level, its text as written and the anchor GitHub gives it.
type heading struct {
	line   int
	level  int
	text   string
	anchor string
}

var atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)

// headings are the file's headings, each with its anchor: GitHub's slug of the heading's text, with
// -1, -2, ... for a slug met before.
func (m markdown) headings() []heading {
	var out []heading
	seen := map[string]int{}
	for i, line := range m.lines {
		if m.inCode[i] {
			continue
		}
		h := atxHeading.FindStringSubmatch(line)
		if h == nil {
			continue
		}
		out = append(out, heading{line: i, level: len(h[1]), text: h[2], anchor: uniqueSlug(seen, slug(plainText(h[2])))})
	}
	return out
}

// uniqueSlug is github-slugger's rule for repeated slugs: the first keeps its slug, later ones get the
// first free of slug-1, slug-2, ...; every slug handed out counts as taken.
func uniqueSlug(seen map[string]int, s string) string {
	original := s
	for {
		if _, taken := seen[s]; !taken {
			break
		}
		seen[original]++
		s = original + "-" + strconv.Itoa(seen[original])
	}
	seen[s] = 0
	return s
}

// slug is GitHub's anchor of a heading's rendered text: lower case, every character but letters, digits,
// marks, "-", "_" and space dropped, each space a "-".
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	codeSpan     = regexp.MustCompile("(`+)(.+?)(`+)")
	inlineLink   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag      = regexp.MustCompile(`<[^>]+>`)
	emphasisMark = regexp.MustCompile(`(^|[^\p{L}\p{N}_])_+|_+($|[^\p{L}\p{N}_])`)
	escaped      = regexp.MustCompile(`\\([[:punct:]])`)
)

// plainText is a heading's text as GitHub renders it, which is what its anchor is made from: code spans
// keep their content verbatim, links and images become their text, HTML tags and the underscores of
// emphasis go, escapes lose their backslash.
func plainText(md string) string {
	var b strings.Builder
	for md != "" {
		loc := codeSpanAt(md)
		if loc == nil {
			b.WriteString(renderInline(md))
			break
		}
		b.WriteString(renderInline(md[:loc[0]]))
		b.WriteString(strings.TrimSpace(md[loc[2]:loc[3]]))
		md = md[loc[1]:]
	}
	return b.String()
}

// codeSpanAt finds the first code span: [start, end, content start, content end], or nil.
func codeSpanAt(s string) []int {
	for _, loc := range codeSpan.FindAllStringSubmatchIndex(s, -1) {
		if loc[3]-loc[2] == loc[7]-loc[6] { // the closing run as long as the opening one
			return []int{loc[0], loc[1], loc[4], loc[5]}
		}
	}
	return nil
}

func renderInline(s string) string {
	s = inlineLink.ReplaceAllString(s, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	s = emphasisMark.ReplaceAllString(s, "$1$2")
	return escaped.ReplaceAllString(s, "$1")
}

// withoutCodeSpans blanks the code spans of a line, so that nothing in them reads as a link.
func withoutCodeSpans(line string) string {
	var b strings.Builder
	for {
		loc := codeSpanAt(line)
		if loc == nil {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:loc[0]])
		b.WriteString(strings.Repeat(" ", loc[1]-loc[0]))
		line = line[loc[1]:]
	}
}

// link is a link target found in a file, with its line for messages.
type link struct {
	line   int
	target string
}

var (
	linkTarget    = regexp.MustCompile(`\]\(\s*(?:<([^>]*)>|([^)\s]*))(?:\s+"[^"]*")?\s*\)`)
	linkReference = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	htmlHref      = regexp.MustCompile(`\b(?:href|src)="([^"]*)"`)
	htmlID        = regexp.MustCompile(`<a\s+(?:[^>]*\s)?(?:id|name)="([^"]+)"`)
)

// links are the targets of every inline link, image, link reference definition and HTML href or src
// outside code.
func (m markdown) links() []link {
	var out []link
	for i, line := range m.lines {
		if m.inCode[i] {
			continue
		}
		line = withoutCodeSpans(line)
		for _, re := range []*regexp.Regexp{linkTarget, linkReference, htmlHref} {
			for _, match := range re.FindAllStringSubmatch(line, -1) {
				out = append(out, link{line: i + 1, target: strings.Join(match[1:], "")})
			}
		}
	}
	return out
}

// anchors are every anchor a link into the file may name: its headings' and explicit HTML ids.
func (m markdown) anchors() map[string]bool {
	out := map[string]bool{}
	for _, h := range m.headings() {
		out[h.anchor] = true
	}
	for i, line := range m.lines {
		if m.inCode[i] {
			continue
		}
		for _, match := range htmlID.FindAllStringSubmatch(line, -1) {
			out[match[1]] = true
		}
	}
	return out
}

// section is the lines under the heading whose text is title, up to the next heading of the same or a
// higher level; ok is false when there is no such heading.
func (m markdown) section(title string) (lines []string, ok bool) {
	hs := m.headings()
	for i, h := range hs {
		if h.text != title {
			continue
		}
		end := len(m.lines)
		for _, next := range hs[i+1:] {
			if next.level <= h.level {
				end = next.line
				break
			}
		}
		var out []string
		for j := h.line + 1; j < end; j++ {
			if !m.inCode[j] {
				out = append(out, m.lines[j])
			}
		}
		return out, true
	}
	return nil, false
}

// tableCells are the cells of column col (from 0) of every table row in lines: rows after a header row
// and its delimiter row, up to the first line that is no row.
func tableCells(lines []string, col int) []string {
	var out []string
	for i := 0; i+1 < len(lines); i++ {
		if !isRow(lines[i]) || !tableDelimiter.MatchString(lines[i+1]) {
			continue
		}
		i += 2
		for ; i < len(lines) && isRow(lines[i]); i++ {
			if cells := splitRow(lines[i]); col < len(cells) {
				out = append(out, cells[col])
			}
		}
	}
	return out
}

var tableDelimiter = regexp.MustCompile(`^\s*\|?(\s*:?-+:?\s*\|)+\s*(:?-+:?\s*)?$`)

func isRow(line string) bool { return strings.HasPrefix(strings.TrimSpace(line), "|") }

// splitRow splits a table row at its unescaped pipes outside code spans.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	blank := []byte(withoutCodeSpans(line))
	var cells []string
	start := 0
	for i := 0; i < len(blank); i++ {
		switch {
		case blank[i] == '\\':
			i++
		case blank[i] == '|':
			cells = append(cells, strings.TrimSpace(line[start:i]))
			start = i + 1
		}
	}
	return append(cells, strings.TrimSpace(line[start:]))
}

// codeSpans are the contents of the code spans in s.
func codeSpans(s string) []string {
	var out []string
	for {
		loc := codeSpanAt(s)
		if loc == nil {
			return out
		}
		out = append(out, strings.TrimSpace(s[loc[2]:loc[3]]))
		s = s[loc[1]:]
	}
}

func TestTableCells(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		col   int
		want  []string
	}{
		{"rows after the header and delimiter", []string{"| a | b |", "|---|---|", "| `x` | 1 |", "| `y` | 2 |"}, 0, []string{"`x`", "`y`"}},
		{"an aligned delimiter row", []string{"| a | b |", "|:--|--:|", "| x | 1 |"}, 1, []string{"1"}},
		{"an escaped pipe and a pipe in code stay in their cell", []string{"| a | b |", "|---|---|", "| `x|y` | p \\| q |"}, 1, []string{"p \\| q"}},
		{"the table ends at the first line that is no row", []string{"| a |", "|---|", "| x |", "text", "| y |"}, 0, []string{"x"}},
		{"rows without a delimiter row are no table", []string{"| a |", "| x |"}, 0, nil},
		{"a row short of the column", []string{"| a | b |", "|---|---|", "| x |"}, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tableCells(tt.lines, tt.col); !slices.Equal(got, tt.want) {
				t.Errorf("tableCells = %q, want %q", got, tt.want)
			}
		})
	}
}
