// Package mutation runs mutation testing on the code whose mistakes would
// lose, double or falsely delete a row: it builds a pinned version of
// gremlins, runs it on one file at a time with that file's own tests and
// the test cache off, and reads its verdicts back per file.
//
// One file at a time, because gremlins mutates a package: every other file
// of the target's package (and of the packages beneath it) is excluded, so
// a run costs the target's mutants times its tests, minutes on 2 cores.
// The test cache is off because a cached run takes no time, and gremlins
// gives every mutant a timeout scaled from the time of that first run.
package mutation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Tool is the mutation tester, pinned: its mutators and its verdicts are
// what the goals were measured with.
const (
	Tool        = "github.com/go-gremlins/gremlins/cmd/gremlins"
	ToolVersion = "v0.6.0"
)

// Verdicts gremlins gives a mutant.
const (
	Killed     = "KILLED"      // a test failed: the tests notice this change
	Lived      = "LIVED"       // every test passed: the change goes unnoticed
	NotCovered = "NOT COVERED" // no selected test runs the line
	TimedOut   = "TIMED OUT"   // the tests ran past their timeout
	NotViable  = "NOT VIABLE"  // the mutant does not compile
)

// A Mutant is one change gremlins made and what the tests said of it.
type Mutant struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Source  string `json:"-"` // the mutated line, trimmed
	At      string `json:"-"` // the mutated line from the mutant's column on
	Explain string `json:"-"` // what the mutator did there, in words
	// Equivalent is why the mutant may live, when it lived and an entry
	// of Equivalents names it.
	Equivalent string `json:"-"`
}

// A Result is one target's mutants.
type Result struct {
	Target
	Mutants []Mutant
	Elapsed time.Duration
	// Stale are the target's entries of Equivalents that name no mutant
	// that lived, in words: each fails the goal until it is set right.
	Stale []string
}

// Classify marks the mutants that lived and that an entry of eqs names
// as equivalent, and records the entries that name none.
func (r *Result) Classify(eqs []Equivalent) {
	for _, e := range eqs {
		named, killed := false, false
		for i := range r.Mutants {
			m := &r.Mutants[i]
			if !e.matches(*m) {
				continue
			}
			named = true
			killed = killed || m.Status == Killed
			if m.Status == Lived {
				m.Equivalent = e.Why
			}
		}
		switch {
		case !named:
			r.Stale = append(r.Stale, fmt.Sprintf("%s %q at %q names no mutant of the file: update or remove it", e.Mutator, e.Line, e.At))
		case killed:
			r.Stale = append(r.Stale, fmt.Sprintf("%s %q at %q is listed as equivalent, but the tests kill it: remove it", e.Mutator, e.Line, e.At))
		}
	}
}

// Count returns how many of r's mutants got the verdict status.
func (r Result) Count(status string) int {
	n := 0
	for _, m := range r.Mutants {
		if m.Status == status {
			n++
		}
	}
	return n
}

// Efficacy is the share of mutants the tests noticed among those they ran
// and that could be noticed, in percent: killed / (killed + lived), where
// lived leaves out the listed equivalents. A mutant no selected test
// covers counts in Coverage, not here.
func (r Result) Efficacy() float64 {
	return efficacy(r.Count(Killed), r.Count(Lived)-len(r.Equivalents()))
}

// RawEfficacy is gremlins's own figure: killed / (killed + lived), the
// equivalents counted as lived.
func (r Result) RawEfficacy() float64 {
	return efficacy(r.Count(Killed), r.Count(Lived))
}

func efficacy(killed, lived int) float64 {
	if killed+lived == 0 {
		return 100
	}
	return 100 * float64(killed) / float64(killed+lived)
}

// Coverage is the share of mutants some selected test ran, in percent.
func (r Result) Coverage() float64 {
	if len(r.Mutants) == 0 {
		return 100
	}
	return 100 * float64(len(r.Mutants)-r.Count(NotCovered)-r.Count(NotViable)) /
		float64(len(r.Mutants)-r.Count(NotViable))
}

// Survivors are the mutants that lived and are not listed as equivalent,
// in the order of the file.
func (r Result) Survivors() []Mutant {
	return r.lived(false)
}

// Equivalents are the mutants that lived and are listed as equivalent.
func (r Result) Equivalents() []Mutant {
	return r.lived(true)
}

func (r Result) lived(equivalent bool) []Mutant {
	var out []Mutant
	for _, m := range r.Mutants {
		if m.Status == Lived && (m.Equivalent != "") == equivalent {
			out = append(out, m)
		}
	}
	return out
}

// Select returns the targets named by files (paths from the module root)
// or lying in the package directory pkg ("internal/erp", "./internal/erp"
// and "internal/erp/" alike); all of them when both are empty. A file or a
// package that names no target is an error naming it.
func Select(targets []Target, files []string, pkg string) ([]Target, error) {
	if len(files) == 0 && pkg == "" {
		return targets, nil
	}
	byFile := map[string]Target{}
	for _, t := range targets {
		byFile[t.File] = t
	}
	var out []Target
	for _, f := range files {
		t, ok := byFile[path.Clean(strings.TrimPrefix(f, "./"))]
		if !ok {
			return nil, fmt.Errorf("FILES: %q is not a target of make mutate (see go run ./cmd/erpsync-mutate --list)", f)
		}
		out = append(out, t)
	}
	if pkg != "" {
		dir := path.Clean(strings.TrimPrefix(pkg, "./"))
		found := false
		for _, t := range targets {
			if path.Dir(t.File) == dir && !containsFile(out, t.File) {
				out = append(out, t)
				found = true
			}
		}
		if !found && !containsDir(out, dir) {
			return nil, fmt.Errorf("PKG: %q holds no target of make mutate (see go run ./cmd/erpsync-mutate --list)", pkg)
		}
	}
	return out, nil
}

func containsFile(ts []Target, file string) bool {
	for _, t := range ts {
		if t.File == file {
			return true
		}
	}
	return false
}

func containsDir(ts []Target, dir string) bool {
	for _, t := range ts {
		if path.Dir(t.File) == dir {
			return true
		}
	}
	return false
}

// Excludes returns gremlins's --exclude-files arguments that leave only
// target mutated: every other Go file of its directory and beneath it,
// each as an anchored regular expression on its path relative to the
// directory, which is how gremlins matches them. root is the module root.
func Excludes(root, target string) ([]string, error) {
	dir := filepath.Join(root, filepath.FromSlash(path.Dir(target)))
	var args []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != path.Base(target) {
			args = append(args, "--exclude-files", "^"+regexp.QuoteMeta(rel)+"$")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the files beside %s: %w", target, err)
	}
	return args, nil
}

// Options say how to run gremlins.
type Options struct {
	Gremlins string // the tool's binary (see Install)
	Root     string // the module root
	Workers  int    // mutants tested at once (1: a test run has both cores)
	// TimeoutCoefficient scales each mutant's timeout from the first run's
	// time; 0 leaves gremlins's own.
	TimeoutCoefficient int
	Progress           io.Writer // gremlins's own output, line by line; nil for none
}

// Install builds the pinned tool into dir (once: a binary already there is
// reused) and returns its path.
func Install(ctx context.Context, dir string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(dir, "gremlins-"+ToolVersion))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gremlins")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "install", Tool+"@"+ToolVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing %s@%s: %w\n%s", Tool, ToolVersion, err, out)
	}
	return bin, nil
}

// Run runs gremlins on t and returns its mutants.
func Run(ctx context.Context, o Options, t Target) (Result, error) {
	res := Result{Target: t}
	excludes, err := Excludes(o.Root, t.File)
	if err != nil {
		return res, err
	}
	out, err := os.CreateTemp("", "erpsync-mutate-*.json")
	if err != nil {
		return res, err
	}
	out.Close()
	defer os.Remove(out.Name())

	args := []string{"unleash", "--workers", fmt.Sprint(max(o.Workers, 1)), "--output", out.Name()}
	if o.TimeoutCoefficient > 0 {
		args = append(args, "--timeout-coefficient", fmt.Sprint(o.TimeoutCoefficient))
	}
	args = append(args, excludes...)
	args = append(args, "./"+path.Dir(t.File))
	cmd := exec.CommandContext(ctx, o.Gremlins, args...)
	cmd.Dir = o.Root
	// The tests that protect the file, never from the cache.
	cmd.Env = append(os.Environ(), "GOFLAGS=-count=1 -run="+t.Tests)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = o.Progress, &stderr
	if o.Progress != nil {
		cmd.Stderr = io.MultiWriter(o.Progress, &stderr)
	}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("gremlins on %s: %w\n%s", t.File, err, stderr.Bytes())
	}
	res.Elapsed = time.Since(start)
	raw, err := os.ReadFile(out.Name())
	if err != nil {
		return res, fmt.Errorf("gremlins on %s: reading its results: %w", t.File, err)
	}
	res.Mutants, err = Decode(raw, path.Base(t.File))
	if err != nil {
		return res, fmt.Errorf("gremlins on %s: %w", t.File, err)
	}
	if len(res.Mutants) == 0 {
		return res, fmt.Errorf("gremlins on %s found no mutant: the exclusions left nothing, or the file has no code to mutate", t.File)
	}
	src, err := os.ReadFile(filepath.Join(o.Root, filepath.FromSlash(t.File)))
	if err != nil {
		return res, err
	}
	lines := strings.Split(string(src), "\n")
	for i := range res.Mutants {
		m := &res.Mutants[i]
		if m.Line >= 1 && m.Line <= len(lines) {
			line := lines[m.Line-1]
			m.Source = strings.TrimSpace(line)
			if m.Column >= 1 && m.Column <= len(line) {
				m.At = line[m.Column-1:]
			}
		}
		m.Explain = Explain(m.Type)
	}
	res.Classify(Equivalents[t.File])
	return res, nil
}

// Decode reads gremlins's machine-readable results and returns the mutants
// of the file named base (as gremlins names it: relative to the package
// path it was given), in the order of the file.
func Decode(raw []byte, base string) ([]Mutant, error) {
	var doc struct {
		Files []struct {
			Name      string   `json:"file_name"`
			Mutations []Mutant `json:"mutations"`
		} `json:"files"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decoding gremlins's results: %w", err)
	}
	var out []Mutant
	for _, f := range doc.Files {
		if f.Name != base {
			if len(f.Mutations) > 0 {
				return nil, fmt.Errorf("gremlins mutated %s, which is not the target %s: an exclusion is missing", f.Name, base)
			}
			continue
		}
		out = append(out, f.Mutations...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Column < out[j].Column
	})
	return out, nil
}

// Explain says in words what a mutator changes.
func Explain(mutator string) string {
	switch mutator {
	case "CONDITIONALS_BOUNDARY":
		return "a comparison moved by one: < as <=, > as >= (and back)"
	case "CONDITIONALS_NEGATION":
		return "a comparison negated: == as !=, < as >="
	case "ARITHMETIC_BASE":
		return "an operator swapped: + as -, * as /, % as *"
	case "INCREMENT_DECREMENT":
		return "++ as -- (and back)"
	case "INVERT_NEGATIVES":
		return "a unary minus removed"
	case "INVERT_LOGICAL":
		return "&& as || (and back)"
	case "INVERT_LOOPCTRL":
		return "break as continue (and back)"
	default:
		return strings.ToLower(strings.ReplaceAll(mutator, "_", " "))
	}
}

// Report prints a table of results, then each target's survivors with the
// line they changed, and returns the goals missed, by file and figure.
func Report(w io.Writer, results []Result) (missed []string) {
	fmt.Fprintf(w, "\n%-32s %7s %6s %5s %10s %11s %9s %9s %9s %8s %6s %8s\n",
		"file", "mutants", "killed", "lived", "equivalent", "not covered", "timed out", "efficacy", "raw", "coverage", "goal", "time")
	for _, r := range results {
		mark := ""
		if r.Efficacy() < r.Goal {
			mark = "  < goal"
			missed = append(missed, fmt.Sprintf("%s: efficacy %.1f%%, goal %.0f%%", r.File, r.Efficacy(), r.Goal))
		}
		if len(r.Stale) > 0 {
			mark += "  stale equivalents"
			missed = append(missed, fmt.Sprintf("%s: %d stale entries of Equivalents", r.File, len(r.Stale)))
		}
		fmt.Fprintf(w, "%-32s %7d %6d %5d %10d %11d %9d %8.1f%% %8.1f%% %8.1f%% %5.0f%% %8s%s\n",
			r.File, len(r.Mutants), r.Count(Killed), r.Count(Lived), len(r.Equivalents()), r.Count(NotCovered), r.Count(TimedOut),
			r.Efficacy(), r.RawEfficacy(), r.Coverage(), r.Goal, r.Elapsed.Round(time.Second), mark)
	}
	for _, r := range results {
		if s := r.Survivors(); len(s) > 0 {
			fmt.Fprintf(w, "\nsurvivors in %s (each a change its tests did not notice):\n", r.File)
			for _, m := range s {
				fmt.Fprintf(w, "  %s:%d:%d %s (%s)\n      %s\n", r.File, m.Line, m.Column, m.Type, m.Explain, m.Source)
			}
		}
		if e := r.Equivalents(); len(e) > 0 {
			fmt.Fprintf(w, "\nlisted as equivalent in %s (internal/mutation/equivalents.go), not counted:\n", r.File)
			for _, m := range e {
				fmt.Fprintf(w, "  %s:%d:%d %s: %s\n", r.File, m.Line, m.Column, m.Type, m.Equivalent)
			}
		}
		if len(r.Stale) > 0 {
			fmt.Fprintf(w, "\nstale entries of Equivalents for %s:\n  %s\n", r.File, strings.Join(r.Stale, "\n  "))
		}
	}
	return missed
}

// ErrGoalsMissed is returned when a target's efficacy is under its goal.
var ErrGoalsMissed = errors.New("mutation goals missed")
