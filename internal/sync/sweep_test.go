package sync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestCompleteSweep documents the complete sweep of a list: where it starts
// or resumes, what it writes, and which rows it finds gone and marks
// deleted.
func TestCompleteSweep(t *testing.T) {
	t.Parallel()

	t.Run("MarksWhatIsGoneOnlyOnceCompleteAndClearsWhatComesBack", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120})
		h.mustRun("invoices")
		inv := h.sim.Invoices()
		changed, gone := fmt.Sprint(inv[0].ID), fmt.Sprint(inv[1].ID)
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[0].TotalBC = decimal.RequireFromString("42.42")
			return append(inv[:1], inv[2:]...)
		})

		// A sweep that fails half-way marks nothing deleted.
		var calls atomic.Int32
		h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 2 {
				w.WriteHeader(http.StatusForbidden) // 400 and 404 would mean "cursor refused"
				return true
			}
			return false
		})
		if res := h.run("invoices"); res.Status != model.StatusFailed {
			t.Fatalf("status %s, want failed", res.Status)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NOT NULL`); n != 0 {
			t.Fatalf("a failed sweep marked %d rows deleted", n)
		}
		h.sim.SetHook(nil)
		res := h.mustRun("invoices")
		if res.Stats.Deleted != 1 {
			t.Errorf("deleted = %d, want 1", res.Stats.Deleted)
		}
		if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, gone); got != "true" {
			t.Errorf("vanished invoice deleted_at set = %s", got)
		}
		if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, changed); got != "42.42" {
			t.Errorf("changed invoice total = %s", got)
		}
		// It comes back: deleted_at is cleared.
		h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return append(cur, inv[1]) })
		h.mustRun("invoices")
		if got := h.text(`SELECT (deleted_at IS NULL)::text FROM erp.invoices WHERE id = $1`, gone); got != "true" {
			t.Errorf("reappeared invoice still deleted")
		}
	})

	t.Run("ResumesFromItsCheckpointAfterAFailure", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 500})
		h.refuseInvoicePage(4)
		h.runner.Prefetch = 0
		if res := h.run("invoices"); res.Status != model.StatusFailed || res.Stats.Pages != 3 {
			t.Fatalf("first run: status %s pages %d, want failed after 3 pages (%v)", res.Status, res.Stats.Pages, res.Err)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 150 {
			t.Fatalf("rows after 3 committed pages = %d, want 150", n)
		}
		cursor := h.text(`SELECT cursor FROM erp.sync_checkpoints WHERE stream = 'invoices'`)
		h.sim.SetHook(nil)
		h.sim.ResetRequests()
		res := h.mustRun("invoices")
		if res.Stats.Pages != 7 {
			t.Errorf("resumed run wrote %d pages, want the remaining 7", res.Stats.Pages)
		}
		first := h.sim.Requests()
		for _, r := range first {
			if r.Path == "/sales/api/invoices/list/" {
				q, _ := url.ParseQuery(r.RawQuery)
				if q.Get("cursor") != cursor {
					t.Errorf("resume started at cursor %q, want the checkpoint's %q", q.Get("cursor"), cursor)
				}
				break
			}
		}
		h.wantInvoices(500)
		if got := h.text(`SELECT string_agg(status, ',' ORDER BY id) FROM erp.sync_runs`); got != "failed,succeeded" {
			t.Errorf("runs = %s", got)
		}
	})

	t.Run("ResumesAfterLosingItsDatabaseConnection", func(t *testing.T) {
		// The database connection dies mid-sweep (a Postgres restart, a failover):
		// the run fails, and the next one resumes with nothing lost or doubled.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 600, Latency: 20 * time.Millisecond})
		setBig(h.sim)
		var pages atomic.Int32
		h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/sales/api/invoices/list/" && pages.Add(1) == 4 {
				if _, err := h.pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'erpsync'`); err != nil {
					t.Errorf("terminating backends: %v", err)
				}
			}
			return false
		})
		if res := h.run("invoices"); res.Status != model.StatusFailed {
			t.Fatalf("run that lost its connection: %s %v, want failed", res.Status, res.Err)
		}
		h.sim.SetHook(nil)
		h.mustRun("invoices")
		h.wantInvoices(600)
		if got := h.text(`SELECT string_agg(status, ',' ORDER BY id) FROM erp.sync_runs`); got != "failed,succeeded" {
			t.Errorf("runs = %s, want the lost run closed as failed, then a success", got)
		}
	})

	t.Run("StartsOverWhenItCannotResume", func(t *testing.T) {
		// Only a cursor says where an interrupted sweep stopped. The next run of
		// a list paged otherwise abandons the unfinished sweep and reads the
		// whole list again from its first page; it never succeeds having read
		// nothing, nor marks anything deleted from what the unfinished sweep
		// saw.
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
	})

	t.Run("StartsOverWhenTheERPRefusesItsCursor", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 400})
		h.runner.Prefetch = 0
		var calls atomic.Int32
		h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 3 {
				w.WriteHeader(http.StatusForbidden) // 400 and 404 would mean "cursor refused"
				return true
			}
			return false
		})
		if res := h.run("invoices"); res.Status != model.StatusFailed {
			t.Fatalf("status %s", res.Status)
		}
		h.sim.SetHook(nil)
		h.sim.InvalidateCursors() // the saved cursor is now refused with 400
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:390] })
		for i := 0; i < 2; i++ { // and no crash loop: the next run is ordinary
			res := h.mustRun("invoices")
			if i == 0 && res.Stats.Pages != 8 {
				t.Errorf("pages = %d, want a whole new sweep of 8", res.Stats.Pages)
			}
		}
		if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id LIMIT 1 OFFSET 1`); !strings.Contains(got, "refused the saved cursor") {
			t.Errorf("note = %q", got)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 390 {
			t.Errorf("live rows = %d, want 390", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.sweep_seen`); n != 0 {
			t.Errorf("sweep_seen keeps %d ids of finished or abandoned sweeps", n)
		}
	})

	t.Run("StartsOverOnACursorRefusedWith404OrOkFalse", func(t *testing.T) {
		// A saved cursor refused with 404 or with {ok: false} starts a new sweep
		// once, as a 400 does.
		t.Parallel()
		for name, kind := range map[string]erpsim.CursorRefusal{"404": erpsim.CursorRefusal404, "ok=false": erpsim.CursorRefusal200} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, erpsim.Options{Invoices: 300})
				h.runner.Prefetch = 0
				h.sim.SetHook(failThirdInvoicePage())
				if res := h.run("invoices"); res.Status != model.StatusFailed {
					t.Fatalf("status %s", res.Status)
				}
				h.sim.SetHook(nil)
				h.sim.SetCursorRefusal(kind)
				h.sim.InvalidateCursors()
				if res := h.mustRun("invoices"); res.Stats.Pages != 6 {
					t.Errorf("pages = %d, want a whole new sweep of 6", res.Stats.Pages)
				}
				if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id DESC LIMIT 1`); !strings.Contains(got, "refused the saved cursor") {
					t.Errorf("note = %q", got)
				}
				if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 300 {
					t.Errorf("live rows = %d", n)
				}
			})
		}
	})

	t.Run("MarksNothingWhenItsSeenListIsLost", func(t *testing.T) {
		// Postgres empties UNLOGGED tables after a crash. A sweep that lived
		// through one must not mark rows deleted from its partial seen-list.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 300})
		h.runner.Prefetch = 0
		h.mustRun("invoices") // bulk load
		gone := fmt.Sprint(h.sim.Invoices()[299].ID)
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:299] })
		var calls atomic.Int32
		h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 3 {
				w.WriteHeader(http.StatusForbidden)
				return true
			}
			return false
		})
		if res := h.run("invoices"); res.Status != model.StatusFailed {
			t.Fatalf("status %s", res.Status)
		}
		h.sim.SetHook(nil)
		if _, err := h.pool.Exec(context.Background(), `TRUNCATE erp.sweep_seen`); err != nil { // what crash recovery does
			t.Fatal(err)
		}
		res := h.mustRun("invoices")
		if res.Stats.Deleted != 0 {
			t.Errorf("deleted = %d after the seen-list was lost, want 0", res.Stats.Deleted)
		}
		if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id DESC LIMIT 1`); !strings.Contains(got, "seen-list lost") {
			t.Errorf("note = %q", got)
		}
		// The next whole sweep sees the truth again.
		if res := h.mustRun("invoices"); res.Stats.Deleted != 1 {
			t.Errorf("next sweep deleted = %d, want 1", res.Stats.Deleted)
		}
		if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, gone); got != "true" {
			t.Errorf("vanished invoice deleted_at set = %s", got)
		}
	})

	t.Run("MarksNothingOfAListCutAtADefaultPageSize", func(t *testing.T) {
		// A one-list answer with no paging signal that holds exactly a usual
		// default page size may be the ERP cutting the list: it marks nothing
		// deleted, and says so in the run's note and the stream's warning, until
		// an answer no longer looks cut. A list of exactly ten that lost nothing
		// is fine.
		h := newHarness(t, erpsim.Options{})
		h.mustRun("payment_vouchers")
		if n := h.count(`SELECT count(*) FROM erp.payment_vouchers WHERE deleted_at IS NULL`); n != 12 {
			t.Fatalf("%d live vouchers, want the simulator's 12", n)
		}
		h.sim.SetListCut(paymentsPath, 10)
		res := h.mustRun("payment_vouchers")
		if res.Stats.Deleted != 0 {
			t.Errorf("a list cut at 10 marked %d rows deleted", res.Stats.Deleted)
		}
		want := "the answer holds exactly 10 records and no paging signal: the ERP may cut the list at a default page size, so the 2 rows it no longer lists were not marked deleted"
		if note := h.text(`SELECT note FROM erp.sync_runs WHERE id = $1`, res.RunID); note != want {
			t.Errorf("run note %q, want %q", note, want)
		}
		if w := h.text(`SELECT warning FROM erp.stream_freshness WHERE stream = 'payment_vouchers'`); w != want {
			t.Errorf("stream warning %q, want %q", w, want)
		}
		// The whole list again: the warning goes.
		h.sim.SetListCut(paymentsPath, 0)
		h.mustRun("payment_vouchers")
		if w := h.text(`SELECT warning FROM erp.stream_freshness WHERE stream = 'payment_vouchers'`); w != "<null>" {
			t.Errorf("stream warning %q after a whole answer, want none", w)
		}

		// Ten records that lost nothing.
		ten := newHarness(t, erpsim.Options{})
		ten.sim.SetListCut(paymentsPath, 10)
		ten.mustRun("payment_vouchers")
		res = ten.mustRun("payment_vouchers")
		if note := ten.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, res.RunID); note != "" {
			t.Errorf("a list of ten that lost nothing noted %q", note)
		}
	})

	t.Run("MarksNothingWhenItSawFewerRecordsThanStated", func(t *testing.T) {
		// A list paged by offset that states its length (recordsTotal) can skip
		// a record when it shifts between two pages: a sweep that saw fewer
		// records than the ERP stated marks nothing deleted, and says so; one
		// that saw them all marks what is gone.
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
	})

	t.Run("MarksWhatIsGoneFromASinglePageAtOnce", func(t *testing.T) {
		// A sweep of a single page cannot miss a record that moved between
		// pages, so what it does not list is marked at once, even from a list in
		// no order of ids.
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
	})

	t.Run("DoesNotDeleteARecordThatMovedPages", func(t *testing.T) {
		// A record that moves across a page boundary while a sweep reads (a
		// record deleted on a page already read pulls the next one back onto it,
		// with position cursors) is missed by that sweep: it is not marked
		// deleted, and the next sweep marks only what is gone.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
		h.mustRun("invoices")
		h.mustRun("invoices")
		inv := h.sim.Invoices()
		gone, moved := inv[10].ID, inv[50].ID // on page 1; the first of page 2
		h.sim.SetRouteHook(invoicesRoute, func(n int) {
			if n == 2 { // page 1 read, page 2 about to be: the list shifts
				h.sim.DeleteInvoices(gone)
			}
		})
		res := h.mustRun("invoices")
		h.sim.SetRouteHook(invoicesRoute, nil)
		if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(moved)); got != "false" {
			t.Errorf("invoice %d, still listed but moved while the sweep read, is marked deleted (stats %+v)", moved, res.Stats)
		}
		h.mustRun("invoices")
		h.wantExact()
		if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(gone)); got != "true" {
			t.Errorf("invoice %d, gone, deleted_at set = %s after the next sweep", gone, got)
		}
	})

	t.Run("DoesNotDeleteARecordThatMovedPagesOfADescendingList", func(t *testing.T) {
		// In a list of ids descending, a record deleted on a page already read
		// pulls the next one back onto it: that one, between two pages, is not
		// marked deleted; a record gone from inside a page's range is marked at
		// once.
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
	})

	t.Run("ComparesNoRowOfAKnownPage", func(t *testing.T) {
		// An unchanged re-sync recognises the pages the ERP answers byte for
		// byte as in the last complete sweep and compares none of their rows
		// with the warehouse.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 300})
		h.mustRun("invoices") // bulk load
		h.mustRun("invoices") // compares every row, records the pages
		probes := func() int64 {
			h.pool.Reset() // backends flush their statistics when they exit
			var n int64
			testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, "statistics", func() (bool, error) {
				var others int64
				err := h.pool.QueryRow(context.Background(), `SELECT
				(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'erpsync'),
				(SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relid = 'erp.invoices'::regclass)`).Scan(&others, &n)
				return others == 0, err
			})
			return n
		}
		before := probes()
		pool, err := db.Open(context.Background(), h.url)
		if err != nil {
			t.Fatal(err)
		}
		h.runner = &sync.Runner{Pool: pool, Prefetch: 1}
		res := h.mustRun("invoices")
		pool.Close()
		if res.Stats.Unchanged != 300 || res.Stats.Inserted+res.Stats.Updated != 0 {
			t.Errorf("re-sync stats %+v", res.Stats)
		}
		// The end of the sweep reads the 300 rows once to find those gone;
		// comparing the pages' rows would read them (or the whole table) again.
		if read := probes() - before; read > 350 {
			t.Errorf("an unchanged re-sync read %d rows of erp.invoices; known pages should need none but the sweep's end", read)
		}
	})

	t.Run("WritesAKnownPageHoldingARowItWroteEarlier", func(t *testing.T) {
		// A known page is written after all when the sweep already wrote one of
		// its rows from an earlier page: the ERP's later copy wins, as always.
		// The record that left page 1 is marked deleted only by a second sweep
		// that misses it: a sweep that listed ids out of order cannot tell a
		// record gone from one that moved while it read.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 150}) // 3 pages of 50
		h.mustRun("invoices")
		h.mustRun("invoices") // records the pages
		inv := h.sim.Invoices()
		moved := inv[120] // on page 3
		h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice {
			// Page 1 now lists invoice 120 in another version, in the place
			// of invoice 10; pages 2 and 3 are byte for byte as before.
			copy := moved
			copy.TotalBC = decimal.RequireFromString("999.99")
			cur[10] = copy
			return cur
		})
		h.mustRun("invoices")
		id := fmt.Sprint(moved.ID)
		if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, id); got != moved.TotalBC.String() {
			t.Errorf("invoice %s total %s, want %s: the copy on the later page wins", id, got, moved.TotalBC)
		}
		gone := fmt.Sprint(inv[10].ID)
		deleted := func() string {
			return h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, gone)
		}
		if got := deleted(); got != "false" {
			t.Errorf("invoice 10, missed by one sweep that listed ids out of order, deleted_at set = %s", got)
		}
		if n := h.count(`SELECT count(*) FROM erp.deletion_candidates WHERE id = $1`, gone); n != 1 {
			t.Errorf("invoice 10 held for the next sweep: %d rows, want 1", n)
		}
		h.mustRun("invoices")
		if got := deleted(); got != "true" {
			t.Errorf("invoice 10, missed by two sweeps in a row, deleted_at set = %s", got)
		}
		// The sweeps listed one id twice: the next one compares every row.
		h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice {
			cur[10] = inv[10]
			return cur
		})
		if res := h.mustRun("invoices"); res.Stats.Updated+res.Stats.Inserted != 1 {
			t.Errorf("stats %+v, want invoice 10 back", res.Stats)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 150 {
			t.Errorf("live rows %d, want 150", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.deletion_candidates`); n != 0 {
			t.Errorf("%d rows still held after a sweep that saw them all", n)
		}
	})

	t.Run("WritesNoRowVersionWhenNothingChanged", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 230})
		for _, s := range []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations"} {
			h.mustRun(s)
		}
		versions := func() string {
			return h.text(`SELECT string_agg(t || ':' || n, ',' ORDER BY t) FROM (
			SELECT 'inv' t, sum(xmin::text::bigint) n FROM erp.invoices
			UNION ALL SELECT 'cur', sum(xmin::text::bigint) FROM erp.currencies
			UNION ALL SELECT 'rates', sum(xmin::text::bigint) FROM erp.currency_rates
			UNION ALL SELECT 'cb', sum(xmin::text::bigint) FROM erp.cashboxes
			UNION ALL SELECT 'rec', sum(xmin::text::bigint) FROM erp.cashbox_reconciliations) x`)
		}
		before := versions()
		statsBefore := h.writeStats(230)
		// The re-sync runs on its own pool, closed afterwards: a backend
		// flushes its table statistics when it exits.
		pool, err := db.Open(context.Background(), h.url)
		if err != nil {
			t.Fatal(err)
		}
		h.runner = &sync.Runner{Pool: pool}
		for _, s := range []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations"} {
			res := h.mustRun(s)
			if res.Stats.Inserted != 0 || res.Stats.Updated != 0 || res.Stats.Unchanged != res.Stats.Seen {
				t.Errorf("%s re-sync stats %+v: want everything unchanged", s, res.Stats)
			}
		}
		pool.Close()
		if statsAfter := h.writeStats(0); statsAfter != statsBefore {
			t.Errorf("pg_stat_user_tables n_tup_ins/n_tup_upd moved on an unchanged re-sync:\nbefore %s\nafter  %s", statsBefore, statsAfter)
		}
		if after := versions(); after != before {
			t.Errorf("row versions changed on an unchanged re-sync:\nbefore %s\nafter  %s", before, after)
		}
		// A row whose lock was taken by ON CONFLICT would carry our xmax.
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE xmax <> 0`); n != 0 {
			t.Errorf("%d invoice rows were locked by the re-sync", n)
		}
	})

	t.Run("SetsRightWhatWasRewrittenInTheWarehouse", func(t *testing.T) {
		// Rows rewritten in the warehouse (the money zeroed with the hash left
		// as it was, or with a hash of its own; labels, listed_by and deleted_at
		// changed) while the ERP's pages stay as the last sweep recorded them
		// (every page "known") are set right, all of them, by the next complete
		// sweep; a digest forged afterwards does not hide them. The rows end as
		// a fresh load of the same ERP has them.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 200})
		h.mustRun("invoices")
		h.mustRun("invoices") // digests of an ordinary sweep
		ctx := context.Background()
		state := `SELECT string_agg(concat_ws('|', id, company_id, branch_id, total_bc, payload::text, encode(payload_hash, 'hex'),
		listed_by, deleted_at IS NULL), E'\n' ORDER BY id) FROM erp.invoices`
		want := h.text(state)

		runtime := testdb.PoolAs(t, h.url, testdb.Role(t, "erpsync_runtime"))
		ids := strings.Split(h.text(`SELECT string_agg(id, ',' ORDER BY id) FROM (SELECT id FROM erp.invoices ORDER BY id LIMIT 7) x`), ",")
		for i, q := range []string{
			`UPDATE erp.invoices SET total_bc = 0 WHERE id = $1`,
			`UPDATE erp.invoices SET payload = payload || '{"total_bc": "0.00"}', total_bc = 0 WHERE id = $1`,
			`UPDATE erp.invoices SET payload = payload || '{"total_bc": "0.00"}', total_bc = 0,
			payload_hash = sha256(convert_to((payload || '{"total_bc": "0.00"}')::text, 'UTF8')) WHERE id = $1`,
			`UPDATE erp.invoices SET company_id = '99' WHERE id = $1`,
			`UPDATE erp.invoices SET branch_id = '99' WHERE id = $1`,
			`UPDATE erp.invoices SET listed_by = 'someone-else' WHERE id = $1`,
			`UPDATE erp.invoices SET deleted_at = now() WHERE id = $1`,
		} {
			if _, err := runtime.Exec(ctx, q, ids[i]); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		// A digest forged afterwards: the page answers rewritten as they were.
		if _, err := runtime.Exec(ctx, `UPDATE erp.sweep_pages SET answer = answer`); err != nil {
			t.Fatal(err)
		}
		if h.text(state) == want {
			t.Fatal("the rewrites changed nothing")
		}
		res := h.mustRun("invoices")
		if got := h.text(state); got != want {
			t.Errorf("after the next sweep the rows are not as the ERP has them:\n%s", diffLines(want, got))
		}
		if res.Stats.Updated != int64(len(ids)) {
			t.Errorf("the sweep updated %d rows, want the %d rewritten", res.Stats.Updated, len(ids))
		}
		// An unchanged sweep after it compares nothing again and writes nothing.
		if res := h.mustRun("invoices"); res.Stats.Updated+res.Stats.Inserted != 0 {
			t.Errorf("the sweep after wrote %+v", res.Stats)
		}
	})
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

// failThirdInvoicePage refuses the third request for an invoice page (403).
func failThirdInvoicePage() erpsim.Hook {
	var calls atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" {
			if calls.Add(1) == 3 {
				w.WriteHeader(http.StatusForbidden)
				return true
			}
		}
		return false
	}
}

// diffLines shows the lines of got that are not want's, and the reverse.
func diffLines(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var out []string
	for l := range g {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	for l := range w {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	return fmt.Sprint(strings.Join(out, "\n"))
}
