package sync_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// syncSource syncs streams of another simulated installation into the
// harness's warehouse under the given source name.
func (h *harness) syncSource(source string, sim *erpsim.Sim, streams ...string) {
	h.t.Helper()
	srv := httptest.NewServer(sim)
	defer srv.Close()
	client := h.newClient(erp.Options{BaseURL: srv.URL})
	for _, name := range streams {
		s, _ := catalog.Lookup(name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res := h.runner.Run(ctx, nil, sync.Target{Source: source, Logins: []sync.Login{{Name: "erpsync", Client: client}}, PageSize: h.pages, Prefixes: h.prefixes}, s, nil)[0]
		cancel()
		if res.Status != model.StatusSucceeded {
			h.t.Fatalf("%s/%s: %s: %v", source, name, res.Status, res.Err)
		}
	}
}

// invoiceSums is, as the pool's role sees them, the exact sum of
// total_bc per source and company.
func invoiceSums(t *testing.T, pool *pgxpool.Pool, from string) map[[2]string]decimal.Decimal {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT source, company_id, sum(total_bc)::text FROM `+from+` GROUP BY 1, 2`)
	if err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	defer rows.Close()
	out := map[[2]string]decimal.Decimal{}
	for rows.Next() {
		var source, company string
		var sum decimal.Decimal
		if err := rows.Scan(&source, &company, &sum); err != nil {
			t.Fatal(err)
		}
		out[[2]string{source, company}] = sum
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	return out
}

// Three installations in one warehouse: "main" and "other" both have a
// company 41, "second" has company 42 (branch 7). Roles granted companies
// see exactly their rows, in tables, views, history and as-of answers;
// an analyst without a grant sees everything, as before.
func TestCompanyGrantsScopeEveryRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 120, CompanyID: 41, Seed: 1})
	h.source = "main"
	h.mustRun("invoices")
	h.mustRun("currencies")
	second := erpsim.New(erpsim.Options{Invoices: 90, CompanyID: 42, BranchID: 7, Seed: 2})
	other := erpsim.New(erpsim.Options{Invoices: 60, CompanyID: 41, Seed: 3})
	h.syncSource("second", second, "invoices", "currencies")
	h.syncSource("other", other, "invoices", "currencies")
	// A change in each installation, for the history tables.
	for _, sim := range []*erpsim.Sim{h.sim, second, other} {
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[0].TotalBC = inv[0].TotalBC.Add(decimal.New(5, 0))
			return inv
		})
	}
	h.mustRun("invoices")
	h.syncSource("second", second, "invoices")
	h.syncSource("other", other, "invoices")

	want := map[[2]string]decimal.Decimal{
		{"main", "41"}: h.sim.InvoiceTotal(), {"second", "42"}: second.InvoiceTotal(), {"other", "41"}: other.InvoiceTotal(),
	}
	ctx := context.Background()
	grant := func(role, source, company string, branch ...string) {
		t.Helper()
		args := []any{role, source, company}
		sql := `SELECT erp.grant_company($1::text::regrole, $2, $3)`
		if len(branch) > 0 {
			args, sql = append(args, branch[0]), `SELECT erp.grant_company($1::text::regrole, $2, $3, $4)`
		}
		if _, err := h.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("grant_company(%s, %s, %s): %v", role, source, company, err)
		}
	}

	// A role that is not an analyst yet: granting the company makes it one.
	accountantA := testdb.Role(t)
	grant(accountantA, "main", "41")
	// A group role scoped by branch, and a login that is only its member.
	groupB := testdb.Role(t)
	grant(groupB, "second", "42", "7")
	memberB := testdb.Role(t, groupB)
	// Two companies of two installations.
	both := testdb.Role(t)
	grant(both, "main", "41")
	grant(both, "second", "42")
	analyst := testdb.Role(t, "erpsync_analyst")

	cases := []struct {
		role string
		sees [][2]string
	}{
		{accountantA, [][2]string{{"main", "41"}}},
		{memberB, [][2]string{{"second", "42"}}},
		{both, [][2]string{{"main", "41"}, {"second", "42"}}},
		{analyst, [][2]string{{"main", "41"}, {"second", "42"}, {"other", "41"}}},
	}
	for _, c := range cases {
		pool := testdb.PoolAs(t, h.url, c.role)
		for _, from := range []string{"erp.invoices", "erp.invoices_current", "erp.invoices_as_of(now())"} {
			got := invoiceSums(t, pool, from)
			if len(got) != len(c.sees) {
				t.Errorf("%s in %s sees %v, want exactly %v", c.role, from, got, c.sees)
			}
			for _, k := range c.sees {
				if !got[k].Equal(want[k]) {
					t.Errorf("%s in %s: sum(total_bc) of %v = %s, want %s", c.role, from, k, got[k], want[k])
				}
			}
		}
		var histSources, rateSources int64
		err := pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT source) FROM erp.invoices_history),
			(SELECT count(DISTINCT source) FROM erp.currency_rates)`).Scan(&histSources, &rateSources)
		if err != nil {
			t.Fatalf("%s: %v", c.role, err)
		}
		if histSources != int64(len(c.sees)) || rateSources != int64(len(c.sees)) {
			t.Errorf("%s sees history of %d sources and rates of %d, want %d", c.role, histSources, rateSources, len(c.sees))
		}
		if _, err := pool.Exec(ctx, `DELETE FROM erp.company_grants`); err == nil {
			t.Errorf("%s removed grants", c.role)
		}
	}

	// Revoking the last grant gives the role back its analyst's reach.
	if _, err := h.pool.Exec(ctx, `SELECT erp.revoke_company($1::text::regrole, 'main', '41')`, accountantA); err != nil {
		t.Fatal(err)
	}
	if got := invoiceSums(t, testdb.PoolAs(t, h.url, accountantA), "erp.invoices"); len(got) != 3 {
		t.Errorf("after revoke_company the role sees %v, want all three", got)
	}
}
