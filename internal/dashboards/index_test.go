package dashboards

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/testdb"
)

// The revenue panel's date filter reaches the index invoices_source_date for a login scoped to
// a company: row-level security only pushes leakproof operators below its policy, and the
// panel's filters (invoice_date BETWEEN, source IN, status NOT IN) are. With sequential scans
// off, a filter that did not reach the index would show as a Filter over a whole index or
// table instead of an Index Cond.
func TestRevenuePanelUsesDateIndexWhenScoped(t *testing.T) {
	d := loadDashboard(t, warehouseJSON)
	dbURL, _, now := syncedWarehouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The grant is the schema owner's to give (the migrating login here).
	owner, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	scoped := testdb.Role(t)
	if _, err := owner.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, $2, '1')`, scoped, source); err != nil {
		t.Fatalf("grant_company: %v", err)
	}
	pool := testdb.PoolAs(t, dbURL, scoped)

	p, ok := d.Panel("Revenue per month and currency")
	if !ok || len(p.Targets) != 1 {
		t.Fatalf("no revenue panel with one query in %s", warehouseJSON)
	}
	p.TimeFrom = "30d" // the panel's relative time, as an analyst would set it
	r, err := d.PanelRange(p, now)
	if err != nil {
		t.Fatal(err)
	}
	sql, err := Expand(p.Targets[0].RawSQL, map[string][]string{"source": {source}}, r)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := countRows(ctx, pool, sql); err != nil || n == 0 {
		t.Fatalf("the revenue panel as the scoped login: %d rows, %v (want the company's invoices)\n%s", n, err, sql)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+sql).Scan(&plan); err != nil {
		t.Fatalf("EXPLAIN as the scoped login: %v", err)
	}
	scans, err := IndexScans(plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scans {
		if s.Index == "invoices_source_date" && strings.Contains(s.Cond, "invoice_date") {
			t.Logf("%s using %s, Index Cond: %s", s.Node, s.Index, s.Cond)
			return
		}
	}
	var pretty strings.Builder
	var v any
	if json.Unmarshal(plan, &v) == nil {
		b, _ := json.MarshalIndent(v, "", "  ")
		pretty.Write(b)
	}
	t.Errorf("as a scoped login, the revenue panel's plan has no scan of invoices_source_date with an Index Cond on invoice_date (index scans: %+v)\n%s\n%s",
		scans, sql, pretty.String())
}
