package sync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// TestASweepThatCannotResumeStartsOver: only a cursor says where an
// interrupted sweep stopped. The next run of a list paged otherwise
// abandons the unfinished sweep and reads the whole list again from its
// first page; it never succeeds having read nothing, nor marks anything
// deleted from what the unfinished sweep saw.
func TestASweepThatCannotResumeStartsOver(t *testing.T) {
	t.Parallel()
	const path = "/accounts/api/journal-entries/"
	h := newHarness(t, erpsim.Options{})
	h.pages = 10 // thirty entries: three pages
	h.mustRun("journal_entries")
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == path && calls.Add(1) == 2 {
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		return false
	})
	if res := h.run("journal_entries"); res.Status != model.StatusFailed {
		t.Fatalf("a sweep whose second page failed: status %s, want failed", res.Status)
	}
	interrupted := h.count(`SELECT sweep_id FROM erp.sync_checkpoints WHERE stream = 'journal_entries'`)
	if n := h.count(`SELECT pages FROM erp.sync_checkpoints WHERE stream = 'journal_entries'`); n != 1 {
		t.Fatalf("the interrupted sweep committed %d pages, want 1", n)
	}
	h.sim.SetHook(nil)
	h.sim.ResetRequests()
	res := h.mustRun("journal_entries")
	if res.Stats.Pages != 3 || res.Stats.Seen != 30 || res.Stats.Deleted != 0 {
		t.Errorf("the next run read %d pages, %d rows, deleted %d; want the whole list again: 3 pages, 30 rows, none deleted",
			res.Stats.Pages, res.Stats.Seen, res.Stats.Deleted)
	}
	for _, r := range h.sim.Requests() {
		if r.Path == path {
			if q, _ := url.ParseQuery(r.RawQuery); q.Get("start") != "" && q.Get("start") != "0" {
				t.Errorf("the next run began at %q, want the first page", r.RawQuery)
			}
			break
		}
	}
	if n := h.count(`SELECT last_sweep_id FROM erp.sync_checkpoints WHERE stream = 'journal_entries'`); n == interrupted {
		t.Errorf("the next run completed the interrupted sweep %d instead of a new one", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.sweep_seen WHERE sweep_id = $1`, interrupted); n != 0 {
		t.Errorf("the abandoned sweep %d still holds %d seen ids", interrupted, n)
	}
	if n := h.count(`SELECT count(*) FROM erp.journal_entries WHERE deleted_at IS NULL`); n != 30 {
		t.Errorf("%d live journal entries, want 30", n)
	}
	if note := h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, res.RunID); note != "" {
		t.Errorf("a whole sweep that found nothing gone noted %q", note)
	}
}

// sweepDeleteJournalEntry removes the entry id from the simulator's list.
func sweepDeleteJournalEntry(sim *erpsim.Sim, id string) {
	sim.MutateJournalEntries(func(held []erpsim.JournalEntry) []erpsim.JournalEntry {
		out := held[:0:0]
		for _, e := range held {
			if e.ID != id {
				out = append(out, e)
			}
		}
		return out
	})
}

// TestAStatedTotalGuardsDeletions: a list paged by offset that states its
// length (recordsTotal) can skip a record when it shifts between two
// pages: a sweep that saw fewer records than the ERP stated marks nothing
// deleted, and says so; one that saw them all marks what is gone.
func TestAStatedTotalGuardsDeletions(t *testing.T) {
	t.Parallel()
	const path = "/accounts/api/journal-entries/"
	h := newHarness(t, erpsim.Options{ListOrder: erpsim.OrderNewestFirst})
	h.pages = 10
	h.mustRun("journal_entries")
	h.mustRun("journal_entries")
	gone := h.sim.JournalEntries()[25].ID // on the last page
	sweepDeleteJournalEntry(h.sim, gone)
	h.sim.SetRouteHook(path, func(n int) {
		if n == 2 { // the first page read: an entry posted at the head shifts the list
			h.sim.AddJournalEntries(1)
		}
	})
	res := h.mustRun("journal_entries")
	h.sim.SetRouteHook(path, nil)
	note := h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, res.RunID)
	if res.Stats.Deleted != 0 || !regexp.MustCompile(`^sweep \d+: deletions not marked \(the ERP stated 30 records, the sweep saw 29\)$`).MatchString(note) {
		t.Errorf("a sweep that saw 29 of 30 stated records: deleted %d, note %q; want none deleted, and why", res.Stats.Deleted, note)
	}
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.journal_entries WHERE id = $1`, gone); got != "false" {
		t.Errorf("journal entry %s, gone, marked by a sweep that saw fewer than stated", gone)
	}
	res = h.mustRun("journal_entries")
	if res.Stats.Deleted != 1 || res.HeldDeletions != 0 {
		t.Errorf("the next sweep, which saw all 30 stated: deleted %d, held %d; want the one gone marked", res.Stats.Deleted, res.HeldDeletions)
	}
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.journal_entries WHERE id = $1`, gone); got != "true" {
		t.Errorf("journal entry %s, gone, deleted_at set = %s", gone, got)
	}
}

// TestASweepOfOnePageMarksWhatIsGone: a sweep of a single page cannot
// miss a record that moved between pages, so what it does not list is
// marked at once, even from a list in no order of ids.
func TestASweepOfOnePageMarksWhatIsGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{ListOrder: erpsim.OrderUnordered})
	h.mustRun("journal_entries") // thirty entries: one page of 50
	h.mustRun("journal_entries")
	gone := h.sim.JournalEntries()[7].ID
	sweepDeleteJournalEntry(h.sim, gone)
	res := h.mustRun("journal_entries")
	if res.Stats.Pages != 1 || res.Stats.Deleted != 1 || res.HeldDeletions != 0 {
		t.Errorf("one page, one entry gone: %d pages, deleted %d, held %d; want it marked at once", res.Stats.Pages, res.Stats.Deleted, res.HeldDeletions)
	}
	if note := h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, res.RunID); note != "" {
		t.Errorf("note %q, want none", note)
	}
}

// TestADescendingSweepDoesNotDeleteAMovedRecord: in a list of ids
// descending, a record deleted on a page already read pulls the next one
// back onto it: that one, between two pages, is not marked deleted; a
// record gone from inside a page's range is marked at once.
func TestADescendingSweepDoesNotDeleteAMovedRecord(t *testing.T) {
	t.Parallel()
	const path = "/accounts/api/journal-entries/"
	h := newHarness(t, erpsim.Options{ListOrder: erpsim.OrderNewestFirst})
	h.pages = 10
	h.mustRun("journal_entries")
	h.mustRun("journal_entries")
	entries := h.sim.JournalEntries() // newest first: three pages of ten
	gone, moved := entries[5].ID, entries[10].ID
	h.sim.SetRouteHook(path, func(n int) {
		if n == 2 {
			sweepDeleteJournalEntry(h.sim, gone)
		}
	})
	res := h.mustRun("journal_entries")
	h.sim.SetRouteHook(path, nil)
	if res.Stats.Deleted != 0 {
		t.Errorf("the sweep the list shifted under deleted %d, want none", res.Stats.Deleted)
	}
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.journal_entries WHERE id = $1`, moved); got != "false" {
		t.Errorf("entry %s, listed but moved between two pages, deleted_at set = %s", moved, got)
	}
	res = h.mustRun("journal_entries")
	if res.Stats.Deleted != 1 {
		t.Errorf("the next sweep deleted %d, want the one gone", res.Stats.Deleted)
	}
	for id, want := range map[string]string{gone: "true", moved: "false"} {
		if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.journal_entries WHERE id = $1`, id); got != want {
			t.Errorf("entry %s: deleted_at set = %s, want %s", id, got, want)
		}
	}
}

// TestAFailedGroupedCopyFailsTheRun: during a bulk load, pages arriving
// back to back are COPYed as one group. A COPY that Postgres refuses
// (not for a row written already) fails the run with an error naming the
// stream and the group's pages; nothing of the group is written, and the
// next run loads everything.
func TestAFailedGroupedCopyFailsTheRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 300})
	refused := fmt.Sprint(h.sim.Invoices()[75].ID) // on the second page
	ctx := context.Background()
	if _, err := h.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE erp.invoices ADD CONSTRAINT refuses_one CHECK (id <> '%s')`, refused)); err != nil {
		t.Fatal(err)
	}
	res := h.run("invoices")
	if res.Status != model.StatusFailed {
		t.Fatalf("a refused COPY: status %s, want failed", res.Status)
	}
	if got := fmt.Sprint(res.Err); !regexp.MustCompile(`invoices pages 1-[2-6]: .*refuses_one`).MatchString(got) {
		t.Errorf("error %q, want it to name the group's pages (1 to at least 2) and the constraint", got)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 0 {
		t.Errorf("%d rows written by a group whose COPY failed, want none", n)
	}
	if _, err := h.pool.Exec(ctx, `ALTER TABLE erp.invoices DROP CONSTRAINT refuses_one`); err != nil {
		t.Fatal(err)
	}
	h.mustRun("invoices")
	h.wantInvoices(300)
}

// TestABulkLoadCommitsAtMostTenThousandRowsAtOnce: a bulk load groups
// pages arriving back to back in one COPY and one transaction, but no
// more than 10,000 rows: a crash re-fetches at most that many.
func TestABulkLoadCommitsAtMostTenThousandRowsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 12000, PageSizeCap: 1000})
	h.pages = 1000
	res := h.mustRun("invoices")
	if res.Stats.Pages != 12 || res.Stats.Inserted != 12000 {
		t.Fatalf("bulk load: %d pages, %d inserted; want 12 pages of 1000", res.Stats.Pages, res.Stats.Inserted)
	}
	// Rows written by one transaction share its xmin.
	var transactions, most int64
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*), max(n) FROM
		(SELECT count(*) AS n FROM erp.invoices GROUP BY xmin::text) t`).Scan(&transactions, &most); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d transactions, the largest of %d rows", transactions, most)
	if most > 10000 {
		t.Errorf("one transaction wrote %d rows, want at most 10,000", most)
	}
	if transactions >= 12 {
		t.Errorf("%d transactions for 12 pages arriving back to back, want pages grouped", transactions)
	}
	h.wantInvoices(12000)
}
