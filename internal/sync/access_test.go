package sync_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	if _, err := h.pool.Exec(context.Background(), `INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash, first_seen_at, synced_at)
		VALUES ('second', 'x-41', '41', '1', 12.34, '{"id": "x-41"}', '\x00', now(), now())`); err != nil {
		t.Fatal(err)
	}
	return h, map[[2]string]decimal.Decimal{
		{"main", "41"}: h.sim.InvoiceTotal(), {"second", "42"}: second.InvoiceTotal(), {"other", "41"}: other.InvoiceTotal(),
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

// TestIsolationHolds is the isolation matrix, with real logins: a direct
// grant, a group member with a branch grant, two companies (as every
// pairing of their sources and companies, and not), a scoped login
// an administrator also made an analyst, a login that is only scoped and a
// login whose last grant was revoked (both see nothing), and a plain
// analyst (everything). Each is checked in a table, a view and an as-of
// answer, then again after SET ROLE to every role it can reach.
func TestIsolationHolds(t *testing.T) {
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

	for _, c := range []struct {
		name, role string
		sees       [][2]string
	}{
		{"direct grant", accountant, [][2]string{{"main", "41"}}},
		{"member of a group with a branch grant", member, [][2]string{{"second", "42"}}},
		{"one company-wide grant", single, [][2]string{{"second", "42"}}},
		{"two companies of two sources (not every pairing)", both, [][2]string{{"main", "41"}, {"second", "42"}}},
		{"one company of two sources (every pairing)", pairings, [][2]string{{"main", "41"}, {"other", "41"}}},
		{"scoped, and made an analyst by mistake", stray, [][2]string{{"other", "41"}}},
		{"scoped without a grant", nobody, nil},
		{"last grant revoked", revoked, nil},
		{"analyst", analyst, [][2]string{{"main", "41"}, {"second", "42"}, {"other", "41"}, {"second", "41"}}},
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
					if !got[k].Equal(want[k]) {
						t.Errorf("%s (%s, as %s) in %s: sum of %v = %s, want %s", c.name, c.role, as, from, k, got[k], want[k])
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

// TestScopedSideTables: what a scoped login reads beside the finance
// tables names only its own companies' records: rejected records, drift
// and the documents whose lines were read are withheld; the bookkeeping of
// runs, freshness, currencies and their rates show its sources only.
func TestScopedSideTables(t *testing.T) {
	t.Parallel()
	h, _ := accessWarehouse(t)
	ctx := context.Background()
	scoped := testdb.Role(t)
	h.grantCompany(scoped, grant{"second", "42", "7"})
	pool := testdb.PoolAs(t, h.url, scoped)
	for _, q := range []string{`SELECT * FROM erp.rejected_records`, `SELECT * FROM erp.schema_drift`,
		`SELECT * FROM erp.journal_line_documents`, `SELECT error FROM erp.sync_runs`, `SELECT * FROM erp.stream_failures`} {
		if _, err := pool.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s as a scoped login: %v, want permission denied", q, err)
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
}

// TestRuntimeRoleCannotRewriteGrantsOrDelete: the daemon's role writes
// rows, never the grants (a leaked daemon credential cannot widen anyone's
// view), and never deletes from the tables it only marks deleted.
func TestRuntimeRoleCannotRewriteGrantsOrDelete(t *testing.T) {
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
}

// TestCatalogIsScoped enumerates the catalog as a scoped login sees it:
// every relation and function of erp it can read answers only rows of its
// grants (or holds no company data), every view runs as its invoker, and
// no role it can reach bypasses row-level security. A stream added later
// is covered without anyone remembering; the checker is shown to catch a
// table without a policy and a view that runs as its owner.
func TestCatalogIsScoped(t *testing.T) {
	t.Parallel()
	h, _ := accessWarehouse(t)
	scoped := testdb.Role(t)
	g := grant{"second", "42", "7"}
	h.grantCompany(scoped, g)
	if problems := catalogProblems(t, h, scoped, g); len(problems) > 0 {
		t.Errorf("the catalog leaks to a scoped login:\n%s", strings.Join(problems, "\n"))
	}
	// A scoped login an administrator also made an analyst and a reader of
	// the sensitive tables: its grants still win, everywhere.
	stray := testdb.Role(t, "erpsync_analyst", "erpsync_sensitive")
	h.grantCompany(stray, g)
	if problems := catalogProblems(t, h, stray, g); len(problems) > 0 {
		t.Errorf("the catalog leaks to a scoped login that is also an analyst:\n%s", strings.Join(problems, "\n"))
	}

	ctx := context.Background()
	for _, c := range []struct{ name, ddl, want string }{
		{"a table without a policy", `CREATE TABLE erp.new_stream (source text, id text, company_id text, branch_id text);
			INSERT INTO erp.new_stream VALUES ('main', '1', '41', '1'); GRANT SELECT ON erp.new_stream TO erpsync_scoped`,
			"erp.new_stream: readable and not under row-level security"},
		{"a view that runs as its owner", `CREATE VIEW erp.new_view AS SELECT source, id, company_id, branch_id FROM erp.invoices;
			GRANT SELECT ON erp.new_view TO erpsync_scoped`, "erp.new_view: a view that does not run as its invoker"},
	} {
		if _, err := h.pool.Exec(ctx, c.ddl); err != nil {
			t.Fatal(err)
		}
		problems := strings.Join(catalogProblems(t, h, scoped, g), "\n")
		if !strings.Contains(problems, c.want) {
			t.Errorf("%s: the checker did not say %q; it said:\n%s", c.name, c.want, problems)
		}
		if !strings.Contains(problems, "shows rows of") {
			t.Errorf("%s: the checker did not find the rows it leaks; it said:\n%s", c.name, problems)
		}
		h.pool.Exec(ctx, `DROP VIEW IF EXISTS erp.new_view; DROP TABLE IF EXISTS erp.new_stream`)
	}
}

// sourceLevel are the relations read per source: a source's companies
// share them.
var sourceLevel = []string{"currencies", "currencies_history", "currencies_current", "currency_rates", "sync_checkpoints",
	"sync_runs", "stream_freshness"}

// catalogProblems lists what lets login (scoped to g) read outside g, or
// could: a readable table not under forced row-level security, a view
// not running as its invoker, a relation or function answering rows of
// other companies or sources (read as login, and after SET ROLE to each
// role it can reach), a function of unknown shape it may call, a role it
// can reach that bypasses row-level security.
func catalogProblems(t *testing.T, h *harness, login string, g grant) []string {
	t.Helper()
	ctx := context.Background()
	var problems []string
	type rel struct {
		name, kind                       string
		rls, forced, invoker, readable   bool
		hasSource, hasCompany, hasBranch bool
	}
	rows, err := h.pool.Query(ctx, `
SELECT c.relname, c.relkind::text, c.relrowsecurity, c.relforcerowsecurity,
       coalesce('security_invoker=true' = ANY (c.reloptions) OR 'security_invoker=on' = ANY (c.reloptions), false),
       has_table_privilege($1, c.oid, 'SELECT'),
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'source' AND NOT a.attisdropped),
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'company_id' AND NOT a.attisdropped),
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'branch_id' AND NOT a.attisdropped)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'erp' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1`, login)
	if err != nil {
		t.Fatal(err)
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		err := r.Scan(&x.name, &x.kind, &x.rls, &x.forced, &x.invoker, &x.readable, &x.hasSource, &x.hasCompany, &x.hasBranch)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	roles := append([]string{""}, reachableRoles(t, h.pool, login)...)
	for _, r := range roles[1:] {
		var super, bypass bool
		if err := h.pool.QueryRow(ctx, `SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1`, r).Scan(&super, &bypass); err != nil {
			t.Fatal(err)
		}
		if super || bypass {
			problems = append(problems, fmt.Sprintf("role %s, reachable by SET ROLE, bypasses row-level security", r))
		}
	}
	pool := testdb.PoolAs(t, h.url, login)
	for _, x := range rels {
		name := "erp." + x.name
		if x.kind == "v" && !x.invoker {
			problems = append(problems, name+": a view that does not run as its invoker")
		}
		if !x.readable {
			continue
		}
		if x.kind == "r" && !(x.rls && x.forced) && x.name != "company_grants" {
			problems = append(problems, name+": readable and not under row-level security")
		}
		cols := "source, NULL::text, NULL::text"
		switch {
		case x.name == "company_grants":
			continue
		case !x.hasSource:
			// Whose rows they are cannot be told: any row it shows is one
			// too many.
			cols = "NULL::text, NULL::text, NULL::text"
		case x.hasCompany && x.hasBranch && !slices.Contains(sourceLevel, x.name):
			cols = "source, company_id, branch_id"
		}
		problems = append(problems, leaks(t, pool, roles, "SELECT DISTINCT "+cols+" FROM "+name, name, g)...)
	}
	// Functions the login may call.
	rows, err = h.pool.Query(ctx, `
SELECT p.oid::regprocedure::text, p.proretset, coalesce(rt.relname, ''), pg_get_function_identity_arguments(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_class rt ON rt.reltype = p.prorettype
WHERE n.nspname = 'erp' AND p.prokind = 'f' AND has_function_privilege($1, p.oid, 'EXECUTE') ORDER BY 1`, login)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct {
		sig, returns, args string
		set                bool
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		err := r.Scan(&f.sig, &f.set, &f.returns, &f.args)
		return f, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Functions that answer no company's rows: the readers of JSON values,
	// and the session's own grants.
	noData := []string{"erp.typed_text(jsonb)", "erp.typed_date(jsonb)", "erp.typed_timestamp(jsonb)", "erp.typed_bool(jsonb)",
		"erp.session_grants()", "erp.session_reads_all()",
		"erp.session_sources(boolean)", "erp.session_companies()", "erp.session_companies_are_product()",
		"erp.session_only_source()", "erp.session_only_company()", "erp.stale_hash()"}
	for _, f := range fns {
		if slices.Contains(noData, f.sig) {
			continue
		}
		call, ok := map[string]string{"ts timestamp with time zone": "now()", "month date": "current_date - 40"}[f.args]
		if !f.set || f.returns == "" || !ok {
			problems = append(problems, f.sig+": callable, and erpsync cannot tell whose rows it answers")
			continue
		}
		name := strings.SplitN(f.sig, "(", 2)[0]
		problems = append(problems, leaks(t, pool, roles, "SELECT DISTINCT source, company_id, branch_id FROM "+name+"("+call+")", f.sig, g)...)
	}
	return problems
}

// leaks runs q (source, company, branch; the last two NULL for a relation
// read per source) as the pool's login and after SET ROLE to each of
// roles, and lists the rows outside g.
func leaks(t *testing.T, pool *pgxpool.Pool, roles []string, q, what string, g grant) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, r := range roles {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r != "" {
			if _, err := conn.Exec(ctx, `SET ROLE `+pgx.Identifier{r}.Sanitize()); err != nil {
				t.Fatalf("SET ROLE %s: %v", r, err)
			}
		}
		rows, err := conn.Query(ctx, q)
		var seen [][3]*string
		if err == nil {
			seen, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) ([3]*string, error) {
				var x [3]*string
				return x, row.Scan(&x[0], &x[1], &x[2])
			})
		}
		conn.Exec(ctx, `RESET ROLE`)
		conn.Release()
		if err != nil {
			if !strings.Contains(err.Error(), "permission denied") {
				out = append(out, fmt.Sprintf("%s as %q: %v", what, r, err))
			}
			continue
		}
		for _, s := range seen {
			ok := s[0] != nil && *s[0] == g.source
			if s[1] != nil {
				ok = ok && *s[1] == g.company && (g.branch == "" || s[2] != nil && *s[2] == g.branch)
			}
			if !ok {
				out = append(out, fmt.Sprintf("%s as %q shows rows of %s/%s/%s", what, r, str(s[0]), str(s[1]), str(s[2])))
			}
		}
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
