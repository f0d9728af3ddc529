package mutation

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEquivalents(t *testing.T) {
	t.Run("EachNamesALineOfATarget", func(t *testing.T) {
		// Checked here, in CI, and not only when make mutate runs: an
		// entry whose line was edited away would hide nothing, but it
		// would no longer say why a mutant lives.
		for file, eqs := range Equivalents {
			if _, err := Select(Targets, []string{file}, ""); err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			src, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(string(src), "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			for _, e := range eqs {
				switch {
				case !lines[e.Line]:
					t.Errorf("%s: no line reads %q", file, e.Line)
				case !strings.Contains(e.Line, e.At) || e.At == "":
					t.Errorf("%s: %q is not in the line %q", file, e.At, e.Line)
				case shortNames[e.Mutator] == "":
					t.Errorf("%s: %q is not a mutator named in shortNames", file, e.Mutator)
				case e.Why == "":
					t.Errorf("%s: %q at %q says not why it may live", file, e.Line, e.At)
				}
			}
		}
	})

	eqs := []Equivalent{
		{boundary, "if k > max {", "> max", "it assigns the value already held"},
		{negation, "if n == 0 {", "==", "a log's wording"},
		{boundary, "if gone > 1 {", ">", "a line since edited"},
	}
	result := func() Result {
		return Result{Target: Target{File: "internal/sync/x.go", Goal: 90}, Mutants: []Mutant{
			{Type: boundary, Status: Lived, Line: 3, Column: 7, Source: "if k > max {", At: "> max {"},
			{Type: negation, Status: Lived, Line: 3, Column: 7, Source: "if k > max {", At: "> max {"},
			{Type: negation, Status: Killed, Line: 9, Column: 7, Source: "if n == 0 {", At: "== 0 {"},
			{Type: boundary, Status: Killed, Line: 12, Column: 2, Source: "i++", At: "++"},
		}}
	}

	t.Run("AreNotCountedAgainstTheGoal", func(t *testing.T) {
		r := result()
		r.Classify(eqs[:1])
		if len(r.Equivalents()) != 1 || len(r.Survivors()) != 1 || r.Survivors()[0].Type != negation {
			t.Fatalf("equivalents %+v, survivors %+v: want the boundary listed and the negation surviving", r.Equivalents(), r.Survivors())
		}
		if e, raw := r.Efficacy(), r.RawEfficacy(); e < 66.6 || e > 66.7 || raw != 50 {
			t.Errorf("efficacy %v, raw %v: want 2/3 without the equivalent and 2/4 with it", e, raw)
		}
	})

	t.Run("ThatNameNoSurvivorAreStaleAndMissTheGoal", func(t *testing.T) {
		r := result()
		r.Classify(eqs)
		if len(r.Stale) != 2 || !strings.Contains(r.Stale[0], "the tests kill it") || !strings.Contains(r.Stale[1], "names no mutant") {
			t.Fatalf("stale = %q: want the killed entry and the one naming no mutant", r.Stale)
		}
		var out bytes.Buffer
		missed := Report(&out, []Result{r})
		if !strings.Contains(strings.Join(missed, "\n"), "internal/sync/x.go: 2 stale entries") {
			t.Errorf("missed = %q", missed)
		}
		if !strings.Contains(out.String(), "x.go:3:7 CONDITIONALS_BOUNDARY: it assigns the value already held") {
			t.Errorf("the report does not list the equivalent with why:\n%s", out.String())
		}
	})
}

var update = flag.Bool("update", false, "rewrite docs/testing.md's table of equivalent mutants from Equivalents")

func TestTheDocsNameEveryEquivalent(t *testing.T) {
	docPath := filepath.Join(root, "docs", "testing.md")
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- equivalents: internal/mutation/equivalents.go -->\n", "<!-- end of equivalents -->"
	before, rest, ok := strings.Cut(string(doc), begin)
	table, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("docs/testing.md has no table between %q and %q", begin, end)
	}
	want := EquivalentsTable()
	if *update {
		if err := os.WriteFile(docPath, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if table != want {
		t.Errorf("docs/testing.md's table of equivalents is not Equivalents (go test ./internal/mutation -run TestTheDocsNameEveryEquivalent -update rewrites it); it should read:\n%s", want)
	}
}
