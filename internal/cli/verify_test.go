package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

type verifyLine struct {
	Source        string   `json:"source"`
	Stream        string   `json:"stream"`
	Problem       string   `json:"problem"`
	Skipped       string   `json:"skipped"`
	ERPRows       int64    `json:"erp_rows"`
	WarehouseRows int64    `json:"warehouse_rows"`
	Missing       int64    `json:"missing"`
	Extra         int64    `json:"extra"`
	Different     int64    `json:"different"`
	MissingIDs    []string `json:"missing_ids"`
	ExtraIDs      []string `json:"extra_ids"`
	DifferentIDs  []string `json:"different_ids"`
	Sums          []struct {
		CompanyID string          `json:"company_id"`
		Month     string          `json:"month"`
		Column    string          `json:"column"`
		ERP       decimal.Decimal `json:"erp"`
		Warehouse decimal.Decimal `json:"warehouse"`
		Agree     bool            `json:"agree"`
	} `json:"sums"`
}

func verifyJSON(t *testing.T, env []string, wantCode int, args ...string) map[string]verifyLine {
	t.Helper()
	r := runMain(t, env, append([]string{"verify", "--json"}, args...)...)
	if r.code != wantCode {
		t.Fatalf("verify: exit %d, want %d\n%s", r.code, wantCode, r)
	}
	var lines []verifyLine
	if err := json.Unmarshal([]byte(r.stdout), &lines); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, r)
	}
	out := map[string]verifyLine{}
	for _, l := range lines {
		out[l.Stream] = l
	}
	return out
}

// warehouseDigest is a digest of every row of the entity tables and the
// bookkeeping, to show that verify wrote nothing.
func warehouseDigest(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var d string
	err := conn.QueryRow(context.Background(), `SELECT md5(string_agg(x, ',' ORDER BY x)) FROM (
		SELECT t::text AS x FROM erp.invoices t UNION ALL SELECT t::text FROM erp.cashboxes t
		UNION ALL SELECT t::text FROM erp.sync_runs t UNION ALL SELECT t::text FROM erp.sync_checkpoints t) all_rows`).Scan(&d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestVerify documents `erpsync verify`: the ERP read again through every
// login and compared with the warehouse, writing to neither.
func TestVerify(t *testing.T) {
	t.Parallel()
	sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 260, PageSizeCap: 50})
	dbURL := testdb.New(t)
	env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50",
		"ERPSYNC_STREAMS=invoices,currencies,cashboxes,cashbox_reconciliations,balance_sheet")
	if r := runMain(t, env, "sync"); r.code != exitOK {
		t.Fatalf("sync: %s", r)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	t.Run("AgreesAfterASyncAndWritesNothing", func(t *testing.T) {
		before := warehouseDigest(t, conn)
		got := verifyJSON(t, env, exitOK)
		inv := got["invoices"]
		if inv.ERPRows != 260 || inv.WarehouseRows != 260 || inv.Missing+inv.Extra+inv.Different != 0 || len(inv.Sums) == 0 {
			t.Errorf("invoices after a sync: %+v", inv)
		}
		total := decimal.Zero
		for _, s := range inv.Sums {
			if !s.Agree || s.Column != "total_bc" || s.CompanyID != "1" || len(s.Month) != 7 {
				t.Errorf("sum after a sync: %+v", s)
			}
			total = total.Add(s.ERP)
		}
		if !total.Equal(sim.InvoiceTotal()) {
			t.Errorf("the monthly sums add up to %s, the ERP's total is %s", total, sim.InvoiceTotal())
		}
		if bs := got["balance_sheet"]; bs.Skipped == "" || bs.Problem != "" {
			t.Errorf("balance_sheet: %+v, want skipped", bs)
		}
		if after := warehouseDigest(t, conn); after != before {
			t.Error("verify changed the warehouse")
		}
	})

	// Every kind of difference is found, named by id and in the money
	// sums (exit 1), and the metrics file says how many rows differ.
	t.Run("FindsEveryKindOfDifferenceByIDAndInTheSums", func(t *testing.T) {

		// Behind erpsync's back: a row removed, one marked deleted, a stranger
		// added, a payload edited, a typed column edited.
		ids := sim.Invoices()
		id := func(i int) string { return decimal.NewFromInt(ids[i].ID).String() }
		for _, sql := range []string{
			`DELETE FROM erp.invoices WHERE id = '` + id(1) + `'`,
			`UPDATE erp.invoices SET deleted_at = now() WHERE id = '` + id(2) + `'`,
			`INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash)
		 SELECT source, 'ghost', company_id, branch_id, 1, '{"id": "ghost"}', '\x00' FROM erp.invoices LIMIT 1`,
			`UPDATE erp.invoices SET payload = jsonb_set(payload, '{status}', '"void"') WHERE id = '` + id(3) + `'`,
			`UPDATE erp.invoices SET total_bc = total_bc + 0.01 WHERE id = '` + id(4) + `'`,
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		metricsFile := filepath.Join(t.TempDir(), "erpsync_verify.prom")
		got := verifyJSON(t, env, exitFailed, "invoices", "cashboxes", "--metrics-file", metricsFile)
		inv := got["invoices"]
		if inv.Missing != 2 || !slices.Equal(inv.MissingIDs, sortedC(id(1), id(2))) {
			t.Errorf("missing: %d %v, want %s and %s", inv.Missing, inv.MissingIDs, id(1), id(2))
		}
		if inv.Extra != 1 || !slices.Equal(inv.ExtraIDs, []string{"ghost"}) {
			t.Errorf("extra: %d %v, want ghost", inv.Extra, inv.ExtraIDs)
		}
		if inv.Different != 2 || !slices.Equal(inv.DifferentIDs, sortedC(id(3), id(4))) {
			t.Errorf("different: %d %v, want %s and %s", inv.Different, inv.DifferentIDs, id(3), id(4))
		}
		// The sums of the months of the changed rows differ by exactly what
		// was changed.
		diff := decimal.Zero
		for _, s := range inv.Sums {
			diff = diff.Add(s.Warehouse.Sub(s.ERP))
		}
		want := decimal.New(1, 0).Sub(ids[1].TotalBC).Sub(ids[2].TotalBC).Add(decimal.New(1, -2))
		if !diff.Equal(want) {
			t.Errorf("the sums differ by %s in all, want %s", diff, want)
		}
		if cb := got["cashboxes"]; cb.Missing+cb.Extra+cb.Different != 0 || cb.Problem != "" {
			t.Errorf("cashboxes, untouched: %+v", cb)
		}
		prom, err := os.ReadFile(metricsFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{
			`erpsync_verify_mismatched_rows{source="default",stream="invoices"} 5`,
			`erpsync_verify_mismatched_rows{source="default",stream="cashboxes"} 0`,
		} {
			if !strings.Contains(string(prom), line) {
				t.Errorf("metrics file lacks %q:\n%s", line, prom)
			}
		}

		// The table names what differs.
		r := runMain(t, env, "verify", "invoices")
		for _, want := range []string{"DIFFER", "2 missing from the warehouse", "1 live in the warehouse, no longer listed: ghost", "2 different", "sum of total_bc"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("verify's table lacks %q:\n%s", want, r)
			}
		}
	})
}

// sortedC sorts ids as Postgres's C collation does.
func sortedC(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
