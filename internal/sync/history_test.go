package sync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
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

// TestHistory documents the warehouse's history: every version of a row,
// kept by Postgres with the range it was current, and the past the daemon's
// role cannot rewrite without leaving a version.
func TestHistory(t *testing.T) {
	t.Parallel()

	t.Run("KeepsEveryVersionWithItsRange", func(t *testing.T) {
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
	})

	t.Run("IsKeptByEveryStreamWithAHistoryTable", func(t *testing.T) {
		// Every stream with a history table keeps versions, its default of
		// before included: the messaging lists kept none unless configured, and
		// now Postgres writes theirs as it writes the invoices'.
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
	})

	t.Run("CannotBeWrittenByTheRuntimeRole", func(t *testing.T) {
		// Over every table of erp: the daemon's role may not update a row's
		// source, id, first_seen_at, synced_at or first_listed_by, nor insert
		// first_seen_at or synced_at (Postgres stamps them), nor update when a
		// sweep started, and may not write any history.
		t.Parallel()
		pool, _ := testdb.Pool(t)
		rows, err := pool.Query(context.Background(), `
SELECT c.relname::text, a.attname::text,
       has_column_privilege('erpsync_runtime', c.oid, a.attnum, 'UPDATE'),
       has_column_privilege('erpsync_runtime', c.oid, a.attnum, 'INSERT')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
WHERE n.nspname = 'erp' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND (a.attname IN ('source', 'id', 'first_seen_at', 'synced_at', 'first_listed_by')
       OR c.relname = 'sync_checkpoints' AND a.attname IN ('sweep_started_at', 'last_sweep_started_at'))
ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		var table, column string
		var update, insert bool
		checked := 0
		if _, err := pgx.ForEachRow(rows, []any{&table, &column, &update, &insert}, func() error {
			checked++
			if update {
				t.Errorf("the runtime role may update erp.%s.%s", table, column)
			}
			if insert && (column == "first_seen_at" || column == "synced_at") {
				t.Errorf("the runtime role may insert erp.%s.%s", table, column)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, h := range queryStrings(t, pool, `
SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relname LIKE '%\_history'
  AND (has_table_privilege('erpsync_runtime', c.oid, 'DELETE') OR has_table_privilege('erpsync_runtime', c.oid, 'TRUNCATE')
       OR has_any_column_privilege('erpsync_runtime', c.oid, 'INSERT') OR has_any_column_privilege('erpsync_runtime', c.oid, 'UPDATE'))`) {
			t.Errorf("the runtime role may write erp.%s", h)
		}
		if checked < 50 {
			t.Errorf("%d columns checked: too few for the query to mean anything", checked)
		}
	})

	t.Run("HoldsOnlyTimesPostgresWroteAndTheFirstListerItWasGiven", func(t *testing.T) {
		// Over every table the row trigger guards, with rows of every scope: a
		// row the daemon's role marks deleted at a time of its own is deleted
		// now, by Postgres's clock, and the time of a deletion stays as it was;
		// a row without a first lister takes the one it is given, and then
		// keeps it: the daemon's role may not change it, and its owner is
		// refused. Every table with listed_by has a first lister.
		t.Parallel()
		pool, url := testdb.Pool(t)
		fillEveryTable(t, pool)
		ctx := context.Background()
		if missing := queryStrings(t, pool, `
SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
WHERE n.nspname = 'erp' AND c.relkind = 'r' AND a.attname = 'listed_by' AND c.relname NOT LIKE '%\_history'
  AND NOT EXISTS (SELECT 1 FROM pg_attribute f WHERE f.attrelid = c.oid AND f.attname = 'first_listed_by' AND NOT f.attisdropped)`); len(missing) > 0 {
			t.Errorf("tables with listed_by and no first_listed_by: %v", missing)
		}
		tables := queryStrings(t, pool, `SELECT c.relname::text FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'erp' AND g.tgname = 'guard_rows' ORDER BY 1`)
		if len(tables) < 12 {
			t.Fatalf("%d tables guarded (%v): too few for the test to mean anything", len(tables), tables)
		}
		runtime, owner := testdb.PoolAs(t, url, testdb.Role(t, "erpsync_runtime")), testdb.PoolAs(t, url, testdb.Owner)
		exec := func(p *pgxpool.Pool, q string) error {
			_, err := p.Exec(ctx, q)
			return err
		}
		for _, tbl := range tables {
			table := "erp." + pgx.Identifier{tbl}.Sanitize()
			rows := count(t, pool, `SELECT count(*) FROM `+table)
			if rows == 0 {
				t.Fatalf("%s has no fixture rows", table)
			}
			for _, q := range []string{`UPDATE ` + table + ` SET listed_by = 'fx-first'`, `UPDATE ` + table + ` SET listed_by = 'fx-second'`} {
				if err := exec(runtime, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := exec(runtime, `UPDATE `+table+` SET first_listed_by = 'fx-other'`); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s: the daemon's role changed first_listed_by (%v)", table, err)
			}
			if err := exec(owner, `UPDATE `+table+` SET first_listed_by = 'fx-other'`); err == nil || !strings.Contains(err.Error(), "first lister of a row never changes") {
				t.Errorf("%s: the owner changed first_listed_by (%v)", table, err)
			}
			if n := count(t, pool, `SELECT count(*) FROM `+table+` WHERE first_listed_by = 'fx-first' AND listed_by = 'fx-second'`); n != rows {
				t.Errorf("%s: %d of %d rows kept the first lister they were given", table, n, rows)
			}

			var before, after time.Time
			if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if err := exec(runtime, `UPDATE `+table+` SET deleted_at = '2999-01-01'`); err != nil {
				t.Fatal(err)
			}
			if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if err := exec(runtime, `UPDATE `+table+` SET deleted_at = '2000-01-01'`); err != nil {
				t.Fatal(err)
			}
			if n := count(t, pool, `SELECT count(*) FROM `+table+` WHERE deleted_at BETWEEN $1 AND $2`, before, after); n != rows {
				t.Errorf("%s: %d of %d rows marked deleted at a time of the daemon's role's choosing were not deleted by Postgres's clock, or not kept so",
					table, rows-n, rows)
			}
		}
	})

	t.Run("KeepsAVersionOfEveryRewriteOrRefusesIt", func(t *testing.T) {
		// What a stolen login of the daemon's role does to the past. Forging
		// history, synced_at, a key or first_seen_at is refused; relabelling,
		// zeroing the money (with or without the payload, the hash left as it
		// was), handing a row to another login, marking it deleted, and deleting
		// snapshots and journal lines each leave the version they replace,
		// stamped by Postgres. The schema's owner cannot change a key either.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 60, BalanceSheetHistory: true})
		for _, s := range []string{"invoices", "journal_entries", "journal_lines", "balance_sheet"} {
			h.mustRun(s)
		}
		ctx := context.Background()
		runtime := testdb.PoolAs(t, h.url, testdb.Role(t, "erpsync_runtime"))
		for _, q := range []string{
			`INSERT INTO erp.invoices_history (source, id, company_id, branch_id, payload, payload_hash, first_seen_at, valid_from, valid_to, ended_by)
		 VALUES ('test', 'forged', '1', '1', '{}', '\x00', now(), now() - interval '1 day', now(), 'change')`,
			`UPDATE erp.invoices_history SET total_bc = 0`, `DELETE FROM erp.invoices_history`,
			`INSERT INTO erp.balance_sheet_snapshot_history SELECT * FROM erp.balance_sheet_snapshot_history`,
			`UPDATE erp.invoices SET synced_at = 'infinity'`, `UPDATE erp.invoices SET id = id || 'x'`,
			`UPDATE erp.invoices SET source = 'elsewhere'`, `UPDATE erp.invoices SET first_seen_at = now()`,
			`INSERT INTO erp.invoices (source, id, company_id, branch_id, payload, payload_hash, synced_at) VALUES ('test', 'new', '1', '1', '{}', '\x01', 'infinity')`,
			`UPDATE erp.balance_sheet_snapshots SET balance = 0`, `UPDATE erp.journal_lines SET debit = 0`,
			`SELECT * FROM erp.company_grants`,
		} {
			if _, err := runtime.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as the runtime role: %v, want it refused", q, err)
			}
		}
		if _, err := h.pool.Exec(ctx, `UPDATE erp.invoices SET id = id || 'x' WHERE id = (SELECT min(id) FROM erp.invoices)`); err == nil ||
			!strings.Contains(err.Error(), "never change") {
			t.Errorf("the key changed by the administrator: %v, want it refused", err)
		}

		ids := h.text(`SELECT string_agg(id, ',' ORDER BY id) FROM (SELECT id FROM erp.invoices ORDER BY id LIMIT 5) x`)
		victim := strings.Split(ids, ",")
		before := h.count(`SELECT count(*) FROM erp.invoices_history`)
		for i, q := range []string{
			`UPDATE erp.invoices SET branch_id = '9' WHERE id = $1`,
			`UPDATE erp.invoices SET total_bc = 0 WHERE id = $1`,
			`UPDATE erp.invoices SET payload = payload || '{"total_bc": "0.00"}', total_bc = 0 WHERE id = $1`,
			`UPDATE erp.invoices SET listed_by = 'someone-else' WHERE id = $1`,
			`UPDATE erp.invoices SET deleted_at = now() WHERE id = $1`,
		} {
			if _, err := runtime.Exec(ctx, q, victim[i]); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if n := h.count(`SELECT count(*) FROM erp.invoices_history WHERE id = $1 AND valid_to = (SELECT synced_at FROM erp.invoices WHERE id = $1)`, victim[i]); n != 1 {
				t.Errorf("%s left %d versions ending when the row was stamped, want 1", q, n)
			}
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices_history`) - before; n != 5 {
			t.Errorf("%d versions for 5 rewrites", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices_history WHERE id = $1 AND ended_by = 'deletion'`, victim[4]); n != 1 {
			t.Errorf("marking a row deleted left %d versions ended by the deletion", n)
		}

		for _, c := range []struct{ table, history string }{
			{"balance_sheet_snapshots", "balance_sheet_snapshot_history"},
			{"journal_lines", "journal_lines_history"},
		} {
			live := h.count(`SELECT count(*) FROM erp.` + c.table)
			kept := h.count(`SELECT count(*) FROM erp.` + c.history)
			if live == 0 {
				t.Fatalf("erp.%s is empty after a sync", c.table)
			}
			if _, err := runtime.Exec(ctx, `DELETE FROM erp.`+c.table); err != nil {
				t.Fatalf("deleting %s as the runtime role: %v", c.table, err)
			}
			if n := h.count(`SELECT count(*) FROM erp.`+c.history) - kept; n != live {
				t.Errorf("deleting %d rows of erp.%s kept %d versions", live, c.table, n)
			}
		}
	})
}
