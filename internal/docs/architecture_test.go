package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// architecture is the page whose package map is checked against the code.
const architecture = "docs/architecture.md"

// goList runs `go list` in the module root and returns its output, one
// line per package.
func goList(t *testing.T, root string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// modulePath is the module's path, as go.mod declares it.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	t.Fatal("go.mod declares no module")
	return ""
}

// packages returns the module's packages as paths inside the module
// ("internal/sync"; "." for a package at the root).
func packages(t *testing.T, root string) []string {
	t.Helper()
	module := modulePath(t, root)
	var out []string
	for _, p := range goList(t, root, "./...") {
		out = append(out, inModule(module, strings.TrimSpace(p)))
	}
	return out
}

// inModule strips the module path from an import path.
func inModule(module, path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// backticked finds the code spans of a table cell.
var backticked = regexp.MustCompile("`([^`]+)`")

// packageTable returns the packages the package table of the
// architecture page names (the table whose first header cell is
// "package"), with the line each is on. A row may name several.
func packageTable(t *testing.T, md string) map[string]int {
	t.Helper()
	lines := strings.Split(withoutFences(md), "\n")
	rows := map[string]int{}
	in := false
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		first := strings.TrimSpace(cells[0])
		if !in {
			in = first == "package"
			continue
		}
		if strings.Trim(first, "-: ") == "" {
			continue // the delimiter row
		}
		names := backticked.FindAllStringSubmatch(first, -1)
		if len(names) == 0 {
			t.Errorf("%s:%d: the package table's row names no package in backticks: %s", architecture, i+1, line)
		}
		for _, m := range names {
			if prev, dup := rows[m[1]]; dup {
				t.Errorf("%s:%d: %s is in the package table twice (also line %d)", architecture, i+1, m[1], prev)
			}
			rows[m[1]] = i + 1
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table whose first column is \"package\"", architecture)
	}
	return rows
}

// arrow separates a package from what it imports in the drawing.
const arrow = "──>"

// importDrawing returns, by package, the imports the package map's
// drawing shows: the first fenced block after the "## Package map"
// heading, one "package ──> a, b" per package, continued on lines
// without an arrow.
func importDrawing(t *testing.T, md string) map[string][]string {
	t.Helper()
	_, after, ok := strings.Cut(md, "\n## Package map\n")
	if !ok {
		t.Fatalf("%s: no \"## Package map\" heading", architecture)
	}
	_, block, ok := strings.Cut(after, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatalf("%s: no drawing (a fenced block) under \"## Package map\"", architecture)
	}
	drawn := map[string][]string{}
	from := ""
	for line := range strings.Lines(block) {
		to := line
		if pkg, rest, ok := strings.Cut(line, arrow); ok {
			from, to = strings.TrimSpace(pkg), rest
			if _, dup := drawn[from]; dup {
				t.Errorf("%s: the drawing shows %s twice", architecture, from)
			}
			drawn[from] = []string{}
		}
		for _, p := range strings.Split(to, ",") {
			if p = strings.TrimSpace(p); p != "" {
				if from == "" {
					t.Fatalf("%s: the drawing's line %q belongs to no package", architecture, strings.TrimSpace(line))
				}
				drawn[from] = append(drawn[from], p)
			}
		}
	}
	return drawn
}

// TestArchitectureDoc documents the package map of docs/architecture.md: a test
// holds it to the code, so that the page a newcomer reads first is true.
func TestArchitectureDoc(t *testing.T) {
	// The package table and `go list ./...` agree: no package added, renamed or
	// removed without the page that introduces the code to a newcomer.
	t.Run("PackageTableListsEveryPackageAndNoOther", func(t *testing.T) {
		root := moduleRoot(t)
		md, err := os.ReadFile(filepath.Join(root, architecture))
		if err != nil {
			t.Fatal(err)
		}
		listed := packageTable(t, string(md))
		pkgs := packages(t, root)
		for _, p := range pkgs {
			if _, ok := listed[p]; !ok {
				t.Errorf("%s: the package table does not list %s", architecture, p)
			}
		}
		var extra []string
		for p := range listed {
			if !slices.Contains(pkgs, p) {
				extra = append(extra, p)
			}
		}
		slices.Sort(extra)
		for _, p := range extra {
			t.Errorf("%s:%d: the package table lists %s, which `go list ./...` does not know", architecture, listed[p], p)
		}
	})

	// The drawing of the package map shows no import the code does not make, and
	// leaves out none it makes: the drawing is how a newcomer learns what may depend
	// on what.
	t.Run("DrawingShowsEveryImportAndNoOther", func(t *testing.T) {
		root := moduleRoot(t)
		md, err := os.ReadFile(filepath.Join(root, architecture))
		if err != nil {
			t.Fatal(err)
		}
		drawn := importDrawing(t, string(md))
		module := modulePath(t, root)
		// One line per package: its path, then its imports.
		imports := map[string][]string{}
		for _, line := range goList(t, root, "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			pkg := inModule(module, f[0])
			imports[pkg] = nil
			for _, p := range f[1:] {
				if p == module || strings.HasPrefix(p, module+"/") {
					imports[pkg] = append(imports[pkg], inModule(module, p))
				}
			}
		}
		for pkg, want := range imports {
			got, shown := drawn[pkg]
			for _, p := range want {
				if !slices.Contains(got, p) {
					t.Errorf("%s: %s imports %s, which the drawing does not show", architecture, pkg, p)
				}
			}
			for _, p := range got {
				if !slices.Contains(want, p) {
					t.Errorf("%s: the drawing shows %s importing %s, which it does not", architecture, pkg, p)
				}
			}
			if shown && len(want) == 0 {
				t.Errorf("%s: the drawing shows %s, which imports nothing of erpsync", architecture, pkg)
			}
		}
		for pkg := range drawn {
			if _, ok := imports[pkg]; !ok {
				t.Errorf("%s: the drawing shows %s, which `go list ./...` does not know", architecture, pkg)
			}
		}
	})
}
