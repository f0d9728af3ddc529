package sync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// reset starts a stream over through the harness's login.
func (h *harness) reset(stream string) sync.Result {
	h.t.Helper()
	s, _ := catalog.Lookup(stream)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return h.runner.Reset(ctx, h.target(), s)[0]
}

// TestReset documents Runner.Reset: a stream started over for a login, its
// rows and versions kept, its next run a complete sweep.
func TestReset(t *testing.T) {
	t.Parallel()

	t.Run("KeepsEveryRowAndVersionOfAListWhoseNextRunIsACompleteSweep", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120})
		h.mustRun("invoices")
		h.mustRun("invoices")
		if res := h.follow("invoices"); res.Swept != "" {
			t.Fatalf("two sweeps in order: the follow should follow, swept because %s", res.Swept)
		}
		versions := h.count(`SELECT count(*) FROM erp.invoices_history`)
		res := h.reset("invoices")
		if res.Err != nil || res.Status != model.StatusSucceeded {
			t.Fatalf("reset: %s %v", res.Status, res.Err)
		}
		h.wantInvoices(120)
		if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != versions {
			t.Errorf("versions %d after the reset, %d before", n, versions)
		}
		if n := h.count(`SELECT count(*) FROM erp.sync_runs WHERE kind = 'reset' AND status = 'succeeded'`); n != 1 {
			t.Errorf("reset runs recorded: %d, want 1", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.sync_follow`); n != 0 {
			t.Errorf("the reset kept how the list was followed (%d rows)", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.sweep_pages`); n != 0 {
			t.Errorf("the reset kept %d page digests: the next sweep would not compare those pages", n)
		}
		if res := h.follow("invoices"); res.Swept == "" || res.Stats.Unchanged != 120 || res.Stats.Inserted+res.Stats.Updated != 0 {
			t.Errorf("the first run after a reset is a complete sweep compared row by row, writing nothing unchanged: %+v", res)
		}
	})

	t.Run("IsRefusedWhileARunHoldsTheStreamsLock", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 10})
		h.mustRun("invoices")
		conn, err := h.pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		for _, kind := range []model.RunKind{model.KindSweep, model.KindFollow} {
			release, err := db.LockStream(context.Background(), conn.Conn(), h.source, "invoices", kind)
			if err != nil || release == nil {
				t.Fatalf("lock %s: %v", kind, err)
			}
			if res := h.reset("invoices"); !errors.Is(res.Err, sync.ErrBusy) {
				t.Errorf("reset while a %s holds its lock: %+v, want ErrBusy", kind, res)
			}
			release()
		}
		if n := h.count(`SELECT count(*) FROM erp.sync_runs WHERE kind = 'reset'`); n != 0 {
			t.Errorf("a refused reset recorded %d runs", n)
		}
	})

	t.Run("MakesTheBalanceSheetReadEveryMonthEndAgain", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{BalanceSheetHistory: true})
		h.settings = map[string]map[string]string{"balance_sheet": {"months": "6", "reread_months": "1"}}
		trees := func() int {
			n := 0
			for _, r := range h.sim.Requests() {
				if r.Path == "/accounts/api/balance-sheet-tree/" && r.Status == 200 {
					n++
				}
			}
			return n
		}
		h.mustRun("balance_sheet")
		h.sim.ResetRequests()
		h.mustRun("balance_sheet")
		if n := trees(); n != 2 {
			t.Fatalf("a later run read %d trees, want today's and the last month end's", n)
		}
		h.reset("balance_sheet")
		h.sim.ResetRequests()
		h.mustRun("balance_sheet")
		if n := trees(); n != 7 {
			t.Errorf("the run after a reset read %d trees, want today's and every month end (7)", n)
		}
		h.sim.ResetRequests()
		h.mustRun("balance_sheet")
		if n := trees(); n != 2 {
			t.Errorf("the run after that read %d trees, want 2 again", n)
		}
	})

	t.Run("MakesJournalLinesReadAgainForTheDocumentsTheLoginDecides", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{})
		for _, s := range []string{"journal_entries", "payment_vouchers", "receipt_vouchers", "journal_lines"} {
			h.mustRun(s)
		}
		lines := h.count(`SELECT count(*) FROM erp.journal_lines`)
		docs := h.count(`SELECT count(*) FROM erp.journal_line_documents`)
		if docs == 0 || lines == 0 {
			t.Fatalf("fixture: %d documents, %d lines", docs, lines)
		}
		if res := h.mustRun("journal_lines"); res.Stats.Pages != 0 {
			t.Fatalf("a second run read %d previews, want none", res.Stats.Pages)
		}
		h.reset("journal_lines")
		if n := h.count(`SELECT count(*) FROM erp.journal_lines`); n != lines {
			t.Errorf("the reset left %d lines of %d: lines are kept", n, lines)
		}
		if res := h.mustRun("journal_lines"); res.Stats.Pages != docs {
			t.Errorf("the run after a reset read %d previews, want every document's (%d)", res.Stats.Pages, docs)
		}
	})
}
