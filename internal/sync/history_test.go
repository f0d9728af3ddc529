package sync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// clock is the database's clock now: the times versions are stamped with.
func (h *harness) clock() time.Time {
	h.t.Helper()
	var ts time.Time
	if err := h.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&ts); err != nil {
		h.t.Fatal(err)
	}
	return ts
}

// sumAsOf is the exact sum of total_bc and the row count of the invoices
// as they were at ts.
func (h *harness) sumAsOf(ts time.Time) (decimal.Decimal, int64) {
	h.t.Helper()
	var sum decimal.Decimal
	var n int64
	err := h.pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(total_bc), 0)::text, count(*) FROM erp.invoices_as_of($1)`, ts).Scan(&sum, &n)
	if err != nil {
		h.t.Fatal(err)
	}
	return sum, n
}

func TestHistoryKeepsEveryVersionWithItsRange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 200})
	h.mustRun("invoices")
	h.mustRun("invoices") // unchanged
	if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != 0 {
		t.Fatalf("the first load and an unchanged re-sync wrote %d versions, want none", n)
	}
	originalSum, originalCount := h.sim.InvoiceTotal(), int64(len(h.sim.Invoices()))
	loaded := h.clock()

	// One invoice changes, one disappears.
	var changed, gone erpsim.Invoice
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[10].TotalBC = inv[10].TotalBC.Add(decimal.RequireFromString("1000.01"))
		changed, gone = inv[10], inv[20]
		return append(inv[:20:20], inv[21:]...)
	})
	h.mustRun("invoices")
	afterChange := h.clock()

	var endedBy, oldTotal string
	var validTo time.Time
	err := h.pool.QueryRow(context.Background(), `SELECT ended_by, total_bc::text, valid_to FROM erp.invoices_history
		WHERE source = $1 AND id = $2`, h.source, fmt.Sprint(changed.ID)).Scan(&endedBy, &oldTotal, &validTo)
	if err != nil {
		t.Fatalf("the changed invoice's previous version: %v", err)
	}
	if want := changed.TotalBC.Sub(decimal.RequireFromString("1000.01")).String(); endedBy != "change" || oldTotal != want {
		t.Errorf("kept version: ended_by %s total %s, want change %s", endedBy, oldTotal, want)
	}
	if validTo.Before(loaded) || validTo.After(afterChange) {
		t.Errorf("valid_to %s is not between the syncs (%s, %s)", validTo, loaded, afterChange)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != 1 {
		t.Errorf("%d versions kept, want 1: deleting keeps the live row, not a version", n)
	}

	// As of the first load: everything as it was. As of now: as it is.
	if sum, n := h.sumAsOf(loaded); !sum.Equal(originalSum) || n != originalCount {
		t.Errorf("as of the first load: %s over %d rows, want %s over %d", sum, n, originalSum, originalCount)
	}
	if sum, n := h.sumAsOf(afterChange); !sum.Equal(h.sim.InvoiceTotal()) || n != originalCount-1 {
		t.Errorf("as of now: %s over %d rows, want %s over %d", sum, n, h.sim.InvoiceTotal(), originalCount-1)
	}

	// The deleted invoice comes back: the version it had until its
	// deletion is kept, ended by the deletion, and the gap stays a gap.
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return append(inv, gone) })
	h.mustRun("invoices")
	back := h.clock()
	var deletedAt time.Time
	err = h.pool.QueryRow(context.Background(), `SELECT valid_to FROM erp.invoices_history
		WHERE source = $1 AND id = $2 AND ended_by = 'deletion'`, h.source, fmt.Sprint(gone.ID)).Scan(&deletedAt)
	if err != nil {
		t.Fatalf("the returning invoice's version before its deletion: %v", err)
	}
	present := func(ts time.Time) int64 {
		return h.count(`SELECT count(*) FROM erp.invoices_as_of($1) WHERE id = $2`, ts, fmt.Sprint(gone.ID))
	}
	if present(loaded) != 1 || present(afterChange) != 0 || present(back) != 1 {
		t.Errorf("the returning invoice as of load/deletion/return: %d %d %d, want 1 0 1",
			present(loaded), present(afterChange), present(back))
	}
	if sum, n := h.sumAsOf(back); !sum.Equal(h.sim.InvoiceTotal()) || n != originalCount {
		t.Errorf("as of the return: %s over %d rows, want %s over %d", sum, n, h.sim.InvoiceTotal(), originalCount)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != 2 {
		t.Errorf("%d versions kept, want 2", n)
	}

	// An unchanged re-sync keeps nothing more.
	h.mustRun("invoices")
	if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != 2 {
		t.Errorf("an unchanged re-sync kept versions: %d, want 2", n)
	}

	// Turned off in the configuration: changes overwrite without a trace.
	h.history = map[string]bool{"invoices": false}
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[10].TotalBC = inv[10].TotalBC.Add(decimal.RequireFromString("1"))
		return inv
	})
	h.mustRun("invoices")
	if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != 2 {
		t.Errorf("history off: %d versions, want still 2", n)
	}
	if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE source = $1 AND id = $2`, h.source, fmt.Sprint(changed.ID)); got != changed.TotalBC.Add(decimal.RequireFromString("1")).String() {
		t.Errorf("history off: the change was not written: %s", got)
	}
}

// History follows the configuration (Target.History, which cli builds
// from each stream's `history` key) in both directions: a stream whose
// default is on (invoices) keeps no version when configured off, and one
// whose default is off (messaging conversations) keeps versions when
// configured on. The same streams left to their defaults are the control:
// without them the first two cases could pass with a configuration that
// is ignored.
func TestHistoryOnByConfiguration(t *testing.T) {
	t.Parallel()
	const conversationsPath = "/messaging/api/conversations/"
	changeInvoice := func(h *harness) {
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[10].TotalBC = inv[10].TotalBC.Add(decimal.RequireFromString("1.00"))
			return inv
		})
	}
	// Every conversation gains a field, as an ERP release would add one.
	changeConversations := func(h *harness) {
		h.sim.SetFieldDrift(conversationsPath, map[string]json.RawMessage{"priority": json.RawMessage(`"high"`)}, nil)
	}
	for _, tt := range []struct {
		name    string
		stream  string
		history map[string]bool
		change  func(*harness)
		// versions wanted after the change: -1 for one per row of the
		// stream's table.
		versions int64
	}{
		{"default on, configured off", "invoices", map[string]bool{"invoices": false}, changeInvoice, 0},
		{"default off, configured on", "messaging_conversations", map[string]bool{"messaging_conversations": true}, changeConversations, -1},
		{"default on, not configured", "invoices", nil, changeInvoice, 1},
		{"default off, not configured", "messaging_conversations", nil, changeConversations, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{Invoices: 50})
			h.history = tt.history
			table := "erp." + tt.stream
			h.mustRun(tt.stream)
			rows := h.count(`SELECT count(*) FROM ` + table)
			if rows == 0 {
				t.Fatalf("%s is empty after a sync", table)
			}
			tt.change(h)
			if res := h.mustRun(tt.stream); res.Stats.Updated == 0 {
				t.Fatalf("the re-sync after the change updated no row: %+v", res.Stats)
			}
			want := tt.versions
			if want < 0 {
				want = rows
			}
			if n := h.count(`SELECT count(*) FROM ` + table + `_history`); n != want {
				t.Errorf("%s: %d versions kept, want %d", table, n, want)
			}
			if tt.stream == "messaging_conversations" {
				// The change reached the rows either way; the versions
				// kept are the rows as they were before it.
				if n := h.count(`SELECT count(*) FROM ` + table + ` WHERE payload ? 'priority'`); n != rows {
					t.Errorf("%d of %d conversations carry the new field", n, rows)
				}
				if n := h.count(`SELECT count(*) FROM ` + table + `_history WHERE payload ? 'priority'`); n != 0 {
					t.Errorf("%d kept versions carry the new field; a version is the row before the change", n)
				}
			}
		})
	}
}
