package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// repoURL is where GitHub shows the repository's files on main; a link
// or runbook_url under it points into this repository.
const repoURL = "https://github.com/erpsync/erpsync/blob/main/"

var (
	// link is an inline link or image: [text](target) or
	// [text](target "title"); the text may hold one level of brackets.
	link = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// definition is a reference-style link's target: [label]: target
	definition = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	// scheme starts an absolute URL (https:, mailto:, ...).
	scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// documentation lists the Markdown files whose links are checked,
// relative to the root.
func documentation(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", filepath.Join("deploy", "systemd", "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// resolver checks link targets against the files of one root, reading
// each Markdown target's anchors once.
type resolver struct {
	root    string
	anchors map[string]map[string]bool // by path relative to root
}

func newResolver(root string) *resolver {
	return &resolver{root: root, anchors: map[string]map[string]bool{}}
}

// resolve says what is wrong with target, a link found in the file from
// (relative to the root), or "" when it points at an existing file or
// directory of the root and its #fragment, if any, at a heading of a
// Markdown file.
func (r *resolver) resolve(from, target string) string {
	target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
	if rest, ok := strings.CutPrefix(target, repoURL); ok {
		target = "/" + rest
	} else if scheme.MatchString(target) {
		return "" // another site: not ours to check
	}
	path, fragment, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return fmt.Sprintf("the path is not URL-encoded properly: %v", err)
	}
	rel := from
	switch {
	case path == "":
		// #fragment alone: a heading of this file.
	case strings.HasPrefix(path, "/"):
		// GitHub resolves a path from the repository's root.
		rel = filepath.Clean(strings.TrimPrefix(path, "/"))
	default:
		rel = filepath.Join(filepath.Dir(from), path)
	}
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "it points outside the repository"
	}
	if _, err := os.Stat(filepath.Join(r.root, rel)); err != nil {
		return fmt.Sprintf("%s does not exist", filepath.ToSlash(rel))
	}
	if fragment == "" || !strings.HasSuffix(rel, ".md") {
		return "" // a line of code (#L12) or no fragment: nothing to match
	}
	fragment, err = url.PathUnescape(fragment)
	if err != nil {
		return fmt.Sprintf("the fragment is not URL-encoded properly: %v", err)
	}
	a, ok := r.anchors[rel]
	if !ok {
		b, err := os.ReadFile(filepath.Join(r.root, rel))
		if err != nil {
			return err.Error()
		}
		a = anchors(string(b))
		r.anchors[rel] = a
	}
	if !a[fragment] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", filepath.ToSlash(rel), fragment)
	}
	return ""
}

// brokenLinks returns, as "file:line: link: what is wrong", every link of
// the Markdown file rel (relative to the resolver's root) that does not
// resolve. Links in code are not links.
func (r *resolver) brokenLinks(rel string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(r.root, rel))
	if err != nil {
		return nil, err
	}
	text := withoutCode(string(b))
	var matches [][]int
	for _, re := range []*regexp.Regexp{link, definition} {
		matches = append(matches, re.FindAllStringSubmatchIndex(text, -1)...)
	}
	slices.SortFunc(matches, func(a, b []int) int { return a[0] - b[0] }) // in the file's order
	var out []string
	for _, m := range matches {
		if problem := r.resolve(rel, text[m[2]:m[3]]); problem != "" {
			line := 1 + strings.Count(text[:m[0]], "\n")
			out = append(out, fmt.Sprintf("%s:%d: %s: %s", filepath.ToSlash(rel), line, strings.TrimSpace(text[m[0]:m[1]]), problem))
		}
	}
	return out, nil
}

// ruleFiles carry runbook_url annotations that must lead to a runbook.
var ruleFiles = []string{
	filepath.Join("deploy", "prometheus", "erpsync-rules.yaml"),
	filepath.Join("deploy", "kubernetes", "prometheusrule.yaml"),
}

// TestDocumentation documents the links of the documentation (README.md, docs/ and
// the other Markdown files) and of the alerts' runbook_url: each leads somewhere.
func TestDocumentation(t *testing.T) {
	// A link that leads nowhere fails: a file or directory that is not in the
	// repository, or an anchor that no heading of the target has (a page split or a
	// heading renamed).
	t.Run("LinksLeadSomewhere", func(t *testing.T) {
		root := moduleRoot(t)
		r := newResolver(root)
		files := documentation(t, root)
		if !slices.Contains(files, filepath.Join("docs", "operating.md")) {
			t.Fatalf("docs/operating.md not found among %v", files)
		}
		for _, f := range files {
			broken, err := r.brokenLinks(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range broken {
				t.Error(b)
			}
		}
	})

	// An alert's runbook_url into this repository that leads nowhere fails: an
	// operator paged at night would land on the top of a page, or on a 404, instead of
	// on what to do.
	t.Run("RunbookURLsLeadToTheirRunbook", func(t *testing.T) {
		root := moduleRoot(t)
		r := newResolver(root)
		for _, f := range ruleFiles {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatal(err)
			}
			var doc yaml.Node
			if err := yaml.Unmarshal(b, &doc); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			found := 0
			for _, u := range runbookURLs(&doc) {
				found++
				switch {
				case strings.HasPrefix(u.Value, repoURL):
					if problem := r.resolve(f, u.Value); problem != "" {
						t.Errorf("%s:%d: runbook_url %s: %s", filepath.ToSlash(f), u.Line, u.Value, problem)
					}
				case strings.HasPrefix(u.Value, strings.TrimSuffix(repoURL, "blob/main/")):
					t.Errorf("%s:%d: runbook_url %s points into the repository but not at a file on main (%s<path>#<anchor>)", filepath.ToSlash(f), u.Line, u.Value, repoURL)
				}
			}
			if found == 0 {
				t.Errorf("%s: no runbook_url found", f)
			}
		}
	})
}

// runbookURLs returns the value nodes of every runbook_url key in n.
func runbookURLs(n *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "runbook_url" && v.Kind == yaml.ScalarNode {
				out = append(out, v)
			}
		}
	}
	for _, c := range n.Content {
		out = append(out, runbookURLs(c)...)
	}
	return out
}

// TestResolver holds the link checker to what it must catch, on a small repository
// of its own.
func TestResolver(t *testing.T) {
	t.Run("FindsEveryKindOfBrokenLink", func(t *testing.T) {
		root := t.TempDir()
		files := map[string]string{
			"go.mod": "module example\n",
			"README.md": "# Title\n\n" +
				"[ok](docs/page.md) [ok](docs/page.md#second-heading) [ok](#title) [ok](docs/)\n" +
				"[ok](https://example.com/x) [ok](" + repoURL + "docs/page.md#run-make-bench)\n" +
				"[gone](docs/missing.md)\n" +
				"[bad anchor](docs/page.md#no-such-heading)\n" +
				"![image](img/none.png)\n" +
				"```\n[in a fence](nowhere.md)\n```\n" +
				"`[in code](nowhere.md)`\n" +
				"[escapes](../../etc/passwd)\n" +
				"[old](" + repoURL + "README.md#alert-x)\n" +
				"[ref]: docs/nothing-here.md\n",
			"docs/page.md": "# Page\n\n## Second heading\n\n## Run `make bench`\n\n```\n# not a heading\n```\n",
		}
		for name, text := range files {
			if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := newResolver(root).brokenLinks("README.md")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"README.md:5: [gone](docs/missing.md): docs/missing.md does not exist",
			"README.md:6: [bad anchor](docs/page.md#no-such-heading): docs/page.md has no heading with the anchor #no-such-heading",
			"README.md:7: ![image](img/none.png): img/none.png does not exist",
			"README.md:12: [escapes](../../etc/passwd): it points outside the repository",
			"README.md:13: [old](" + repoURL + "README.md#alert-x): README.md has no heading with the anchor #alert-x",
			"README.md:14: [ref]: docs/nothing-here.md: docs/nothing-here.md does not exist",
		}
		if !slices.Equal(got, want) {
			t.Errorf("broken links found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestAnchors pins GitHub's rule for heading anchors, which every #fragment is
// matched against.
func TestAnchors(t *testing.T) {
	t.Run("FollowGitHubsRuleForHeadings", func(t *testing.T) {
		md := "# erpsync\n" +
			"#### Alert: ErpsyncStreamStale\n" +
			"## A fleet: what one warehouse and two replicas hold\n" +
			"## `make bench`\n" +
			"## Streams, schedules and history per stream\n" +
			"## Tables for analysts (`erp.*`)\n" +
			"## Notes\n## Notes\n## Notes\n" +
			"## See [the guide](guide.md)\n" +
			"## Closing hashes ##\n" +
			"Setext heading\n--------------\n" +
			"```\n## in a fence\n```\n" +
			"#not-a-heading\n"
		want := []string{
			"erpsync", "alert-erpsyncstreamstale", "a-fleet-what-one-warehouse-and-two-replicas-hold",
			"make-bench", "streams-schedules-and-history-per-stream", "tables-for-analysts-erp",
			"notes", "notes-1", "notes-2", "see-the-guide", "closing-hashes", "setext-heading",
		}
		got := anchors(md)
		for _, a := range want {
			if !got[a] {
				t.Errorf("no anchor %q", a)
			}
		}
		if len(got) != len(want) {
			t.Errorf("anchors %v, want exactly %v", got, want)
		}
	})
}
