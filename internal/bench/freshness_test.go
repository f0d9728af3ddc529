package bench

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestFreshness documents Freshness, the report of `make freshness`.
func TestFreshness(t *testing.T) {
	// The report at a tiny N, a fast follow schedule and a short latency, against a
	// binary built from this tree, so that a change which breaks it (a flag, a
	// variable, a schedule, the daemon, the report's arithmetic) fails here rather
	// than on the day the figures are measured. It checks that every figure is
	// reported, and the goals that hold at any size; at 2,000 invoices a complete
	// sweep is 20 requests, so the goal of 100x fewer requests an hour cannot be met,
	// and the report must say so and fail.
	t.Run("ReportsEveryFigureAndMissesTheGoalATinyNCannotMeet", func(t *testing.T) {
		if testing.Short() {
			t.Skip("bench test: builds erpsync and runs its daemon; skipped with -short")
		}
		ctx, bin, prefix := reportTest(t)
		var out bytes.Buffer
		err := Freshness(ctx, FreshnessOptions{
			AdminURL: testdb.AdminURL(), Binary: bin, Sizes: []int{2000}, PageSize: 100,
			Latency: 10 * time.Millisecond, Follow: time.Second, Samples: 3, Window: 3 * time.Second,
			GoalInvoices: 2000, DatabasePrefix: prefix,
		}, &out)
		report := out.String()
		t.Logf("report:\n%s", report)
		var missed *GoalsMissed
		if !errors.As(err, &missed) {
			t.Fatalf("Freshness: %v, want the goals missed", err)
		}
		if len(missed.Misses) != 1 || !strings.Contains(missed.Misses[0], "100x fewer ERP requests an hour") {
			t.Errorf("goals missed: %q, want only the requests an hour (a sweep of 20 pages)", missed.Misses)
		}
		for _, want := range []string{
			"erpsync freshness: 2,000 invoices, 100 a page, 10ms an answer",
			"follows the invoices @every 1s",
			"\nN = 2,000\n",
			"  loaded newest first, last key cursors:",
			"  new invoices during complete sweeps:",
			"  ok      a new invoice in the warehouse within 45s at 2,000 invoices: ",
			"  ok      at most 3 requests per follow run with at most one page new: ",
			"  MISSED  at 2,000 invoices, 100x fewer ERP requests an hour",
			"the report took ",
		} {
			if !strings.Contains(report, want) {
				t.Errorf("the report has no %q", want)
			}
		}
		// Each figure, in each of the four shapes.
		cells := func(label string) []string {
			m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + `(.*)$`).FindStringSubmatch(report)
			if m == nil {
				t.Errorf("the report has no line %q", label)
				return nil
			}
			c := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(m[1]), -1)
			if len(c) != len(shapes) {
				t.Errorf("%q: %d cells %q, want one per shape", label, len(c), c)
			}
			return c
		}
		number := func(label, cell string) float64 {
			m := regexp.MustCompile(`^[\d,.]+`).FindString(strings.TrimSpace(cell))
			v, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64)
			if err != nil {
				t.Errorf("%q: %q is not a figure", label, cell)
			}
			return v
		}
		for _, c := range cells("requests of a complete sweep") {
			if v := number("requests of a complete sweep", c); v != 20 {
				t.Errorf("requests of a complete sweep = %v, want 20 (2,000 invoices, 100 a page)", v)
			}
		}
		sweepSpec := streams.Invoices().Declared().SweepScheduleDefault() // the invoices' default, as the report says it
		for _, label := range []string{"a complete sweep at 10ms an answer", "a follow run, 0 new: requests (time)",
			"a follow run, 1 new: requests (time)", "a follow run, 1 new again", "a follow run, 250 new: requests (time)",
			"  outside sweeps", "  during a complete sweep", "  before: a complete sweep per run, @every 30s",
			"  follow + sweep " + sweepSpec + ", nothing new", "  follow + sweep " + sweepSpec + ", 1 new each run",
			"  follow + a daily sweep, nothing new", "  follow + a daily sweep, 1 new each run",
			"the daemon's ERP requests an hour (measured)"} {
			for _, c := range cells(label) {
				if v := number(label, c); v <= 0 {
					t.Errorf("%q: %q, want a positive figure", label, c)
				}
			}
		}
		// 250 new invoices are three pages at least: more than one request.
		for _, c := range cells("a follow run, 250 new: requests (time)") {
			if v := number("250 new", c); v < 3 {
				t.Errorf("a follow run after 250 new invoices asked %v pages, want 3 at least", v)
			}
		}
		for _, bad := range []string{"NaN", "Inf", "MISSING", "SWEPT", "error"} {
			if strings.Contains(report, bad) {
				t.Errorf("the report shows %q", bad)
			}
		}
		if left := benchDatabases(t, prefix); len(left) > 0 {
			t.Errorf("the report left its databases behind: %v", left)
		}
	})
}
