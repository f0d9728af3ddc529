package sync_test

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
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
