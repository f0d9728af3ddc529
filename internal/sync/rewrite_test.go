package sync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestRuntimeRoleCannotWriteThePast enumerates every table of erp: the
// daemon's role may not update a row's source, id, first_seen_at or
// synced_at, nor insert the last two (Postgres stamps them), and may not
// write any history.
func TestRuntimeRoleCannotWriteThePast(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	rows, err := pool.Query(context.Background(), `
SELECT c.relname::text, a.attname::text,
       has_column_privilege('erpsync_runtime', c.oid, a.attnum, 'UPDATE'),
       has_column_privilege('erpsync_runtime', c.oid, a.attnum, 'INSERT')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
WHERE n.nspname = 'erp' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND a.attname IN ('source', 'id', 'first_seen_at', 'synced_at')
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
}

// TestARewriteLeavesAVersionOrIsRefused: what a stolen login of the
// daemon's role does to the past. Forging history, synced_at, a key or
// first_seen_at is refused; relabelling, zeroing the money (with or
// without the payload, the hash left as it was), handing a row to
// another login, marking it deleted, and deleting snapshots and journal
// lines each leave the version they replace, stamped by Postgres. The
// schema's owner cannot change a key either.
func TestARewriteLeavesAVersionOrIsRefused(t *testing.T) {
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
		stale := h.count(`SELECT count(*) FROM erp.invoices WHERE id = $1 AND payload_hash = erp.stale_hash()`, victim[i])
		if want := int64(map[bool]int{true: 0, false: 1}[strings.Contains(q, "deleted_at")]); stale != want {
			t.Errorf("%s: %d rows marked stale, want %d", q, stale, want)
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
}

// TestTheNextSweepSetsARewriteRight: rows rewritten in the warehouse (the
// money zeroed with the hash left as it was, or with a hash of its own;
// labels, listed_by and deleted_at changed) while the ERP's pages stay as
// the last sweep recorded them (every page "known") are set right, all of
// them, by the next complete sweep; a digest forged afterwards does not
// hide them. The rows end as a fresh load of the same ERP has them.
func TestTheNextSweepSetsARewriteRight(t *testing.T) {
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
