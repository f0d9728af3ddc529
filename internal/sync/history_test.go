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
	if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != 2 {
		t.Errorf("%d versions kept, want 2: the changed invoice's and the deleted one's", n)
	}

	// As of the first load: everything as it was. As of now: as it is.
	if sum, n := h.sumAsOf(loaded); !sum.Equal(originalSum) || n != originalCount {
		t.Errorf("as of the first load: %s over %d rows, want %s over %d", sum, n, originalSum, originalCount)
	}
	if sum, n := h.sumAsOf(afterChange); !sum.Equal(h.sim.InvoiceTotal()) || n != originalCount-1 {
		t.Errorf("as of now: %s over %d rows, want %s over %d", sum, n, h.sim.InvoiceTotal(), originalCount-1)
	}

	// The deleted invoice's version until its deletion was kept when it
	// was marked, ended by the deletion. It comes back: the gap stays a
	// gap, and no second version is written.
	var deletedAt time.Time
	err = h.pool.QueryRow(context.Background(), `SELECT valid_to FROM erp.invoices_history
		WHERE source = $1 AND id = $2 AND ended_by = 'deletion'`, h.source, fmt.Sprint(gone.ID)).Scan(&deletedAt)
	if err != nil {
		t.Fatalf("the deleted invoice's version before its deletion: %v", err)
	}
	if got := h.text(`SELECT (deleted_at = $3 AND synced_at = $3)::text FROM erp.invoices WHERE source = $1 AND id = $2`,
		h.source, fmt.Sprint(gone.ID), deletedAt); got != "true" {
		t.Errorf("the deleted row's deleted_at and synced_at are not its version's end (%s)", got)
	}
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return append(inv, gone) })
	h.mustRun("invoices")
	back := h.clock()
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
}

// Every stream with a history table keeps versions, its default of
// before included: the messaging lists kept none unless configured, and
// now Postgres writes theirs as it writes the invoices'.
func TestEveryHistoryTableKeepsVersions(t *testing.T) {
	t.Parallel()
	const conversationsPath = "/messaging/api/conversations/"
	h := newHarness(t, erpsim.Options{Invoices: 50})
	h.mustRun("messaging_conversations")
	rows := h.count(`SELECT count(*) FROM erp.messaging_conversations`)
	if rows == 0 {
		t.Fatal("erp.messaging_conversations is empty after a sync")
	}
	// Every conversation gains a field, as an ERP release would add one.
	h.sim.SetFieldDrift(conversationsPath, map[string]json.RawMessage{"priority": json.RawMessage(`"high"`)}, nil)
	if res := h.mustRun("messaging_conversations"); res.Stats.Updated != rows {
		t.Fatalf("the re-sync after the change updated %d of %d rows", res.Stats.Updated, rows)
	}
	if n := h.count(`SELECT count(*) FROM erp.messaging_conversations_history WHERE NOT payload ? 'priority'`); n != rows {
		t.Errorf("%d versions of the conversations as they were, want %d", n, rows)
	}
}
