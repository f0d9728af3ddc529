package db_test

import (
	"context"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/testdb"
)

// TestRoles documents the roles analysts are given: erpsync_analyst for
// the finance tables and views, erpsync_sensitive for what holds people's
// words and raw records.
func TestRoles(t *testing.T) {
	pool, _ := testdb.Pool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, number, payload, payload_hash)
		VALUES ('s', '1', '1', '1', 10.50, 'INV-1', '{"id":1,"number":"INV-1"}', '\x00')`); err != nil {
		t.Fatal(err)
	}
	as := func(t *testing.T, role string) {
		t.Helper()
		if _, err := conn.Exec(ctx, `SET ROLE `+role); err != nil {
			t.Fatal(err)
		}
	}
	can := func(t *testing.T, role, query string, want bool) {
		t.Helper()
		_, err := conn.Exec(ctx, query)
		if got := err == nil; got != want {
			t.Errorf("%s: %s: allowed = %v, want %v (%v)", role, query, got, want, err)
		}
		if err != nil && !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s: %s: %v, want permission denied", role, query, err)
		}
	}
	defer conn.Exec(ctx, `RESET ROLE`)

	// People's messages, raw rejected records and error texts are not for
	// it.
	t.Run("AnalystReadsTheFinanceTablesAndViewsAndWritesNothing", func(t *testing.T) {
		as(t, "erpsync_analyst")
		for _, rel := range []string{"invoices_current", "currencies_current", "cashboxes_current", "cashbox_reconciliations_current",
			"stream_freshness", "invoices", "currencies", "currency_rates", "cashboxes", "cashbox_reconciliations",
			"journal_entries", "payment_vouchers", "receipt_vouchers", "journal_lines", "balance_sheet_snapshots", "sync_checkpoints"} {
			can(t, "analyst", `SELECT * FROM erp.`+rel+` LIMIT 1`, true)
		}
		can(t, "analyst", `SELECT id, stream, status, rows_rejected FROM erp.sync_runs LIMIT 1`, true)
		can(t, "analyst", `SELECT stream, record_id, reason, count FROM erp.rejected_records LIMIT 1`, true)
		for _, q := range []string{`SELECT error FROM erp.sync_runs`, `SELECT note FROM erp.sync_runs`, `SELECT record FROM erp.rejected_records`,
			`SELECT * FROM erp.stream_failures`, `SELECT * FROM erp.messaging_messages`, `SELECT * FROM erp.messaging_conversations`,
			`SELECT example FROM erp.schema_drift`, `SELECT * FROM erp.cashbox_access`} {
			can(t, "analyst", q, false)
		}
		var number string
		if err := conn.QueryRow(ctx, `SELECT number FROM erp.invoices_current WHERE id = '1'`).Scan(&number); err != nil || number != "INV-1" {
			t.Errorf("invoices_current number = %q, %v", number, err)
		}
		can(t, "analyst", `UPDATE erp.invoices SET total_bc = 0`, false)
	})

	t.Run("SensitiveReadsMessagesRawRecordsAndErrorsAndWritesNothing", func(t *testing.T) {
		as(t, "erpsync_sensitive")
		for _, q := range []string{`SELECT error, note FROM erp.sync_runs`, `SELECT record FROM erp.rejected_records`,
			`SELECT * FROM erp.stream_failures`, `SELECT * FROM erp.messaging_messages`, `SELECT * FROM erp.invoices_current`} {
			can(t, "sensitive", q, true)
		}
		can(t, "sensitive", `DELETE FROM erp.invoices`, false)
	})
}
