package sync_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testutil"
)

// windowHarness is a followHarness whose invoices' window is two pages
// (of 50: the newest 50 to 100 invoices).
func windowHarness(t *testing.T, sh shape) *harness {
	t.Helper()
	h := followHarness(t, sh)
	h.windowPages = map[string]int{"invoices": 2}
	return h
}

// mustWindow makes one window run, which must succeed and wait for
// nothing.
func (h *harness) mustWindow() sync.Result {
	h.t.Helper()
	res := h.window("invoices")
	if res.Err != nil || res.Status != model.StatusSucceeded || res.Waited != "" {
		h.t.Fatalf("window: %s %v (waited: %q)", res.Status, res.Err, res.Waited)
	}
	return res
}

// newest is the invoice n from the newest (0: the newest: the highest id,
// whichever end of the list it is listed at).
func newest(h *harness, n int) erpsim.Invoice {
	inv := byID(h)
	return inv[len(inv)-1-n]
}

// byID are the ERP's invoices, oldest (lowest id) first.
func byID(h *harness) []erpsim.Invoice {
	inv := slices.Clone(h.sim.Invoices())
	slices.SortFunc(inv, func(a, b erpsim.Invoice) int { return cmp.Compare(a.ID, b.ID) })
	return inv
}

func (h *harness) liveCount(id int64) int64 {
	return h.count(`SELECT count(*) FROM erp.invoices WHERE id = $1 AND deleted_at IS NULL`, fmt.Sprint(id))
}

// TestWindowRun documents the window run: a re-read of a list's newest
// pages that writes what changed there and decides the deletions inside
// the ids it read, without ever marking deleted a record the ERP lists,
// whatever the list's shape.
func TestWindowRun(t *testing.T) {
	t.Parallel()

	t.Run("MissesNothingWhateverTheListsShape", func(t *testing.T) {
		t.Parallel()
		for _, sh := range shapes {
			t.Run(sh.name, func(t *testing.T) {
				t.Parallel()

				t.Run("WritesAnEditAndMarksADeletionInsideTheWindow", func(t *testing.T) {
					t.Parallel()
					h := windowHarness(t, sh)
					// On each of the window's two pages, whichever end of the
					// list they are at.
					edited, gone, gone2 := newest(h, 60), newest(h, 1), newest(h, 70)
					h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("777.07") }, edited.ID)
					h.sim.DeleteInvoices(gone.ID, gone2.ID)
					res := h.mustWindow()
					if res.Stats.Updated != 1 || res.Stats.Deleted != 2 {
						t.Errorf("window run: %+v, want the edit written and both deletions marked", res.Stats)
					}
					if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(edited.ID)); got != "777.07" {
						t.Errorf("the edited invoice is %s after the window run", got)
					}
					if n := h.count(`SELECT count(*) FROM erp.invoices_history WHERE id = $1`, fmt.Sprint(edited.ID)); n != 1 {
						t.Errorf("the edit left %d versions, want 1", n)
					}
					if h.liveCount(gone.ID) != 0 {
						t.Errorf("the deleted invoice %d is live after the window run", gone.ID)
					}
					h.wantExact()
					h.sweepExact()
				})

				t.Run("AsksForItsPagesOnly", func(t *testing.T) {
					// Newest first, the window is its first pages, asked for
					// one by one (none fetched ahead of its end); oldest
					// first, the pages from its start to the list's end.
					t.Parallel()
					h := windowHarness(t, sh)
					h.sim.ResetRequests()
					res := h.mustWindow()
					// Oldest first, the ring's second anchor is the page of
					// 150 to 200: it and the last page.
					if n := h.sim.RequestCount(invoicesRoute); n != 2 || res.Stats.Pages != 2 {
						t.Errorf("a window of 2 pages asked %d pages and wrote %d, want 2", n, res.Stats.Pages)
					}
				})

				// Follow runs read the newest page again and again; the window
				// still reads its size, and writes an edit on its older page.
				t.Run("ReadsItsSizeAfterFollowRunsReadTheNewestPageAgain", func(t *testing.T) {
					t.Parallel()
					h := windowHarness(t, sh)
					for range 8 {
						h.mustFollow()
					}
					edited := newest(h, 60)
					h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("555.05") }, edited.ID)
					res := h.mustWindow()
					if res.Stats.Pages != 2 || res.Stats.Updated != 1 {
						t.Errorf("window run after follow runs: %+v, want its 2 pages read and the edit on the older one written", res.Stats)
					}
					h.wantExact()
				})

				t.Run("MarksAFewOfItsRowsGoneAtOnce", func(t *testing.T) {
					// 11 of the window's rows gone: under the guard's bound
					// (more than half of the rows in its range), so marked.
					t.Parallel()
					h := windowHarness(t, sh)
					var gone []int64
					for i := range 11 {
						gone = append(gone, newest(h, 2+3*i).ID)
					}
					h.sim.DeleteInvoices(gone...)
					if res := h.mustWindow(); res.Stats.Deleted != 11 || res.HeldDeletions != 0 {
						t.Errorf("window run after 11 of its rows were deleted: %+v (held %d), want all 11 marked", res.Stats, res.HeldDeletions)
					}
					h.wantExact()
				})

				t.Run("JudgesNothingOfAListOutOfOrder", func(t *testing.T) {
					// A list whose ids come out of order (kept by date, an
					// import): the window refuses it on the page that shows
					// it, marks nothing, and says so; the next complete sweep
					// learns the order.
					t.Parallel()
					h := windowHarness(t, sh)
					gone := newest(h, 1)
					h.sim.DeleteInvoices(gone.ID)
					h.sim.SetListOrder(erpsim.OrderUnordered)
					res := h.mustWindow()
					if res.Stats.Deleted != 0 || h.liveCount(gone.ID) != 1 {
						t.Errorf("a window run of a list out of order marked %d rows", res.Stats.Deleted)
					}
					if n := h.count(`SELECT count(*) FROM erp.sync_runs WHERE kind = 'window' AND note LIKE '%out of the list''s%order%'`); n != 1 {
						t.Errorf("the window run's note does not say the list is out of order")
					}
				})

				t.Run("LeavesAnEmptiedListToTheSweep", func(t *testing.T) {
					// Every record gone: a window that read none judges
					// nothing (the next sweep's guard holds it).
					t.Parallel()
					h := windowHarness(t, sh)
					var all []int64
					for _, v := range h.sim.Invoices() {
						all = append(all, v.ID)
					}
					h.sim.DeleteInvoices(all...)
					if res := h.mustWindow(); res.Stats.Deleted != 0 || h.deleted() != 0 {
						t.Errorf("a window run of an emptied list: %+v, %d rows marked deleted", res.Stats, h.deleted())
					}
				})

				t.Run("ProvesItsStartOrStartsFromAnOlderAnchor", func(t *testing.T) {
					// Old records deleted and new ones issued since the
					// ledger's anchors were read: with cursors that are
					// positions, the anchor's page now begins with a record
					// the warehouse does not hold. The window starts from an
					// older anchor, or the first page, whose start it proves,
					// and judges the ids from there only: the old deletions
					// are the sweep's.
					t.Parallel()
					h := windowHarness(t, sh)
					var old []int64
					var oldIDs []string
					for _, v := range byID(h)[:120] {
						old, oldIDs = append(old, v.ID), append(oldIDs, fmt.Sprint(v.ID))
					}
					h.sim.DeleteInvoices(old...)
					highest := newest(h, 0).ID
					added := h.sim.AddInvoices(100)
					h.mustWindow()
					// Oldest first, its start is a record the warehouse held
					// (newest first, it is the first page: the newest).
					if from := h.text(`SELECT from_id FROM erp.sync_window WHERE stream = 'invoices'`); sh.order == erpsim.OrderOldestFirst && mustID(t, from) > highest {
						t.Errorf("the window starts at id %s, a record the warehouse did not hold (the highest it held: %d)", from, highest)
					}
					h.wantListed("invoices issued since the anchors were read", added)
					h.wantNoListedDeleted()
					if n := h.count(`SELECT count(*) FROM erp.invoices WHERE id = ANY($1) AND deleted_at IS NOT NULL`, oldIDs); n != 0 {
						t.Errorf("the window marked %d old rows, below the ids it read", n)
					}
					h.sweepExact()
				})

				t.Run("ProvesItsStartAgainstTheWarehouse", func(t *testing.T) {
					// Oldest first, the window starts at an anchor only when
					// the page there begins with a record the warehouse holds:
					// with the rows of that page lost from the warehouse, it
					// starts from the anchor before, and writes them again.
					if sh.order != erpsim.OrderOldestFirst {
						t.Skip("a newest-first window starts at the first page")
					}
					t.Parallel()
					h := windowHarness(t, sh)
					inv := byID(h)
					var lost []string
					for _, v := range inv[150:200] { // the page the ring's second anchor names
						lost = append(lost, fmt.Sprint(v.ID))
					}
					if _, err := h.pool.Exec(context.Background(), `ALTER TABLE erp.invoices DISABLE TRIGGER USER;
						DELETE FROM erp.invoices WHERE id = ANY('{`+strings.Join(lost, ",")+`}'); ALTER TABLE erp.invoices ENABLE TRIGGER USER`); err != nil {
						t.Fatal(err)
					}
					res := h.mustWindow()
					if from := h.text(`SELECT from_id FROM erp.sync_window WHERE stream = 'invoices'`); from != fmt.Sprint(inv[100].ID) || res.Stats.Inserted != 50 {
						t.Errorf("the window started at id %s and inserted %d rows; want it to start at %d, the page before the lost one, and write the lost 50 again",
							from, res.Stats.Inserted, inv[100].ID)
					}
					h.wantExact()
				})

				t.Run("MarksTheNewestRecordDeleted", func(t *testing.T) {
					// The window's range is open at the newest end: the
					// newest record, deleted, is judged.
					t.Parallel()
					h := windowHarness(t, sh)
					gone := newest(h, 0)
					h.sim.DeleteInvoices(gone.ID)
					if res := h.mustWindow(); res.Stats.Deleted != 1 || h.liveCount(gone.ID) != 0 {
						t.Errorf("window run after the newest invoice's deletion: %+v", res.Stats)
					}
					h.wantExact()
				})

				t.Run("LeavesWhatIsOutsideTheWindowToTheSweep", func(t *testing.T) {
					t.Parallel()
					h := windowHarness(t, sh)
					old, oldGone := byID(h)[10], byID(h)[20]
					h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("4242.42") }, old.ID)
					h.sim.DeleteInvoices(oldGone.ID)
					res := h.mustWindow()
					if res.Stats.Updated != 0 || res.Stats.Deleted != 0 || h.liveCount(oldGone.ID) != 1 {
						t.Errorf("window run beside changes to old invoices: %+v; want them left to the sweep", res.Stats)
					}
					h.sweepExact()
					if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(old.ID)); got != "4242.42" {
						t.Errorf("the changed old invoice is %s after the sweep", got)
					}
				})

				t.Run("HoldsARecordThatMovedAcrossItsPagesUntilTheNextWindow", func(t *testing.T) {
					// A record deleted on a page the window has read pulls the
					// next one back across the page boundary when cursors are
					// positions: the window misses a record the ERP lists. It
					// marks it not: a row between two pages is held for the
					// next window run, which marks only what is really gone.
					t.Parallel()
					h := windowHarness(t, sh)
					victim := newest(h, 60)
					if sh.order == erpsim.OrderNewestFirst {
						victim = newest(h, 10)
					}
					h.sim.SetRouteHook(invoicesRoute, func(n int) {
						if n == 2 { // its first page read, its second asked for
							h.sim.DeleteInvoices(victim.ID)
						}
					})
					h.mustWindow()
					h.sim.SetRouteHook(invoicesRoute, nil)
					h.wantNoListedDeleted()
					if res := h.mustWindow(); h.liveCount(victim.ID) != 0 {
						t.Errorf("the next window run: %+v; the deleted invoice is still live", res.Stats)
					}
					h.wantExact()
					h.sweepExact()
				})

				t.Run("MarksNothingIssuedWhileItReads", func(t *testing.T) {
					t.Parallel()
					h := windowHarness(t, sh)
					var during []erpsim.Invoice
					var mu gosync.Mutex
					h.sim.SetRouteHook(invoicesRoute, func(n int) {
						if n == 2 {
							mu.Lock()
							during = h.sim.AddInvoices(7)
							mu.Unlock()
						}
					})
					h.mustWindow()
					h.sim.SetRouteHook(invoicesRoute, nil)
					h.wantNoListedDeleted()
					h.followMarksNothing()
					mu.Lock()
					h.wantListed("invoices issued while a window run read, after the next follow", during)
					mu.Unlock()
					h.sweepExact()
				})

				t.Run("MissesNothingWhenKilledAtAnyRequest", func(t *testing.T) {
					t.Parallel()
					h := windowHarness(t, sh)
					for k := 1; k <= 3; k++ {
						h.sim.DeleteInvoices(newest(h, 3).ID)
						h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.Status = fmt.Sprint("killed at ", k) }, newest(h, 5).ID)
						ctx, cancel := context.WithCancel(context.Background())
						h.sim.SetRouteHook(invoicesRoute, func(n int) {
							if n == k {
								cancel()
							}
						})
						h.runCtx(ctx, "invoices", h.runner.Window)
						cancel()
						h.sim.SetRouteHook(invoicesRoute, nil)
						testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, "the killed run's lock to go", func() (bool, error) {
							res := h.window("invoices")
							return res.Err == nil && res.Status == model.StatusSucceeded, nil
						})
						h.wantNoListedDeleted()
						h.wantExact()
					}
					h.sweepExact()
				})
			})
		}
	})

	t.Run("RunsBesideASweepUnderWayWithoutTouchingIt", func(t *testing.T) {
		// A sweep stopped half way: a window run reads beside it (its lock
		// and seen-list are its own), leaves the sweep where it stands, and
		// the sweep resumes and completes; the warehouse is exact.
		t.Parallel()
		for _, sh := range shapes {
			t.Run(sh.name, func(t *testing.T) {
				t.Parallel()
				h := windowHarness(t, sh)
				ctx, cancel := context.WithCancel(context.Background())
				h.sim.SetRouteHook(invoicesRoute, func(n int) {
					if n == 3 {
						cancel()
					}
				})
				h.runCtx(ctx, "invoices", h.runner.Run)
				cancel()
				h.sim.SetRouteHook(invoicesRoute, nil)
				before := h.text(`SELECT sweep_id || ' ' || pages || ' ' || coalesce(cursor, '') FROM erp.sync_checkpoints WHERE stream = 'invoices'`)
				gone := newest(h, 2)
				h.sim.DeleteInvoices(gone.ID)
				testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, "a window run beside the stopped sweep", func() (bool, error) {
					res := h.window("invoices")
					return res.Err == nil && res.Status == model.StatusSucceeded, nil
				})
				if after := h.text(`SELECT sweep_id || ' ' || pages || ' ' || coalesce(cursor, '') FROM erp.sync_checkpoints WHERE stream = 'invoices'`); after != before {
					t.Errorf("the sweep under way stood at %s, after the window run at %s", before, after)
				}
				if h.liveCount(gone.ID) != 0 {
					t.Errorf("the window run beside a sweep did not mark the newest deletion")
				}
				h.sweepExact()
			})
		}
	})

	t.Run("WaitsUntilTheListsOrderIsKnown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120, PageSizeCap: 50, ListOrder: erpsim.OrderUnordered})
		h.mustRun("invoices")
		res := h.window("invoices")
		if res.Status != model.StatusSucceeded || res.Waited == "" || res.Stats.Pages != 0 {
			t.Errorf("a window run of an unordered list: %+v; want it to wait, saying why, reading nothing", res)
		}
	})

	t.Run("LearnsItsSizeFromWhereChangesAre", func(t *testing.T) {
		// With no size set, a window reads untaught pages until changes were
		// seen, then as many pages as held 95 % of the changes any kind of
		// run saw: it shrinks to where the changes are, and grows when
		// sweeps find them further back.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 230, ListOrder: erpsim.OrderOldestFirst})
		h.pages = 10 // 23 pages
		h.mustRun("invoices")
		res := h.mustWindow()
		if res.Stats.Pages < 20 {
			t.Errorf("an untaught window read %d pages, want at least 20", res.Stats.Pages)
		}
		// Changes on the newest page only, seen by window runs.
		for i := range 25 {
			h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.Status = fmt.Sprint("edit ", i) }, newest(h, i%5).ID)
			h.mustWindow()
		}
		small := h.mustWindow()
		if small.Stats.Pages > 3 {
			t.Errorf("after 25 changes on the newest page, the window read %d pages, want at most 3", small.Stats.Pages)
		}
		// Changes ten pages back, which only complete sweeps see.
		h.pool.Exec(context.Background(), `DELETE FROM erp.change_positions`)
		for i := range 25 {
			h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.Status = fmt.Sprint("old edit ", i) }, newest(h, 100+i).ID)
			h.pool.Exec(context.Background(), `DELETE FROM erp.sweep_pages`)
			h.mustRun("invoices")
		}
		if large := h.mustWindow(); large.Stats.Pages < 10 {
			t.Errorf("after 25 changes ten pages back, the window read %d pages, want at least 10", large.Stats.Pages)
		}
		h.wantExact()
	})

	t.Run("ReadsJournalEntriesByStartAndLength", func(t *testing.T) {
		t.Parallel()
		for _, order := range []erpsim.ListOrder{erpsim.OrderOldestFirst, erpsim.OrderNewestFirst} {
			t.Run(fmt.Sprint(order), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, erpsim.Options{ListOrder: order})
				h.pages = 10
				h.windowPages = map[string]int{"journal_entries": 2}
				h.sim.AddJournalEntries(45)
				h.mustRun("journal_entries")
				entries := h.sim.JournalEntries()
				newestEntry := entries[len(entries)-1]
				for _, e := range entries {
					if e.ID > newestEntry.ID {
						newestEntry = e
					}
				}
				// The newest entry deleted; and, oldest first, twenty new
				// issued and the oldest twenty deleted, so that the start the
				// ledger keeps now begins with an entry the warehouse does not
				// hold: the window proves its start from an older one.
				var added []erpsim.JournalEntry
				oldest := map[string]bool{}
				if order == erpsim.OrderOldestFirst {
					added = h.sim.AddJournalEntries(20)
					for _, e := range entries[:20] {
						oldest[e.ID] = true
					}
				}
				h.sim.MutateJournalEntries(func(es []erpsim.JournalEntry) []erpsim.JournalEntry {
					out := es[:0]
					for _, e := range es {
						if e.ID != newestEntry.ID && !oldest[e.ID] {
							out = append(out, e)
						}
					}
					return out
				})
				res := h.window("journal_entries")
				if res.Err != nil || res.Waited != "" || res.Stats.Deleted != 1 {
					t.Errorf("window run of journal entries after the newest one's deletion: %+v", res)
				}
				if from := h.text(`SELECT from_id FROM erp.sync_window WHERE stream = 'journal_entries'`); slices.ContainsFunc(added, func(e erpsim.JournalEntry) bool { return e.ID == from }) {
					t.Errorf("the window starts at entry %s, which the warehouse did not hold", from)
				}
				var listed []string
				for _, e := range h.sim.JournalEntries() {
					listed = append(listed, e.ID)
				}
				if n := h.count(`SELECT count(*) FROM erp.journal_entries WHERE deleted_at IS NOT NULL AND id = ANY($1)`, listed); n != 0 {
					t.Errorf("after the window run, %d entries the ERP lists are marked deleted", n)
				}
				h.mustRun("journal_entries")
				if n, want := h.count(`SELECT count(*) FROM erp.journal_entries WHERE deleted_at IS NULL`), int64(len(listed)); n != want {
					t.Errorf("after the sweep: %d live entries, the ERP lists %d", n, want)
				}
			})
		}
	})
}

// mustID reads a whole-number id.
func mustID(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("id %q: %v", s, err)
	}
	return n
}

// wantNoListedDeleted checks that no invoice the ERP lists is marked
// deleted.
func (h *harness) wantNoListedDeleted() {
	h.t.Helper()
	var ids []string
	for _, v := range h.sim.Invoices() {
		ids = append(ids, fmt.Sprint(v.ID))
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NOT NULL AND id = ANY($1)`, ids); n != 0 {
		h.t.Errorf("%d invoices the ERP lists are marked deleted", n)
	}
}
