package sync_test

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

func TestFollowRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 230}) // 5 pages of 50
	mustFollow := func() sync.Result {
		t.Helper()
		res := h.follow("invoices")
		if res.Err != nil || res.Status != model.StatusSucceeded {
			t.Fatalf("follow: %s %v", res.Status, res.Err)
		}
		return res
	}
	if res := mustFollow(); res.Swept == "" || res.FreshAt.IsZero() {
		t.Fatalf("the first run of a login is a complete sweep: %+v", res)
	}
	if res := mustFollow(); res.Swept == "" {
		t.Fatalf("one sweep does not prove an order: %+v", res)
	}
	h.sim.ResetRequests()
	res := mustFollow()
	if res.Swept != "" || !res.FreshAt.IsZero() || res.FollowedAt.IsZero() {
		t.Fatalf("after two ascending sweeps a follow follows: %+v", res)
	}
	if n := h.invoiceGETs(); n != 1 {
		t.Errorf("a follow with nothing new asked %d invoice pages, want 1", n)
	}
	h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice {
		next := cur[len(cur)-1]
		next.ID++
		next.Number = "INV-NEW"
		next.TotalBC = decimal.RequireFromString("1.23")
		return append(cur, next)
	})
	h.sim.ResetRequests()
	res = mustFollow()
	if res.Stats.Inserted != 1 || res.Swept != "" {
		t.Errorf("one new invoice: %+v", res)
	}
	if n := h.invoiceGETs(); n != 1 {
		t.Errorf("a follow with one new invoice on the last page asked %d pages, want 1", n)
	}
	h.wantInvoices(231)
}
