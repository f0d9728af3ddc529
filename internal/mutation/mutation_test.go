package mutation

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the module root, two directories up from this package.
var root = filepath.Join("..", "..")

func TestTargets(t *testing.T) {
	for _, tg := range Targets {
		t.Run(tg.File, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(root, tg.File)); err != nil {
				t.Fatalf("the target is gone: %v", err)
			}
			if tg.Goal <= 0 || tg.Goal > 100 || tg.What == "" {
				t.Errorf("goal %v and what %q: a target says what it decides and the efficacy it must keep", tg.Goal, tg.What)
			}
			// Each test and subtest the expression names exists in the
			// target's package, so a renamed test cannot leave a file
			// silently unprotected.
			tops, subs, err := splitRun(tg.Tests)
			if err != nil {
				t.Fatal(err)
			}
			tests := testsOf(t, filepath.Join(root, path.Dir(tg.File)))
			var selected []string
			for _, alt := range tops {
				found := false
				for name := range tests {
					if matches(alt, name) {
						found = true
						selected = append(selected, name)
					}
				}
				if !found {
					t.Errorf("-run names %s, which no test of %s is", alt, path.Dir(tg.File))
				}
			}
			if subs == nil {
				return
			}
			for _, alt := range subs {
				found := false
				for _, top := range selected {
					found = found || slices.ContainsFunc(tests[top], func(sub string) bool { return matches(alt, sub) })
				}
				if !found {
					t.Errorf("-run names %s, which no subtest of %v is", alt, selected)
				}
			}
			// A test whose subtests the expression all leaves out would run
			// for nothing.
			for _, top := range selected {
				if !slices.ContainsFunc(tests[top], func(sub string) bool {
					return slices.ContainsFunc(subs, func(alt string) bool { return matches(alt, sub) })
				}) {
					t.Errorf("-run selects %s but none of its subtests %v", top, tests[top])
				}
			}
		})
	}
}

// splitRun reads a target's -run expression, ^(TestA|TestB)$ or
// ^(TestA|TestB)$/^(SubA|SubB)$, into its alternatives at each level (subs
// is nil when the expression names top-level tests only).
func splitRun(expr string) (tops, subs []string, err error) {
	levels := strings.Split(expr, "/")
	if strings.ContainsAny(expr, " \t") || len(levels) > 2 {
		return nil, nil, fmt.Errorf("-run %q: write ^(TestA|TestB)$ or ^(TestA|TestB)$/^(SubA|SubB)$ without spaces (GOFLAGS carries it)", expr)
	}
	var alts [][]string
	for _, level := range levels {
		inner, ok := strings.CutPrefix(level, "^(")
		if inner, ok = strings.CutSuffix(inner, ")$"); !ok || inner == "" {
			return nil, nil, fmt.Errorf("-run %q: write ^(TestA|TestB)$ or ^(TestA|TestB)$/^(SubA|SubB)$ without spaces (GOFLAGS carries it)", expr)
		}
		for _, alt := range strings.Split(inner, "|") {
			if _, err := regexp.Compile("^" + alt + "$"); err != nil {
				return nil, nil, fmt.Errorf("-run %q: %w", expr, err)
			}
		}
		alts = append(alts, strings.Split(inner, "|"))
	}
	if len(alts) == 2 {
		subs = alts[1]
	}
	return alts[0], subs, nil
}

// matches reports whether the alternative alt of a -run expression
// selects name.
func matches(alt, name string) bool {
	return regexp.MustCompile("^" + alt + "$").MatchString(name)
}

// testsOf is every top-level test of the package in dir with the names of
// its direct subtests: the t.Run calls of its body named by a literal, not
// those nested in another t.Run's function.
func testsOf(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string][]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			subs := []string{}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) != 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if _, isFunc := call.Args[1].(*ast.FuncLit); !ok || sel.Sel.Name != "Run" || !isFunc {
					return true
				}
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if name, err := strconv.Unquote(lit.Value); err == nil {
						subs = append(subs, name)
					}
				}
				return false // the subtest's own subtests are a level down
			})
			tests[fn.Name.Name] = subs
		}
	}
	return tests
}

// TestSplitRun documents the -run expressions a target may carry: its
// top-level tests, and at most one level of their subtests.
func TestSplitRun(t *testing.T) {
	t.Run("ReadsTheAlternativesOfEachLevel", func(t *testing.T) {
		for expr, want := range map[string][2]string{
			"^(TestA)$":                     {"TestA", ""},
			"^(TestA|TestB.*)$":             {"TestA|TestB.*", ""},
			"^(TestA|TestB)$/^(SubA|SubB)$": {"TestA|TestB", "SubA|SubB"},
		} {
			tops, subs, err := splitRun(expr)
			if err != nil || strings.Join(tops, "|") != want[0] || strings.Join(subs, "|") != want[1] || (want[1] == "") != (subs == nil) {
				t.Errorf("%s: tops %q, subs %q (%v); want %s and %s", expr, tops, subs, err, want[0], want[1])
			}
		}
	})
	t.Run("RefusesAnExpressionItCannotRead", func(t *testing.T) {
		for _, expr := range []string{"^(TestA| TestB)$", "TestA", "^(TestA)$/SubA", "^(TestA)$/^()$",
			"^(TestA)$/^(SubA)$/^(Deeper)$", "^(TestA[)$"} {
			if tops, subs, err := splitRun(expr); err == nil {
				t.Errorf("%s: read as tops %q, subs %q", expr, tops, subs)
			}
		}
	})
}

func TestSelect(t *testing.T) {
	targets := []Target{{File: "internal/erp/scan.go"}, {File: "internal/erp/lister.go"}, {File: "internal/sync/guard.go"}}
	files := func(ts []Target) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.File)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name  string
		files []string
		pkg   string
		want  string
	}{
		{"NothingNamedSelectsAll", nil, "", "internal/erp/scan.go,internal/erp/lister.go,internal/sync/guard.go"},
		{"FilesSelectThemselves", []string{"./internal/sync/guard.go", "internal/erp/scan.go"}, "", "internal/sync/guard.go,internal/erp/scan.go"},
		{"APackageSelectsItsFiles", nil, "./internal/erp/", "internal/erp/scan.go,internal/erp/lister.go"},
		{"AFileAndItsPackageSelectItOnce", []string{"internal/erp/scan.go"}, "internal/erp", "internal/erp/scan.go,internal/erp/lister.go"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Select(targets, c.files, c.pkg)
			if err != nil {
				t.Fatal(err)
			}
			if files(got) != c.want {
				t.Errorf("got %s, want %s", files(got), c.want)
			}
		})
	}
	t.Run("AFileThatIsNoTargetIsNamed", func(t *testing.T) {
		_, err := Select(targets, []string{"internal/erp/client.go"}, "")
		if err == nil || !strings.Contains(err.Error(), `FILES: "internal/erp/client.go"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("APackageWithoutTargetsIsNamed", func(t *testing.T) {
		_, err := Select(targets, nil, "internal/db")
		if err == nil || !strings.Contains(err.Error(), `PKG: "internal/db"`) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestExcludes(t *testing.T) {
	args, err := Excludes(root, "internal/sync/guard.go")
	if err != nil {
		t.Fatal(err)
	}
	excluded := map[string]bool{}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] != "--exclude-files" {
			t.Fatalf("args[%d] = %q", i, args[i])
		}
		excluded[args[i+1]] = true
	}
	for _, want := range []string{`^sweep\.go$`, `^guard_test\.go$`, `^streams/core\.go$`} {
		if !excluded[want] {
			t.Errorf("%s is not excluded: gremlins would mutate it too", want)
		}
	}
	for re := range excluded {
		if regexp.MustCompile(re).MatchString("guard.go") {
			t.Errorf("%s excludes the target itself", re)
		}
	}
}

func TestDecode(t *testing.T) {
	raw := []byte(`{"files":[{"file_name":"guard.go","mutations":[
		{"type":"ARITHMETIC_BASE","status":"LIVED","line":37,"column":75},
		{"type":"CONDITIONALS_NEGATION","status":"KILLED","line":37,"column":16},
		{"type":"CONDITIONALS_BOUNDARY","status":"NOT COVERED","line":45,"column":9}]},
		{"file_name":"sweep.go","mutations":[]}]}`)
	ms, err := Decode(raw, "guard.go")
	if err != nil {
		t.Fatal(err)
	}
	r := Result{Target: Target{File: "internal/sync/guard.go", Goal: 95}, Mutants: ms}
	if len(ms) != 3 || ms[0].Column != 16 || ms[1].Column != 75 {
		t.Fatalf("mutants %+v: want three, in the order of the file", ms)
	}
	if e, c := r.Efficacy(), r.Coverage(); e != 50 || c < 66.6 || c > 66.7 {
		t.Errorf("efficacy %v, coverage %v: want 50 (killed / killed+lived) and 66.7", e, c)
	}
	var out bytes.Buffer
	missed := Report(&out, []Result{r})
	if len(missed) != 1 || !strings.Contains(missed[0], "internal/sync/guard.go: efficacy 50.0%, goal 95%") {
		t.Errorf("missed = %q", missed)
	}
	if !strings.Contains(out.String(), "internal/sync/guard.go:37:75 ARITHMETIC_BASE") {
		t.Errorf("the report does not name the survivor:\n%s", out.String())
	}

	t.Run("AnotherFileMutatedIsAnError", func(t *testing.T) {
		raw := []byte(`{"files":[{"file_name":"sweep.go","mutations":[{"type":"ARITHMETIC_BASE","status":"LIVED","line":1,"column":1}]}]}`)
		if _, err := Decode(raw, "guard.go"); err == nil || !strings.Contains(err.Error(), "an exclusion is missing") {
			t.Errorf("err = %v", err)
		}
	})
}
