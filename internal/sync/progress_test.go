package sync_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// progressOf runs stream as run does, through the harness's login, and
// returns the result and the progress it reported after each commit.
func (h *harness) progressOf(stream string, run runFunc) (sync.Result, []sync.Progress) {
	h.t.Helper()
	s, ok := catalog.Lookup(stream)
	if !ok {
		h.t.Fatalf("no stream %s", stream)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var seen []sync.Progress
	res := run(ctx, nil, h.target(), s, func(_ string, p sync.Progress) { seen = append(seen, p) })[0]
	return res, seen
}

// TestProgress documents what a run says of its progress after each commit:
// the terminal's live line, and the daemon's progress line.
func TestProgress(t *testing.T) {
	t.Parallel()
	// A complete read knows its length where the ERP states it (DataTables
	// recordsTotal), from the first page on, a first load included; else from
	// the login's last complete sweep. A first load of a list that states no
	// length knows none, and a follow run, which reads what is new, neither.
	t.Run("KnowsTheTotalTheERPStatesOrTheLastCompleteSweepFound", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 500})
		h.sim.AddJournalEntries(170) // 200, 4 pages of 50
		h.runner.Prefetch = 0        // a page a commit (a bulk load groups the pages fetched ahead)
		res, seen := h.progressOf("journal_entries", h.runner.Run)
		if res.Status != model.StatusSucceeded || len(seen) != 4 || seen[0].Total != 200 || seen[0].Done != 50 || !seen[0].FirstLoad ||
			seen[3].Done != 200 {
			t.Errorf("journal entries (recordsTotal 200): %s, progress %+v", res.Status, seen)
		}
		if _, ok := seen[0].Left(); !ok {
			t.Errorf("journal entries: no time left after the first page: %+v", seen[0])
		}

		res, seen = h.progressOf("invoices", h.runner.Run)
		if res.Status != model.StatusSucceeded || !res.FirstLoad || len(seen) == 0 || seen[len(seen)-1].Total != 0 {
			t.Errorf("first load of invoices (no length stated): %s, first load %v, progress %+v", res.Status, res.FirstLoad, seen)
		}
		res, seen = h.progressOf("invoices", h.runner.Run)
		if last := seen[len(seen)-1]; res.FirstLoad || seen[0].Total != 500 || seen[0].Done != 50 || last.Done != 500 || seen[0].FirstLoad {
			t.Errorf("second sweep of invoices: first load %v, progress %+v, want 500 rows expected from the first", res.FirstLoad, seen)
		}

		h.sim.AddInvoices(3)
		_, seen = h.progressOf("invoices", h.runner.Follow)
		for _, p := range seen {
			if p.Total != 0 {
				t.Errorf("a follow run knows a total: %+v", p)
			}
		}
	})

	// A sweep resumed after a failure counts the rows its earlier pages
	// committed: what is left is what the list holds past them.
	t.Run("CountsTheRowsCommittedBeforeAResumedSweep", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 500})
		h.mustRun("invoices")
		h.refuseInvoicePage(4)
		h.runner.Prefetch = 0
		if res := h.run("invoices"); res.Status != model.StatusFailed {
			t.Fatalf("the sweep that fails after 3 pages: %s", res.Status)
		}
		h.sim.SetHook(nil)
		res, seen := h.progressOf("invoices", h.runner.Run)
		if res.Status != model.StatusSucceeded || len(seen) != 7 || seen[0].Done != 200 || seen[0].Seen != 50 || seen[0].Total != 500 {
			t.Errorf("resumed sweep: %s, progress %+v, want 7 pages, the first 200 of 500 rows done", res.Status, seen)
		}
	})

	// The runner logs a progress line at INFO every ProgressEvery, the first once
	// the run has lasted that long: pages, rows, rows a second, and the rows done,
	// expected and the time left where the total is known. A run that ends
	// sooner logs its summary line alone.
	t.Run("IsLoggedEverySoOftenDuringALongRunAndNotForAShortOne", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 1000, Latency: 20 * time.Millisecond})
		logged := &guardLog{}
		h.runner.Log = slog.New(slog.NewJSONHandler(logged, nil))
		h.runner.ProgressEvery = time.Hour
		h.mustRun("invoices") // 20 pages, at least 400 ms
		if strings.Contains(logged.String(), "sync in progress") {
			t.Errorf("a run shorter than ProgressEvery logged its progress:\n%s", logged)
		}
		h.runner.ProgressEvery = 100 * time.Millisecond
		h.mustRun("invoices")
		var lines []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] == "sync in progress" {
				lines = append(lines, rec)
			}
		}
		if len(lines) < 2 {
			t.Fatalf("%d progress lines of a run of at least 400 ms, one every 100 ms; want 2 or more:\n%s", len(lines), logged)
		}
		last := lines[len(lines)-1]
		for _, key := range []string{"pages", "rows", "rows_per_second", "elapsed", "done", "total", "left"} {
			if _, ok := last[key]; !ok {
				t.Errorf("the progress line has no %s: %v", key, last)
			}
		}
		if last["level"] != "INFO" || last["total"] != float64(1000) || last["stream"] != "invoices" {
			t.Errorf("progress line %v, want INFO with a total of 1000", last)
		}
	})
}
