package mutation

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the module root, two directories up from this package.
var root = filepath.Join("..", "..")

func TestTargets(t *testing.T) {
	testFunc := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	for _, tg := range Targets {
		t.Run(tg.File, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(root, tg.File)); err != nil {
				t.Fatalf("the target is gone: %v", err)
			}
			if tg.Goal <= 0 || tg.Goal > 100 || tg.What == "" {
				t.Errorf("goal %v and what %q: a target says what it decides and the efficacy it must keep", tg.Goal, tg.What)
			}
			// Each test the expression names exists in the target's package,
			// so a renamed test cannot leave a file silently unprotected.
			var names []string
			tests, _ := filepath.Glob(filepath.Join(root, path.Dir(tg.File), "*_test.go"))
			for _, f := range tests {
				src, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range testFunc.FindAllSubmatch(src, -1) {
					names = append(names, string(m[1]))
				}
			}
			inner, ok := strings.CutPrefix(tg.Tests, "^(")
			if inner, ok = strings.CutSuffix(inner, ")$"); !ok || strings.ContainsAny(tg.Tests, " \t") {
				t.Fatalf("-run %q: write ^(TestA|TestB)$ without spaces (GOFLAGS carries it)", tg.Tests)
			}
			for _, alt := range strings.Split(inner, "|") {
				re, err := regexp.Compile("^" + alt + "$")
				if err != nil {
					t.Fatalf("-run %q: %v", tg.Tests, err)
				}
				found := false
				for _, n := range names {
					found = found || re.MatchString(n)
				}
				if !found {
					t.Errorf("-run names %s, which no test of %s is", alt, path.Dir(tg.File))
				}
			}
		})
	}
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
