package db_test

import (
	"context"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/testdb"
)

// The analyst role reads every table and view of erp and writes nothing.
func TestAnalystRoleIsReadOnly(t *testing.T) {
	pool, _ := testdb.Pool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash)
		VALUES ('s', '1', '1', '1', 10.50, '{"id":1,"number":"INV-1"}', '\x00')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET ROLE erpsync_analyst`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET ROLE`)
	for _, view := range []string{"invoices_current", "currencies_current", "cashboxes_current",
		"cashbox_reconciliations_current", "stream_freshness", "invoices", "sync_runs", "rejected_records"} {
		if _, err := conn.Exec(ctx, `SELECT * FROM erp.`+view+` LIMIT 1`); err != nil {
			t.Errorf("analyst cannot read erp.%s: %v", view, err)
		}
	}
	var number string
	if err := conn.QueryRow(ctx, `SELECT number FROM erp.invoices_current WHERE id = '1'`).Scan(&number); err != nil || number != "INV-1" {
		t.Errorf("invoices_current number = %q, %v", number, err)
	}
	_, err = conn.Exec(ctx, `UPDATE erp.invoices SET total_bc = 0`)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("analyst update: %v, want permission denied", err)
	}
}
