package sync_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// A follow of a list read newest first stops at the first page that ends
// with a record the warehouse stored, unchanged, by the end of the last
// complete read: every record after it is older and was read then.
func TestAFollowOfANewestFirstList(t *testing.T) {
	t.Parallel()
	newestFirst := shape{"newest first by position", erpsim.OrderNewestFirst, erpsim.CursorPosition}

	t.Run("stops at the first page ending with a record stored unchanged", func(t *testing.T) {
		t.Parallel()
		h := followHarness(t, newestFirst)
		added := h.sim.AddInvoices(60) // page 1: 50 new; page 2: 10 new, 40 stored
		h.sim.ResetRequests()
		res := h.followMarksNothing()
		if res.Swept != "" || res.Stats.Inserted != 60 {
			t.Errorf("60 new invoices: %+v", res)
		}
		// Two pages read, page 2 ending with an invoice stored unchanged,
		// and page 1 asked for again (the second look).
		if n := h.sim.RequestCount(invoicesRoute); n != 3 {
			t.Errorf("the follow asked %d pages, want 3: two read (page 2 ends with an invoice stored unchanged), one second look", n)
		}
		h.wantListed("the new invoices", added)
	})

	t.Run("counts as read what the last complete sweep stored after the last follow", func(t *testing.T) {
		t.Parallel()
		h := followHarness(t, newestFirst)
		h.mustFollow() // the last follow, before the sweep below
		h.sim.AddInvoices(50)
		h.mustRun("invoices") // stores them: page 1 after it ends with one
		h.sim.ResetRequests()
		if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 0 {
			t.Errorf("nothing new: %+v", res)
		}
		if n := h.sim.RequestCount(invoicesRoute); n != 1 {
			t.Errorf("the follow asked %d pages, want 1: page 1 ends with an invoice the last complete sweep stored", n)
		}
	})

	t.Run("reads on past a page ending with a record changed since", func(t *testing.T) {
		t.Parallel()
		h := followHarness(t, newestFirst)
		h.sim.AddInvoices(60)
		// The last invoice of page 2 (the 40th stored one) changes.
		last := h.sim.Invoices()[99].ID
		h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("31.41") }, last)
		h.sim.ResetRequests()
		res := h.followMarksNothing()
		if res.Swept != "" || res.Stats.Inserted != 60 || res.Stats.Updated != 1 {
			t.Errorf("60 new invoices and one changed: %+v", res)
		}
		// Three pages read, two asked for again (the second look).
		if n := h.sim.RequestCount(invoicesRoute); n != 5 {
			t.Errorf("the follow asked %d pages, want 5: three read (page 2 ends with a changed invoice, page 3 with one unchanged), two second looks", n)
		}
	})
}

// A follow of a list read oldest first starts at the last non-empty page
// read (its anchor), which must begin with an id the warehouse holds and
// no higher than the highest the login read.
func TestAFollowOfAnOldestFirstList(t *testing.T) {
	t.Parallel()

	t.Run("proves continuity from a page beginning with the highest id read", func(t *testing.T) {
		t.Parallel()
		// 201 invoices in pages of 50: the last page holds the highest
		// id alone.
		h := newHarness(t, erpsim.Options{Invoices: 201, PageSizeCap: 50})
		h.mustRun("invoices")
		h.mustRun("invoices")
		h.sim.ResetRequests()
		if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 0 {
			t.Errorf("nothing new: %+v", res)
		}
		if n := h.sim.RequestCount(invoicesRoute); n != 1 {
			t.Errorf("the follow asked %d pages, want 1: the anchor's page begins with the highest id read, which proves continuity", n)
		}
		added := h.sim.AddInvoices(3)
		if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 3 {
			t.Errorf("three new invoices: %+v", res)
		}
		h.wantListed("the new invoices", added)
	})
}

// A follow run that cannot follow sweeps; when another run is sweeping
// the list, it leaves the list to that sweep: it never abandons a sweep
// under way, and it records no follow, having read nothing.
func TestAFollowRunBesideASweepUnderWay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50, ListOrder: erpsim.OrderUnordered})
	h.mustRun("invoices")
	h.mustRun("invoices")
	added := h.sim.AddInvoices(3)
	var followed sync.Result
	done := make(chan struct{})
	h.sim.SetRouteHook(invoicesRoute, func(n int) {
		if n != 2 {
			return
		}
		h.sim.SetRouteHook(invoicesRoute, nil)
		followed = h.follow("invoices") // the sweep is on its second page
		close(done)
	})
	swept := h.mustRun("invoices")
	<-done
	if followed.Err != nil || followed.Status != model.StatusSucceeded {
		t.Fatalf("a follow run beside a sweep under way: %s %v", followed.Status, followed.Err)
	}
	if followed.Swept == "" {
		t.Errorf("a follow run of an unordered list says no reason to sweep: %+v", followed)
	}
	if !followed.FollowedAt.IsZero() || followed.Stats.Pages != 0 {
		t.Errorf("a follow run that left the list to a sweep under way recorded a follow or read pages: %+v", followed)
	}
	if n := h.count(`SELECT count(*) FROM erp.sync_follow WHERE stream = 'invoices' AND last_follow_at IS NOT NULL`); n != 0 {
		t.Errorf("%d follows recorded, want none: the follow run read nothing", n)
	}
	if swept.Stats.Inserted != 3 || swept.FreshAt.IsZero() {
		t.Errorf("the sweep under way did not complete with the new invoices: %+v", swept)
	}
	h.wantListed("new invoices, read by the sweep under way", added)
	h.wantExact()
}

// A follow run that cannot prove continuity sweeps the list in the same
// run, says why, and records the follow run with that reason.
func TestAFollowRunThatSweepsRecordsWhy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 120, PageSizeCap: 50, ListOrder: erpsim.OrderUnordered})
	h.mustRun("invoices")
	h.mustRun("invoices")
	added := h.sim.AddInvoices(2)
	res := h.followMarksNothing()
	if res.Swept == "" || res.FreshAt.IsZero() || res.Stats.Inserted != 2 {
		t.Errorf("a follow run of an unordered list should be a complete sweep saying why: %+v", res)
	}
	if res.FollowedAt.IsZero() {
		t.Errorf("a follow run that swept recorded no follow: %+v", res)
	}
	if got := h.text(`SELECT coalesce(last_follow_swept, '') FROM erp.sync_follow WHERE stream = 'invoices'`); got != res.Swept {
		t.Errorf("the follow run is recorded as swept because %q, want %q", got, res.Swept)
	}
	h.wantListed("new invoices", added)
}

// Every page a follow reads must keep the list's order; a follow whose
// second look differed is made again (a few times) before the run sweeps.
func TestAFollowProvesWhatItRead(t *testing.T) {
	t.Parallel()
	oldestFirst := shape{"oldest first by position", erpsim.OrderOldestFirst, erpsim.CursorPosition}

	t.Run("sweeps when a page breaks the list's order", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
		late := h.sim.Invoices()[100]
		h.sim.DeleteInvoices(late.ID)
		h.mustRun("invoices")
		h.mustRun("invoices")
		// The ERP lists a record with an id from the middle of the list
		// last: the anchor's page is no longer ascending.
		h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return append(cur, late) })
		res := h.followMarksNothing()
		if !strings.Contains(res.Swept, "out of the list's ascending order") {
			t.Errorf("a follow meeting a page out of order should sweep, saying so; swept because %q", res.Swept)
		}
		h.wantListed("the record listed out of order", []erpsim.Invoice{late})
	})

	t.Run("sweeps when the anchor's page begins with a record the warehouse does not hold", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
		late := h.sim.Invoices()[100]
		h.sim.DeleteInvoices(late.ID)
		h.mustRun("invoices")
		h.mustRun("invoices")
		// The ERP lists a record with an id below the highest read first
		// on the anchor's page (from position 200): nothing proves what
		// came before it was read.
		h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return slices.Insert(cur, 200, late) })
		res := h.followMarksNothing()
		if res.Swept == "" {
			t.Errorf("a follow from an anchor page beginning with a record the warehouse does not hold followed: %+v", res)
		}
		h.wantListed("the record the warehouse did not hold", []erpsim.Invoice{late})
	})

	t.Run("is made again, not swept, when a second look differed once", func(t *testing.T) {
		t.Parallel()
		h := followHarness(t, oldestFirst)
		added := h.sim.AddInvoices(120)
		// A record of the anchor's page, the first the follow reads, is
		// deleted once it is read: the first record of the next page moves
		// onto it, unread, and the second look finds it.
		inv := h.sim.Invoices()
		victim := inv[len(inv)-len(added)-5].ID
		h.sim.SetRouteHook(invoicesRoute, func(n int) {
			if n == 2 {
				h.sim.DeleteInvoices(victim)
			}
		})
		res := h.followMarksNothing()
		h.sim.SetRouteHook(invoicesRoute, nil)
		if res.Swept != "" {
			t.Errorf("a follow whose second look differed once swept because %q; it should follow again", res.Swept)
		}
		h.wantListed("the new invoices after a follow made again", added)
	})
}
