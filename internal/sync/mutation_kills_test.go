package sync_test

import (
	"slices"
	"strings"
	gosync "sync"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

func TestAFollowGivesUpOnAListThatChangesUnderEverySecondLook(t *testing.T) {
	t.Parallel()
	h := followHarness(t, shapes[0])
	added := h.sim.AddInvoices(120)
	// Every other new invoice is held back, and given back to the list at
	// its place, one at every request, lowest first: each lands behind the
	// pages already read, so every second look finds a record the follow
	// did not read.
	var (
		mu   gosync.Mutex
		held []erpsim.Invoice
	)
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		return slices.DeleteFunc(inv, func(v erpsim.Invoice) bool {
			back := v.ID >= added[0].ID && (v.ID-added[0].ID)%2 == 1
			if back {
				held = append(held, v)
			}
			return back
		})
	})
	h.sim.SetRouteHook(invoicesRoute, func(n int) {
		mu.Lock()
		defer mu.Unlock()
		if len(held) == 0 {
			return
		}
		back := held[0]
		held = held[1:]
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			at, _ := slices.BinarySearchFunc(inv, back.ID, func(v erpsim.Invoice, id int64) int { return int(v.ID - id) })
			return slices.Insert(inv, at, back)
		})
	})
	res := h.mustFollow()
	h.sim.SetRouteHook(invoicesRoute, nil)
	if want := "the list changed under every second look (4 follows)"; !strings.HasPrefix(res.Swept, want) {
		t.Errorf("a follow of a list that changed under every second look: swept %q, want %q", res.Swept, want)
	}
	// The sweep read a list still changing; once it holds still, the
	// next sweep leaves the warehouse exact.
	h.mustRun("invoices")
	h.wantExact()
}
