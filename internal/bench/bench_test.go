package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestRun documents Run, the report behind the published figures of `make bench`.
func TestRun(t *testing.T) {
	// The report at a tiny N against a binary built from this tree, so that a change
	// which breaks the bench (a flag, an environment variable, the schema, the
	// report's arithmetic) fails here rather than on the day the figures are measured.
	// It checks the report's shape, not its figures: those mean nothing at N = 300 on
	// a shared machine.
	t.Run("ReportsEveryFigureOfABinaryBuiltFromThisTree", func(t *testing.T) {
		if testing.Short() {
			t.Skip("bench test: builds erpsync and syncs through it; skipped with -short")
		}
		// The report measures the child's peak memory with GNU time(1).
		testutil.RequireTool(t, "/usr/bin/time", "time")
		ctx, bin, prefix := reportTest(t)
		var out bytes.Buffer
		err := Run(ctx, Options{AdminURL: testdb.AdminURL(), Binary: bin, Invoices: 300, Baseline: 100, Runs: 1, PageSize: 100, Prefetch: 1, DatabasePrefix: prefix}, &out)
		report := out.String()
		t.Logf("report:\n%s", report)
		// At N = 300 the goals, stated for 1,000,000, are not checked.
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if !strings.Contains(report, "\ngoals not checked: they are stated for 1,000,000 invoices and more, this report is of 300") {
			t.Errorf("the report does not say its goals were not checked")
		}
		for _, want := range []string{
			"erpsync bench: 300 invoices, page size 100, prefetch 1, 1 runs",
			"  run 1: ",
			"medians of 1 runs, N = 300",
			"  COPY of the same rows ",
			"  unchanged re-sync ",
			"  1% changed, history ",
			"  row-by-row baseline ",
		} {
			if !strings.Contains(report, want) {
				t.Errorf("the report has no %q", want)
			}
		}
		m := regexp.MustCompile(`(?m)^  sync / COPY +(\S+) `).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("the report has no sync / COPY ratio")
		}
		if ratio, err := strconv.ParseFloat(m[1], 64); err != nil || ratio <= 0 || math.IsInf(ratio, 0) {
			t.Errorf("sync / COPY = %q (%v), want a positive number", m[1], err)
		}
		for _, bad := range []string{"NaN", "Inf", "error"} {
			if strings.Contains(report, bad) {
				t.Errorf("the report shows %q", bad)
			}
		}
		// One change in a hundred of 300 invoices, with history: 3 versions.
		if m := regexp.MustCompile(`1% changed, history +\S+ s +(\d+) versions kept`).FindStringSubmatch(report); m == nil || m[1] != "3" {
			t.Errorf("versions kept by the 1%% change: %v, want 3", m)
		}
		if left := benchDatabases(t, prefix); len(left) > 0 {
			t.Errorf("the bench left its databases behind: %v", left)
		}
	})
}

// TestConclude documents the end of the report: its goals, checked at the size
// they are stated for.
func TestConclude(t *testing.T) {
	misses := []string{"sync / COPY 1.33 (goal <= 1.20)", "scoped 1.40x the analyst (goal <= 1.25x)"}
	// From the size the goals are stated for, a report past one ends with the
	// goals missed, and returns them: make bench exits 1.
	t.Run("ChecksTheGoalsFromTheSizeTheyAreStatedFor", func(t *testing.T) {
		var out bytes.Buffer
		err := Options{Invoices: 1000000, GoalInvoices: 1000000}.conclude(&out, misses)
		var missed *GoalsMissed
		if !errors.As(err, &missed) || !slices.Equal(missed.Misses, misses) {
			t.Errorf("conclude at 1,000,000: %v, want the misses %q", err, misses)
		}
		if want := "\ngoals missed:\n  " + strings.Join(misses, "\n  ") + "\n"; out.String() != want {
			t.Errorf("report ends %q, want %q", out.String(), want)
		}
		out.Reset()
		if err := (Options{Invoices: 2000000, GoalInvoices: 1000000}).conclude(&out, nil); err != nil || out.String() != "\nevery goal met\n" {
			t.Errorf("conclude with no miss: %v, %q", err, out.String())
		}
	})
	// Below it (make bench N=10000), the figures past a goal are listed as
	// such, nothing is checked, and the report is no failure.
	t.Run("ChecksNoGoalBelowTheSizeTheyAreStatedFor", func(t *testing.T) {
		var out bytes.Buffer
		if err := (Options{Invoices: 10000, GoalInvoices: 1000000}).conclude(&out, misses); err != nil {
			t.Errorf("conclude at 10,000: %v, want no error", err)
		}
		want := "\ngoals not checked: they are stated for 1,000,000 invoices and more, this report is of 10,000 (--goal-invoices to check them here)\n" +
			"  past a goal: " + misses[0] + "\n  past a goal: " + misses[1] + "\n"
		if out.String() != want {
			t.Errorf("report ends %q, want %q", out.String(), want)
		}
	})
}

func TestSyncMisses(t *testing.T) {
	// The goals of the sync figures, missed as the report prints them.
	t.Run("MissesAGoalOnlyWhenTheFigureAsPrintedIsPastIt", func(t *testing.T) {
		if m := syncMisses(1.20, 1.0, 0.50, 20.0); m != nil {
			t.Errorf("every figure at its goal: misses %v, want none", m)
		}
		if m := syncMisses(1.204, 1.0004, 0.504, 19.96); m != nil {
			t.Errorf("every figure printed at its goal: misses %v, want none", m)
		}
		m := syncMisses(1.33, 2.5, 0.61, 12.3)
		want := []string{"sync / COPY 1.33 (goal <= 1.20)", "unchanged re-sync WAL 2.500% of the first sync (goal <= 1%)",
			"re-sync / full sync 0.61 (goal <= 0.50)", "speed-up over the row-by-row baseline 12.3x (goal >= 20x)"}
		if !slices.Equal(m, want) {
			t.Errorf("misses %q, want %q", m, want)
		}
	})
}

// reportTest prepares a test that runs a report: the database server
// (skipped, or failed in CI, without one, as every database test), a
// context of five minutes, a binary built from this tree, and a prefix of
// the test's own for the report's databases (none of another report on
// the server: `make bench`, another checkout's tests). A report drops its
// databases itself, whatever happens; a test that fails half-way (a
// panic) drops what is left.
func reportTest(t *testing.T) (ctx context.Context, bin, prefix string) {
	t.Helper()
	testdb.Admin(t).Close(context.Background())
	prefix = fmt.Sprintf("erpsync_benchtest_%d_", time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			dropDatabases(t, prefix)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	bin, err := testutil.BuildErpsync(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ctx, bin, prefix
}

// benchDatabases are the databases whose names start with prefix.
func benchDatabases(t *testing.T, prefix string) []string {
	t.Helper()
	conn := testdb.Admin(t)
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func dropDatabases(t *testing.T, prefix string) {
	conn := testdb.Admin(t)
	defer conn.Close(context.Background())
	for _, name := range benchDatabases(t, prefix) {
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	}
}
