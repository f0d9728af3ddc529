package sync_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// grant is what erp.grant_company gives: a company of a source, or one
// branch of it.
type grant struct{ source, company, branch string }

// accessWarehouse is three installations in one warehouse, synced with
// changes (for the history tables): "main" and "other" both have a company
// 41, "second" has company 42 (branch 7).
func accessWarehouse(t *testing.T) (*harness, map[[2]string]decimal.Decimal) {
	h := newHarness(t, erpsim.Options{Invoices: 120, CompanyID: 41, Seed: 1})
	h.source = "main"
	second := erpsim.New(erpsim.Options{Invoices: 90, CompanyID: 42, BranchID: 7, Seed: 2})
	other := erpsim.New(erpsim.Options{Invoices: 60, CompanyID: 41, Seed: 3})
	streams := []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations", "journal_entries", "journal_lines", "balance_sheet"}
	for _, s := range streams {
		h.mustRun(s)
	}
	h.syncSource("second", second, streams...)
	h.syncSource("other", other, streams...)
	for _, sim := range []*erpsim.Sim{h.sim, second, other} {
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[0].TotalBC = inv[0].TotalBC.Add(decimal.New(5, 0))
			return inv
		})
	}
	h.mustRun("invoices")
	h.syncSource("second", second, "invoices")
	h.syncSource("other", other, "invoices")
	// "second" also has a company 41, with one invoice (a simulator serves
	// one company): a login granted main/41 and second/42 must not see it.
	// And its company 42 has a branch 8 beside branch 7, with one invoice:
	// a login granted branch 7 must not see it.
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash, first_seen_at, synced_at)
		VALUES ('second', 'x-41', '41', '1', 12.34, '{"id": "x-41"}', '\x00', now(), now()),
		       ('second', 'x-42-8', '42', '8', 56.78, '{"id": "x-42-8"}', '\x00', now(), now())`); err != nil {
		t.Fatal(err)
	}
	return h, map[[2]string]decimal.Decimal{
		{"main", "41"}: h.sim.InvoiceTotal(), {"second", "42"}: second.InvoiceTotal().Add(decimal.RequireFromString("56.78")), {"other", "41"}: other.InvoiceTotal(),
		{"second", "41"}: decimal.RequireFromString("12.34"),
	}
}

func (h *harness) grantCompany(role string, g grant) {
	h.t.Helper()
	args, sql := []any{role, g.source, g.company}, `SELECT erp.grant_company($1::text::regrole, $2, $3)`
	if g.branch != "" {
		args, sql = append(args, g.branch), `SELECT erp.grant_company($1::text::regrole, $2, $3, $4)`
	}
	if _, err := h.pool.Exec(context.Background(), sql, args...); err != nil {
		h.t.Fatalf("grant_company(%s, %v): %v", role, g, err)
	}
}

// TestAccessRules documents the access rules as logins meet them: a scoped
// login reads its own companies' rows only, wherever it reads, and the
// daemon's role cannot widen anyone's view.
func TestAccessRules(t *testing.T) {
	t.Parallel()

	t.Run("HoldTheIsolationMatrix", func(t *testing.T) {
		// The isolation matrix, with real logins: a direct grant, a group member
		// with a branch grant, two companies (as every pairing of their sources
		// and companies, and not), a scoped login an administrator also made an
		// analyst, a login that is only scoped and a login whose last grant was
		// revoked (both see nothing), and a plain analyst (everything). Each is
		// checked in a table, a view and an as-of answer, then again after SET
		// ROLE to every role it can reach.
		t.Parallel()
		h, want := accessWarehouse(t)
		ctx := context.Background()

		accountant := testdb.Role(t)
		h.grantCompany(accountant, grant{"main", "41", ""})
		group := testdb.Role(t)
		h.grantCompany(group, grant{"second", "42", "7"})
		member := testdb.Role(t, group)
		both := testdb.Role(t)
		h.grantCompany(both, grant{"main", "41", ""})
		h.grantCompany(both, grant{"second", "42", ""})
		// One company-wide grant is tested with plain comparisons, not the
		// arrays: its source holds another company.
		single := testdb.Role(t)
		h.grantCompany(single, grant{"second", "42", ""})
		pairings := testdb.Role(t)
		h.grantCompany(pairings, grant{"main", "41", ""})
		h.grantCompany(pairings, grant{"other", "41", ""})
		stray := testdb.Role(t)
		h.grantCompany(stray, grant{"other", "41", ""})
		if _, err := h.pool.Exec(ctx, `GRANT erpsync_analyst TO `+stray); err != nil {
			t.Fatal(err)
		}
		nobody := testdb.Role(t, "erpsync_scoped")
		revoked := testdb.Role(t)
		h.grantCompany(revoked, grant{"main", "41", ""})
		if _, err := h.pool.Exec(ctx, `SELECT erp.revoke_company($1::text::regrole, 'main', '41')`, revoked); err != nil {
			t.Fatal(err)
		}
		analyst := testdb.Role(t, "erpsync_analyst")
		// The branch grant sees branch 7 of second/42, not its branch 8.
		branch7 := map[[2]string]decimal.Decimal{{"second", "42"}: want[[2]string{"second", "42"}].Sub(decimal.RequireFromString("56.78"))}

		for _, c := range []struct {
			name, role string
			sees       [][2]string
			sums       map[[2]string]decimal.Decimal // where the sums differ from want
		}{
			{"direct grant", accountant, [][2]string{{"main", "41"}}, nil},
			{"member of a group with a branch grant", member, [][2]string{{"second", "42"}}, branch7},
			{"one company-wide grant", single, [][2]string{{"second", "42"}}, nil},
			{"two companies of two sources (not every pairing)", both, [][2]string{{"main", "41"}, {"second", "42"}}, nil},
			{"one company of two sources (every pairing)", pairings, [][2]string{{"main", "41"}, {"other", "41"}}, nil},
			{"scoped, and made an analyst by mistake", stray, [][2]string{{"other", "41"}}, nil},
			{"scoped without a grant", nobody, nil, nil},
			{"last grant revoked", revoked, nil, nil},
			{"analyst", analyst, [][2]string{{"main", "41"}, {"second", "42"}, {"other", "41"}, {"second", "41"}}, nil},
		} {
			pool := testdb.PoolAs(t, h.url, c.role)
			check := func(as string) {
				t.Helper()
				for _, from := range []string{"erp.invoices", "erp.invoices_current", "erp.invoices_as_of(now())", "erp.invoices_history"} {
					got := invoiceSumsAs(t, pool, as, from)
					if from == "erp.invoices_history" {
						// Versions of its companies only (second/41 has none).
						for k := range got {
							if !slices.Contains(c.sees, k) {
								t.Errorf("%s (%s, as %s): history of %v, want only of %v", c.name, c.role, as, k, c.sees)
							}
						}
						if (len(got) == 0) != (len(c.sees) == 0) {
							t.Errorf("%s (%s, as %s): history of %v, want some of %v", c.name, c.role, as, got, c.sees)
						}
						continue
					}
					if len(got) != len(c.sees) {
						t.Errorf("%s (%s, as %s) in %s sees %v, want exactly %v", c.name, c.role, as, from, got, c.sees)
					}
					for _, k := range c.sees {
						w, ok := c.sums[k]
						if !ok {
							w = want[k]
						}
						if !got[k].Equal(w) {
							t.Errorf("%s (%s, as %s) in %s: sum of %v = %s, want %s", c.name, c.role, as, from, k, got[k], w)
						}
					}
				}
			}
			check("")
			// No role it can reach widens its view.
			for _, r := range reachableRoles(t, h.pool, c.role) {
				check(r)
			}
			if _, err := pool.Exec(ctx, `DELETE FROM erp.company_grants`); err == nil {
				t.Errorf("%s removed grants", c.name)
			}
		}
	})

	t.Run("ScopeTheSideTables", func(t *testing.T) {
		// What a scoped login reads beside the finance tables names only its own
		// companies' records. Rejected records, drift and the documents whose
		// lines were read are refused (permission denied); a scoped login an
		// administrator also made an analyst reads them and gets no row. The
		// bookkeeping of runs and freshness are its login's, currencies and
		// their rates its sources'.
		t.Parallel()
		h, _ := accessWarehouse(t)
		ctx := context.Background()
		if _, err := h.pool.Exec(ctx, `INSERT INTO erp.rejected_records (source, stream, reason, record, record_hash)
		VALUES ('second', 'invoices', 'no id', '{}', '\x01')`); err != nil {
			t.Fatal(err)
		}
		scoped := testdb.Role(t)
		h.grantCompany(scoped, grant{"second", "42", "7"})
		pool := testdb.PoolAs(t, h.url, scoped)
		for _, q := range []string{`SELECT * FROM erp.rejected_records`, `SELECT * FROM erp.schema_drift`,
			`SELECT * FROM erp.journal_line_documents`, `SELECT error FROM erp.sync_runs`, `SELECT * FROM erp.stream_failures`} {
			if _, err := pool.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as a scoped login: %v, want permission denied", q, err)
			}
		}
		stray := testdb.Role(t, "erpsync_analyst")
		h.grantCompany(stray, grant{"second", "42", "7"})
		for _, c := range []struct {
			login string
			want  int64
		}{{stray, 0}, {testdb.Role(t, "erpsync_analyst"), 1}} {
			var n int64
			if err := testdb.PoolAs(t, h.url, c.login).QueryRow(ctx, `SELECT count(*) FROM erp.rejected_records`).Scan(&n); err != nil || n != c.want {
				t.Errorf("rejected records as %s: %d (%v), want %d", c.login, n, err, c.want)
			}
		}
		for _, rel := range []string{"erp.sync_checkpoints", "erp.sync_runs", "erp.stream_freshness", "erp.currencies", "erp.currencies_current",
			"erp.currency_rates"} {
			var sources []string
			rows, err := pool.Query(ctx, `SELECT DISTINCT source FROM `+rel+` ORDER BY 1`)
			if err == nil {
				sources, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil || !slices.Equal(sources, []string{"second"}) {
				t.Errorf("%s as a scoped login: sources %v (%v), want [second]", rel, sources, err)
			}
		}
	})

	t.Run("LeaveTheRuntimeRoleNoGrantToRewriteAndNothingToDelete", func(t *testing.T) {
		// The daemon's role writes rows, never the grants (a leaked daemon
		// credential cannot widen anyone's view), and never deletes from the
		// tables it only marks deleted.
		t.Parallel()
		h, _ := accessWarehouse(t)
		ctx := context.Background()
		runtime := testdb.PoolAs(t, h.url, testdb.Role(t, "erpsync_runtime"))
		for _, q := range []string{
			`INSERT INTO erp.company_grants (role, source, company_id) VALUES ('erpsync_runtime', 'main', '41')`,
			`UPDATE erp.company_grants SET company_id = '42'`, `DELETE FROM erp.company_grants`,
			`DELETE FROM erp.invoices`, `DELETE FROM erp.invoices_history`, `DELETE FROM erp.currencies`, `DELETE FROM erp.cashbox_access`,
			`TRUNCATE erp.invoices`, `UPDATE erp.invoices_history SET total_bc = 0`,
		} {
			if _, err := runtime.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "denied") {
				t.Errorf("%s as the runtime role: %v, want it refused", q, err)
			}
		}
		// What it does rewrite.
		for _, q := range []string{`DELETE FROM erp.journal_lines WHERE false`, `DELETE FROM erp.balance_sheet_snapshots WHERE false`,
			`DELETE FROM erp.sync_runs WHERE false`, `DELETE FROM erp.sweep_seen WHERE false`} {
			if _, err := runtime.Exec(ctx, q); err != nil {
				t.Errorf("%s as the runtime role: %v", q, err)
			}
		}
	})

	t.Run("RefuseAGrantOfWhatNoRowCarries", func(t *testing.T) {
		// A misspelt source, company or branch would scope a login to nothing,
		// silently; erp.grant_company refuses it, naming what no row carries and
		// the values the logins know, unless the grant is made ahead of the
		// first sync that brings the rows.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 20, CompanyID: 41, BranchID: 7})
		h.mustRun("invoices")
		ctx := context.Background()
		role := testdb.Role(t)
		for _, c := range []struct {
			args string
			want []string
		}{
			{`'tset', '41'`, []string{`no row of the warehouse has source 'tset'`, "sources: test"}},
			{`'test', '4l'`, []string{`no row of source test has company '4l'`, "companies there: 41"}},
			{`'test', '41', '8'`, []string{`no row of company 41 of source test has branch '8'`, "branches there: 7"}},
		} {
			_, err := h.pool.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, `+c.args+`)`, role)
			if err == nil {
				t.Errorf("grant_company(%s) was accepted", c.args)
				continue
			}
			for _, w := range append(c.want, "ahead => true") {
				if !strings.Contains(err.Error()+" "+hintOf(err), w) {
					t.Errorf("grant_company(%s): %v (hint %q), want it to say %q", c.args, err, hintOf(err), w)
				}
			}
		}
		if n := h.count(`SELECT count(*) FROM erp.company_grants`); n != 0 {
			t.Errorf("%d grants written by refused calls", n)
		}
		for _, args := range []string{`'test', '41', '7'`, `'test', '41'`, `'next', '42', ahead => true`} {
			if _, err := h.pool.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, `+args+`)`, role); err != nil {
				t.Errorf("grant_company(%s): %v", args, err)
			}
		}
		if n := h.count(`SELECT count(*) FROM erp.company_grants`); n != 3 {
			t.Errorf("%d grants, want 3", n)
		}
	})
}

// reachableRoles are the roles a login can SET ROLE to: those it is a
// member of, through any chain of memberships.
func reachableRoles(t *testing.T, pool *pgxpool.Pool, login string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT rolname FROM pg_roles
		WHERE pg_has_role($1, oid, 'MEMBER') AND rolname <> $1 ORDER BY 1`, login)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// invoiceSumsAs is invoiceSums after SET ROLE as (on one connection).
func invoiceSumsAs(t *testing.T, pool *pgxpool.Pool, as, from string) map[[2]string]decimal.Decimal {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if as != "" {
		if _, err := conn.Exec(ctx, `SET ROLE `+pgx.Identifier{as}.Sanitize()); err != nil {
			t.Fatalf("SET ROLE %s: %v", as, err)
		}
		defer conn.Exec(ctx, `RESET ROLE`)
	}
	rows, err := conn.Query(ctx, `SELECT source, company_id, sum(total_bc)::text FROM `+from+` GROUP BY 1, 2`)
	if err != nil {
		t.Fatalf("%s as %s: %v", from, as, err)
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
		t.Fatalf("%s as %s: %v", from, as, err)
	}
	return out
}

func str(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// syncSource syncs the streams of sim, one installation more, into the
// harness's warehouse under the given source name.
func (h *harness) syncSource(source string, sim *erpsim.Sim, streams ...string) {
	h.t.Helper()
	srv := httptest.NewServer(sim)
	defer srv.Close()
	client := h.newClient(erp.Options{BaseURL: srv.URL})
	for _, name := range streams {
		s, _ := catalog.Lookup(name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res := h.runner.Run(ctx, nil, sync.Target{Source: source, Logins: []sync.Login{{Name: "erpsync", Client: client}},
			PageSize: h.pages, Prefixes: h.prefixes}, s, nil)[0]
		cancel()
		if res.Status != model.StatusSucceeded {
			h.t.Fatalf("%s/%s: %s: %v", source, name, res.Status, res.Err)
		}
	}
}

// hintOf is the HINT of a Postgres error, if it has one.
func hintOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Hint
	}
	return ""
}
