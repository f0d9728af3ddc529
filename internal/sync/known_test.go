package sync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testutil"
)

// An unchanged re-sync recognises the pages the ERP answers byte for
// byte as in the last complete sweep and compares none of their rows
// with the warehouse.
func TestKnownPagesAreNotCompared(t *testing.T) {
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
}

// A known page is written after all when the sweep already wrote one of
// its rows from an earlier page: the ERP's later copy wins, as always.
// The record that left page 1 is marked deleted only by a second sweep
// that misses it: a sweep that listed ids out of order cannot tell a
// record gone from one that moved while it read.
func TestKnownPageWithARowWrittenEarlier(t *testing.T) {
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
}

// A bulk load leaves the planner statistics of what it loaded: without
// them the next sweeps' lookups by id are planned for an empty table.
func TestBulkLoadRefreshesStatistics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 300})
	h.mustRun("invoices")
	if n := h.count(`SELECT reltuples::bigint FROM pg_class WHERE oid = 'erp.invoices'::regclass`); n != 300 {
		t.Errorf("the planner believes erp.invoices holds %d rows after the bulk load, want 300", n)
	}
}
