package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// moduleRoot is the repository's root: tests run in internal/docs.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s, the module root seen from internal/docs: %v", root, err)
	}
	return root
}

// fence opens or closes a fenced code block: three or more backticks or
// tildes, indented by anything (a block inside a list item is indented).
var fence = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})")

// withoutCode returns md with every fenced code block and every inline
// code span blanked (newlines kept, so offsets keep their line numbers):
// nothing in code is a link.
func withoutCode(md string) string { return blankCodeSpans(withoutFences(md)) }

// blankCodeSpans blanks inline code: a run of n backticks up to the next
// run of exactly n.
func blankCodeSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(b); {
			if b[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(b) && b[j+m] == '`' {
				m++
			}
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 { // not a code span: literal backticks
			i += n
			continue
		}
		copy(b[i:end], blank(string(b[i:end])))
		i = end
	}
	return string(b)
}

// blank replaces every character of s but newlines with a space, byte for
// byte.
func blank(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c != '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

var (
	atxHeading   = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine   = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	notParagraph = regexp.MustCompile(`^ {0,3}(?:#|\||>|[-*+][ \t]|\d+[.)][ \t])`)
	htmlAnchor   = regexp.MustCompile(`<[A-Za-z][^>]*?\s(?:id|name)="([^"]+)"`)
	inlineLink   = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	htmlTag      = regexp.MustCompile(`<[^>]*>`)
)

// anchors returns the anchors GitHub gives the headings of md (and those
// of HTML elements with an id or a name).
func anchors(md string) map[string]bool {
	// Headings are read from the text without fenced blocks; their inline
	// code is kept (its text is part of the anchor), so only fences are
	// blanked here.
	lines := strings.Split(withoutFences(md), "\n")
	out := map[string]bool{}
	// As github-slugger: a repeated anchor gets -1, -2, ... counted per
	// anchor, skipping any that a heading already has.
	occurrences := map[string]int{}
	add := func(heading string) {
		base := slug(heading)
		a := base
		for {
			if _, taken := occurrences[a]; !taken {
				break
			}
			occurrences[base]++
			a = fmt.Sprintf("%s-%d", base, occurrences[base])
		}
		occurrences[a] = 0
		out[a] = true
	}
	for i, line := range lines {
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			add(m[1])
		} else if setextLine.MatchString(line) && i > 0 && strings.TrimSpace(lines[i-1]) != "" && !notParagraph.MatchString(lines[i-1]) && !setextLine.MatchString(lines[i-1]) {
			add(strings.TrimSpace(lines[i-1]))
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// withoutFences blanks the fenced code blocks of md only.
func withoutFences(md string) string {
	lines := strings.SplitAfter(md, "\n")
	open := ""
	for i, line := range lines {
		m := fence.FindStringSubmatch(line)
		switch {
		case open == "" && m != nil:
			open = m[1]
			lines[i] = blank(line)
		case open != "":
			if m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), m[1][:1])) == "" {
				open = ""
			}
			lines[i] = blank(line)
		}
	}
	return strings.Join(lines, "")
}

// slug is GitHub's anchor for a heading's text: links reduced to their
// text and HTML tags dropped as in the rendered heading, then lowercase,
// every character but letters, digits, '-', '_' and spaces dropped
// (backticks of inline code among them), and each space a '-'.
func slug(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "$1")
	heading = htmlTag.ReplaceAllString(heading, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
