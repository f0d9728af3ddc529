package sync_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// declaredAccess is every table's rule as the code declares it: each
// stream's table (Info.Access) and the engine's side tables.
func declaredAccess() declarations {
	out := declarations{}
	for name, a := range sync.SideTables {
		out[name] = a
	}
	for _, name := range catalog.Names() {
		s, _ := catalog.Lookup(name)
		info := s.Declared()
		out[strings.TrimPrefix(info.TableName(), "erp.")] = info.Access
	}
	return out
}

// declarations are the declared rules by table.
type declarations map[string]sync.Access

// of is the rule of a table of erp: its own, or for a history its
// table's.
func (d declarations) of(table string) (sync.Access, bool) {
	if a, ok := d[table]; ok {
		return a, true
	}
	base, ok := strings.CutSuffix(table, "_history")
	if !ok {
		return 0, false
	}
	if a, ok := d[base]; ok {
		return a, true
	}
	// The one history named after its table in the singular (it
	// predates the rule).
	a, ok := d[base+"s"]
	return a, ok
}

// TestSchema documents the erp schema as Postgres holds it, under its
// access rules: every table, view and function, every role a login can
// reach. A stream added later is covered without anyone remembering it, and
// a rule weakened anywhere shows.
func TestSchema(t *testing.T) {
	t.Parallel()

	t.Run("HoldsEveryTableUnderItsDeclaredRule", func(t *testing.T) {
		// The rule of every table of erp (the name of its policy) is the code's
		// declaration: a table with no declaration, or a policy that says
		// another rule, fails. Every table is under forced row-level security
		// with exactly one rule; the grants have their own policies.
		t.Parallel()
		pool, _ := testdb.Pool(t)
		declared := declaredAccess()
		rows, err := pool.Query(context.Background(), `
SELECT c.relname, c.relrowsecurity AND c.relforcerowsecurity,
       coalesce(array_agg(p.polname::text ORDER BY p.polname) FILTER (WHERE p.polname LIKE 'reads%'), '{}')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_policy p ON p.polrelid = c.oid
WHERE n.nspname = 'erp' AND c.relkind IN ('r', 'p') AND c.relname <> 'company_grants'
GROUP BY 1, 2 ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		type table struct {
			name   string
			forced bool
			reads  []string
		}
		tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
			var x table
			return x, r.Scan(&x.name, &x.forced, &x.reads)
		})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, x := range tables {
			seen[x.name] = true
			want, ok := declared.of(x.name)
			switch {
			case !ok:
				t.Errorf("erp.%s has no declared rule (sync.Info.Access of its stream, or sync.SideTables)", x.name)
			case !x.forced:
				t.Errorf("erp.%s is not under forced row-level security", x.name)
			case !slices.Equal(x.reads, []string{want.Policy()}):
				t.Errorf("erp.%s reads through %v; its declared rule is %s", x.name, x.reads, want.Policy())
			}
		}
		for name := range declared {
			if !seen[name] {
				t.Errorf("%s is declared but erp has no such table", name)
			}
		}
	})

	t.Run("ShowsAScopedLoginOnlyWhatItsRulesGive", func(t *testing.T) {
		// The catalog as scoped logins see it, enumerated on a warehouse whose
		// every table holds rows of two companies of one source, two branches of
		// one company, and a second source: a branch grant, a company grant,
		// grants on two sources that are not every pairing, and a branch grant
		// of a login an administrator also made an analyst and a reader of the
		// sensitive tables. Every relation and function it can read answers only
		// what its rule gives, and shows the rows of its grants. The checker is
		// shown to catch a table without a policy and a view that runs as its
		// owner.
		t.Parallel()
		h, _ := accessWarehouse(t)
		fillEveryTable(t, h.pool)
		for _, c := range []struct {
			name      string
			grants    []grant
			memberOf  []string
			wantEmpty bool
		}{
			{"ABranchGrant", []grant{{"fx", "A", "1"}}, nil, false},
			{"ACompanyGrant", []grant{{"fx", "A", ""}}, nil, false},
			{"GrantsThatAreNotEveryPairingOfTheirSourcesAndCompanies", []grant{{"fx", "B", ""}, {"fy", "A", ""}}, nil, false},
			{"ABranchGrantOfALoginAlsoMadeAnAnalystAndASensitiveReader", []grant{{"fx", "A", "2"}},
				[]string{"erpsync_analyst", "erpsync_sensitive"}, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				login := testdb.Role(t, c.memberOf...)
				for _, g := range c.grants {
					h.grantCompany(login, g)
				}
				if problems := catalogProblems(t, h, login, c.grants); len(problems) > 0 {
					t.Errorf("the catalog leaks:\n%s", strings.Join(problems, "\n"))
				}
			})
		}

		t.Run("TheCheckerCatchesATableWithoutAPolicyAndAViewThatRunsAsItsOwner", func(t *testing.T) {
			ctx := context.Background()
			login := testdb.Role(t)
			g := grant{"fx", "A", "1"}
			h.grantCompany(login, g)
			for _, c := range []struct{ name, ddl, want string }{
				{"a table without a policy", `CREATE TABLE erp.new_stream (source text, id text, company_id text, branch_id text);
				INSERT INTO erp.new_stream VALUES ('fx', '1', 'B', '1'); GRANT SELECT ON erp.new_stream TO erpsync_scoped`,
					"erp.new_stream: readable and not under row-level security"},
				{"a view that runs as its owner", `CREATE VIEW erp.new_view AS SELECT source, id, company_id, branch_id FROM erp.invoices;
				GRANT SELECT ON erp.new_view TO erpsync_scoped`, "erp.new_view: a view that does not run as its invoker"},
			} {
				if _, err := h.pool.Exec(ctx, c.ddl); err != nil {
					t.Fatal(err)
				}
				problems := strings.Join(catalogProblems(t, h, login, []grant{g}), "\n")
				if !strings.Contains(problems, c.want) {
					t.Errorf("%s: the checker did not say %q; it said:\n%s", c.name, c.want, problems)
				}
				if !strings.Contains(problems, "shows rows of") {
					t.Errorf("%s: the checker did not find the rows it leaks; it said:\n%s", c.name, problems)
				}
				h.pool.Exec(ctx, `DROP VIEW IF EXISTS erp.new_view; DROP TABLE IF EXISTS erp.new_stream`)
			}
		})
	})

	t.Run("HoldsItsOwnerToThePolicies", func(t *testing.T) {
		// The schema's owner, the non-superuser the test databases are migrated
		// by as installations are, is under the policies of every table (FORCE
		// ROW LEVEL SECURITY) and reads every row through them, as one who reads
		// everything; given a company grant, it reads that company's rows only,
		// like any login.
		t.Parallel()
		h, _ := accessWarehouse(t)
		fillEveryTable(t, h.pool)
		ctx := context.Background()
		owner := testdb.PoolAs(t, h.url, testdb.Owner)
		tables := queryStrings(t, h.pool, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relname <> 'company_grants' ORDER BY 1`)
		count := func(pool *pgxpool.Pool, table string) int64 {
			var n int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM erp.`+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
				t.Fatalf("erp.%s: %v", table, err)
			}
			return n
		}
		for _, table := range tables {
			var active bool
			if err := owner.QueryRow(ctx, `SELECT row_security_active($1::regclass)`, "erp."+table).Scan(&active); err != nil || !active {
				t.Errorf("erp.%s: row-level security does not apply to the owner (%v)", table, err)
			}
			if got, all := count(owner, table), count(h.pool, table); got != all || all == 0 {
				t.Errorf("erp.%s: the owner reads %d rows of %d", table, got, all)
			}
		}
		// With a grant of its own, the owner is scoped.
		if _, err := owner.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, 'fx', 'A', '1')`, testdb.Owner); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			h.pool.Exec(context.Background(), `DELETE FROM erp.company_grants WHERE role = $1::text::regrole`, testdb.Owner)
		})
		if got := invoiceCountAs(t, owner, `erp.invoices WHERE (source, company_id, branch_id) <> ('fx', 'A', '1')`); got != 0 {
			t.Errorf("the owner with a branch grant reads %d invoices of other branches", got)
		}
	})

	t.Run("PinsEveryFunctionAgainstTemporaryObjects", func(t *testing.T) {
		// No function or procedure of erp looks a name up in a session's
		// temporary schema. Each SECURITY DEFINER one, and each whose body is
		// text, pins search_path with pg_temp last; none names a catalog
		// relation without its schema.
		t.Parallel()
		pool, _ := testdb.Pool(t)
		ctx := context.Background()
		rows, err := pool.Query(ctx, `
SELECT p.oid::regprocedure::text, p.prosecdef, p.prosqlbody IS NOT NULL, coalesce(p.proconfig, '{}'), coalesce(p.prosrc, '')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'erp' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		catalogRelations := catalogRelationNames(t, pool)
		var sig, src string
		var definer, standard bool
		var config []string
		n := 0
		if _, err := pgx.ForEachRow(rows, []any{&sig, &definer, &standard, &config, &src}, func() error {
			n++
			pinned := slices.ContainsFunc(config, searchPathEndsInTemp.MatchString)
			switch {
			case definer && !pinned:
				t.Errorf("%s is SECURITY DEFINER and its search_path does not end in pg_temp: %v", sig, config)
			case !standard && !pinned:
				t.Errorf("%s has a body that is looked up when it runs, and its search_path does not end in pg_temp: %v", sig, config)
			}
			if standard {
				return nil
			}
			for _, rel := range unqualified(src, catalogRelations) {
				t.Errorf("%s names %s without its schema (pg_catalog.%s)", sig, rel, rel)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n < 20 {
			t.Errorf("%d functions and procedures in erp: the query found too few to mean anything", n)
		}
	})

	t.Run("LeavesNoRoadOutThroughTemporaryObjects", func(t *testing.T) {
		// Postgres looks a name up in the session's temporary schema first
		// unless search_path names it, so a reader's temporary objects named
		// like the catalog's could steer a function of erp (a policy's, running
		// as the schema's owner). As a scoped login, a plain analyst and the
		// runtime role, both attacks of the review are tried (a temporary table
		// pg_roles that makes the scoped login an analyst; a temporary view
		// pg_roles whose WHERE calls a temporary function), then a temporary
		// table, a temporary view that calls the hijack, and temporary
		// functions, named like every catalog relation and function the
		// functions of erp read: what each reads and every function it may call
		// answer as before, and nothing runs the hijack. Readers may not create
		// temporary objects at all where deploy/roles.sql set the database up;
		// TEMP is given to them here, as on a server where it was left to
		// PUBLIC.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 60})
		h.mustRun("invoices")
		h.mustRun("journal_entries")
		h.mustRun("journal_lines")
		fillEveryTable(t, h.pool)
		relations, functions := catalogObjectsRead(t, h.pool)
		for _, want := range []string{"pg_roles", "pg_namespace"} {
			if !slices.ContainsFunc(relations, func(r catalogRelation) bool { return r.name == want }) {
				t.Fatalf("the functions of erp read %v: not %s, which the policies' functions read", relations, want)
			}
		}
		if !slices.ContainsFunc(functions, func(f catalogFunction) bool { return f.name == "pg_has_role" }) {
			t.Fatalf("the functions of erp call %v: not pg_has_role", functions)
		}

		scoped := testdb.Role(t)
		h.grantCompany(scoped, grant{"fx", "A", "1"})
		for _, c := range []struct {
			name, login string
			reader      bool
		}{
			{"AScopedLogin", scoped, true},
			{"AnAnalyst", testdb.Role(t, "erpsync_analyst"), true},
			{"TheRuntimeRole", testdb.Role(t, "erpsync_runtime"), false},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				pool := testdb.PoolAs(t, h.url, c.login)
				_, err := pool.Exec(ctx, `CREATE TEMP TABLE may_i (i int)`)
				switch {
				case c.reader && (err == nil || !strings.Contains(err.Error(), "permission denied")):
					t.Errorf("a reader created a temporary table (%v): readers need no TEMP", err)
				case !c.reader && err != nil:
					t.Errorf("the runtime role cannot create its staging tables: %v", err)
				}
				if c.reader {
					if _, err := h.pool.Exec(ctx, fmt.Sprintf(`GRANT TEMP ON DATABASE %s TO %s`,
						pgx.Identifier{databaseOf(t, h.pool)}.Sanitize(), pgx.Identifier{c.login}.Sanitize())); err != nil {
						t.Fatal(err)
					}
				}
				probes := probesFor(t, pool, !c.reader)
				before := runProbes(t, pool, "", probes)

				attacks := []struct{ name, setup string }{
					{"a temporary table pg_roles that says the scoped role is an analyst", `
					CREATE TEMP TABLE pg_roles (oid oid, rolname name);
					INSERT INTO pg_temp.pg_roles VALUES ('erpsync_scoped'::regrole::oid, 'erpsync_analyst');
					GRANT SELECT ON pg_temp.pg_roles TO PUBLIC`},
					{"a temporary view pg_roles whose WHERE calls a temporary function", hijack + `;
					CREATE TEMP VIEW pg_roles AS SELECT * FROM pg_catalog.pg_roles WHERE pg_temp.hijack();
					GRANT SELECT ON pg_temp.pg_roles TO PUBLIC`},
				}
				for _, rel := range relations {
					attacks = append(attacks,
						struct{ name, setup string }{"a temporary table " + rel.name,
							fmt.Sprintf(`CREATE TEMP TABLE %[1]s AS SELECT %[2]s FROM pg_catalog.%[1]s WHERE false;
							GRANT SELECT ON pg_temp.%[1]s TO PUBLIC`, rel.name, rel.columns)},
						struct{ name, setup string }{"a temporary view " + rel.name + " that calls a temporary function",
							hijack + fmt.Sprintf(`; CREATE TEMP VIEW %[1]s AS SELECT %[2]s FROM pg_catalog.%[1]s WHERE pg_temp.hijack();
							GRANT SELECT ON pg_temp.%[1]s TO PUBLIC`, rel.name, rel.columns)})
				}
				var steered []string
				for _, f := range functions {
					steered = append(steered, f.shadow())
				}
				attacks = append(attacks, struct{ name, setup string }{"temporary functions named like those the functions call",
					strings.Join(steered, ";\n")})
				for _, a := range attacks {
					after := runProbes(t, pool, a.setup, probes)
					for i, p := range probes {
						if after[i] != before[i] {
							t.Errorf("with %s, %s answers %q, before %q", a.name, p, after[i], before[i])
						}
					}
				}
			})
		}
	})
}

// fixtureScope is one (source, company, branch) of the fixture, with the
// login whose context it is.
type fixtureScope struct{ source, company, branch, login string }

// fixtureScopes put rows in every table of erp: two companies in one
// source, two branches in one company, a second source with a company of
// the same name, and the bookkeeping of a login never identified.
var fixtureScopes = []fixtureScope{
	{"fx", "A", "1", "fx-a1"},
	{"fx", "A", "2", "fx-a2"},
	{"fx", "B", "1", "fx-b1"},
	{"fy", "A", "1", "fy-a1"},
	{"fx", "A", "1", "fx-ghost"},
}

// fillEveryTable writes a row of each fixture scope into every table of
// erp (as the administrator, past the policies and around the triggers,
// which watch updates and deletes only), and the contexts of the
// fixture's logins (the ghost's aside). A column gets its scope's label
// when named so, a value a check constraint allows, or one of its type;
// nullable columns outside the key stay NULL.
func fillEveryTable(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, s := range fixtureScopes {
		if s.login == "fx-ghost" {
			continue
		}
		if _, err := pool.Exec(ctx, `INSERT INTO erp.sync_logins (source, login, company_id, branch_id) VALUES ($1, $2, $3, $4)`,
			s.source, s.login, s.company, s.branch); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := pool.Query(ctx, `
SELECT c.relname, a.attname, format_type(a.atttypid, NULL), a.attnotnull AND NOT a.atthasdef,
       NOT a.atthasdef AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary AND a.attnum = ANY (i.indkey)),
       (SELECT substring(pg_get_constraintdef(k.oid) FROM 'ANY \(ARRAY\[''([^'']*)''') FROM pg_constraint k
        WHERE k.conrelid = c.oid AND k.contype = 'c' AND k.conkey = ARRAY[a.attnum] LIMIT 1)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
WHERE n.nspname = 'erp' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relname NOT IN ('company_grants', 'sync_logins')
ORDER BY c.relname, a.attnum`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct {
		table, name, typ string
		required, key    bool
		allowed          *string
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.name, &c.typ, &c.required, &c.key, &c.allowed)
	})
	if err != nil {
		t.Fatal(err)
	}
	byTable := map[string][]column{}
	var order []string
	for _, c := range cols {
		if byTable[c.table] == nil {
			order = append(order, c.table)
		}
		byTable[c.table] = append(byTable[c.table], c)
	}
	monthEnd := `(date_trunc('month', current_date - 40) + interval '1 month - 1 day')::date`
	for _, table := range order {
		var names []string
		var rowsSQL []string
		for n, s := range fixtureScopes {
			var values []string
			for _, c := range byTable[table] {
				label := map[string]string{"source": s.source, "company_id": s.company, "branch_id": s.branch, "login": s.login}
				v, isLabel := label[c.name]
				var expr string
				switch {
				case isLabel:
					expr = quote(v)
				case c.name == "valid_from":
					expr = `now() - interval '1 day'`
				case c.name == "valid_to":
					expr = `now() + interval '1 day'`
				case c.allowed != nil:
					expr = quote(*c.allowed)
				case !c.required && !c.key:
					continue
				case c.typ == "text":
					expr = quote(fmt.Sprintf("%s-%d", c.name, n))
				case c.typ == "bytea":
					expr = fmt.Sprintf("convert_to(%s, 'UTF8')", quote(fmt.Sprintf("%s-%d", c.name, n)))
				case c.typ == "jsonb":
					expr = fmt.Sprintf(`'{"n": %d}'::jsonb`, n)
				case c.typ == "numeric", c.typ == "integer", c.typ == "bigint", c.typ == "smallint":
					expr = fmt.Sprint(n + 1)
				case c.typ == "boolean":
					expr = "false"
				case c.typ == "date":
					expr = monthEnd
				case c.typ == "timestamp with time zone":
					expr = `now() - interval '1 hour'`
				default:
					t.Fatalf("fixture: erp.%s.%s is of type %s, which it cannot fill", table, c.name, c.typ)
				}
				if n == 0 {
					names = append(names, pgx.Identifier{c.name}.Sanitize())
				}
				values = append(values, expr)
			}
			rowsSQL = append(rowsSQL, "("+strings.Join(values, ", ")+")")
		}
		q := fmt.Sprintf("INSERT INTO erp.%s (%s) VALUES %s", pgx.Identifier{table}.Sanitize(), strings.Join(names, ", "), strings.Join(rowsSQL, ", "))
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("fixture rows of erp.%s: %v\n%s", table, err, q)
		}
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// scopedView is what a login may read under each rule: its grants.
type scopedView struct {
	grants []grant
	// logins are the contexts of the warehouse's identified logins, by
	// (source, login).
	logins map[[2]string][3]string
}

func (v scopedView) company(source, company, branch string) bool {
	return slices.ContainsFunc(v.grants, func(g grant) bool {
		return g.source == source && g.company == company && (g.branch == "" || g.branch == branch)
	})
}

func (v scopedView) source(source string) bool {
	return slices.ContainsFunc(v.grants, func(g grant) bool { return g.source == source })
}

func (v scopedView) login(source, login string) bool {
	ctx, ok := v.logins[[2]string{source, login}]
	return ok && v.company(ctx[0], ctx[1], ctx[2])
}

// allows says whether a row of a relation under rule may be read.
func (v scopedView) allows(rule sync.Access, r shownRow) bool {
	switch rule {
	case sync.ByCompany:
		return r.source != nil && r.company != nil && r.branch != nil && v.company(*r.source, *r.company, *r.branch)
	case sync.BySource:
		return r.source != nil && v.source(*r.source)
	case sync.ByLogin:
		return r.source != nil && r.login != nil && v.login(*r.source, *r.login)
	}
	return false
}

// shownRow is what identifies whose a row is: its labels, those a
// relation has.
type shownRow struct{ source, company, branch, login *string }

func (r shownRow) String() string {
	return fmt.Sprintf("%s/%s/%s (login %s)", str(r.source), str(r.company), str(r.branch), str(r.login))
}

// relation is a table, view or set-returning function of erp as the
// catalog test reads it.
type relation struct {
	name, kind string // kind: r (table), v (view), f (function, name is a call)
	rule       sync.Access
	columns    map[string]bool
	readable   bool
	// table is the table whose rule decides (itself, or the type a
	// function returns); "" for a view, read by the columns it shows.
	table string
}

// catalogProblems lists what lets login (scoped to grants) read outside
// them, or could: a readable table not under forced row-level security, a
// view not running as its invoker, any row of a table, view or function
// that its rule does not give the login (read as login, and after SET
// ROLE to each role it can reach), a callable function whose rows erpsync
// cannot tell, a role it can reach that bypasses row-level security. As a
// control, it also lists a readable table in which the login sees none of
// the fixture's rows of its grants: a rule that reads nothing would
// otherwise pass.
func catalogProblems(t *testing.T, h *harness, login string, grants []grant) []string {
	t.Helper()
	ctx := context.Background()
	var problems []string
	declared := declaredAccess()
	view := scopedView{grants: grants, logins: map[[2]string][3]string{}}
	rows, err := h.pool.Query(ctx, `SELECT source, login, company_id, branch_id FROM erp.sync_logins`)
	if err != nil {
		t.Fatal(err)
	}
	var s, l, c, b string
	if _, err := pgx.ForEachRow(rows, []any{&s, &l, &c, &b}, func() error {
		view.logins[[2]string{s, l}] = [3]string{s, c, b}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	rels := readRelations(t, h.pool, login, declared)
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
		problems = append(problems, x.problems...)
		if !x.readable {
			continue
		}
		cols := []string{"NULL::text", "NULL::text", "NULL::text", "NULL::text"}
		for i, c := range []string{"source", "company_id", "branch_id", "login"} {
			if x.columns[c] {
				cols[i] = c + "::text"
			}
		}
		q := "SELECT DISTINCT " + strings.Join(cols, ", ") + " FROM " + x.name
		for _, role := range roles {
			shown, err := readAs(pool, role, q)
			if err != nil {
				if !strings.Contains(err.Error(), "permission denied") {
					problems = append(problems, fmt.Sprintf("%s as %q: %v", x.name, role, err))
				}
				continue
			}
			for _, row := range shown {
				if !view.allows(x.rule, row) {
					problems = append(problems, fmt.Sprintf("%s (%s) as %q shows rows of %s", x.name, x.rule, role, row))
				}
			}
			if role != "" || x.kind == "v" || x.rule == sync.Withheld {
				continue
			}
			// The control: each of its grants' fixture rows shows.
			for _, g := range grants {
				found := slices.ContainsFunc(shown, func(r shownRow) bool {
					switch x.rule {
					case sync.ByCompany:
						return r.source != nil && *r.source == g.source && r.company != nil && *r.company == g.company &&
							(g.branch == "" || r.branch != nil && *r.branch == g.branch)
					case sync.BySource:
						return r.source != nil && *r.source == g.source
					}
					return r.source != nil && r.login != nil && view.login(*r.source, *r.login) && *r.source == g.source
				})
				if !found {
					problems = append(problems, fmt.Sprintf("%s (%s): the login sees none of the rows of its grant %v", x.name, x.rule, g))
				}
			}
		}
	}
	return problems
}

// relationInfo is a relation with what the catalog says is wrong with it
// before any row is read.
type relationInfo struct {
	relation
	problems []string
}

// readRelations enumerates the tables, views and functions of erp as
// login may use them, each with the rule its rows are checked by.
func readRelations(t *testing.T, pool *pgxpool.Pool, login string, declared declarations) []relationInfo {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
SELECT c.relname, c.relkind::text, c.relrowsecurity AND c.relforcerowsecurity,
       coalesce('security_invoker=true' = ANY (c.reloptions) OR 'security_invoker=on' = ANY (c.reloptions), false),
       has_table_privilege($1, c.oid, 'SELECT'),
       (SELECT array_agg(a.attname::text) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'erp' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relname <> 'company_grants' ORDER BY 1`, login)
	if err != nil {
		t.Fatal(err)
	}
	var out []relationInfo
	var name, kind string
	var forced, invoker, readable bool
	var cols []string
	_, err = pgx.ForEachRow(rows, []any{&name, &kind, &forced, &invoker, &readable, &cols}, func() error {
		x := relationInfo{relation: relation{name: "erp." + name, kind: kind, readable: readable, columns: map[string]bool{}}}
		for _, c := range cols {
			x.columns[c] = true
		}
		switch kind {
		case "v":
			x.kind, x.rule = "v", ruleByColumns(x.columns)
			if !invoker {
				x.problems = append(x.problems, x.name+": a view that does not run as its invoker")
			}
		default:
			x.kind, x.table = "r", name
			rule, ok := declared.of(name)
			x.rule = rule
			if !ok {
				// Whose rows they are cannot be told: any row shown is one
				// too many.
				x.rule = sync.Withheld
				x.problems = append(x.problems, x.name+": a table with no declared rule")
			}
			if readable && !forced {
				x.problems = append(x.problems, x.name+": readable and not under row-level security")
			}
		}
		out = append(out, x)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Functions the login may call: a set-returning function of a
	// table's rows is read under that table's rule; the others must read
	// no table (an SQL-standard body that depends on none) or tell the
	// session of its own grants.
	own := []string{"erp.session_grants()", "erp.session_reads_all()", "erp.session_sources(boolean)", "erp.session_companies()",
		"erp.session_companies_are_product()", "erp.session_only_source()", "erp.session_only_company()"}
	rows, err = pool.Query(ctx, `
SELECT p.oid::regprocedure::text, p.proretset, coalesce(rt.relname, ''), pg_get_function_identity_arguments(p.oid),
       p.prosqlbody IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.classid = 'pg_proc'::regclass
           AND d.refclassid = 'pg_class'::regclass)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_class rt ON rt.reltype = p.prorettype
WHERE n.nspname = 'erp' AND p.prokind = 'f' AND has_function_privilege($1, p.oid, 'EXECUTE') ORDER BY 1`, login)
	if err != nil {
		t.Fatal(err)
	}
	var sig, returns, args string
	var set, readsNoTable bool
	_, err = pgx.ForEachRow(rows, []any{&sig, &set, &returns, &args, &readsNoTable}, func() error {
		if slices.Contains(own, sig) || readsNoTable {
			return nil
		}
		call, ok := map[string]string{"ts timestamp with time zone": "now()", "month date": "current_date - 40"}[args]
		rule, known := declared.of(returns)
		if !set || returns == "" || !ok || !known {
			out = append(out, relationInfo{problems: []string{sig + ": callable, and erpsync cannot tell whose rows it answers"}})
			return nil
		}
		out = append(out, relationInfo{relation: relation{name: strings.SplitN(sig, "(", 2)[0] + "(" + call + ")", kind: "f", rule: rule,
			table: returns, readable: true, columns: columnsOf(t, pool, returns)}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func columnsOf(t *testing.T, pool *pgxpool.Pool, table string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, n := range queryStrings(t, pool, `SELECT attname::text FROM pg_attribute
		WHERE attrelid = ('erp.' || quote_ident($1))::regclass AND attnum > 0 AND NOT attisdropped`, table) {
		out[n] = true
	}
	return out
}

// ruleByColumns is the rule a view's rows are checked by, from the columns
// it shows: its rows are of a company when it shows company and branch,
// of a login's bookkeeping when it shows a login, of a source when it
// shows only that, and of nobody it may show otherwise.
func ruleByColumns(cols map[string]bool) sync.Access {
	switch {
	case cols["company_id"] && cols["branch_id"]:
		return sync.ByCompany
	case cols["login"]:
		return sync.ByLogin
	case cols["source"]:
		return sync.BySource
	}
	return sync.Withheld
}

// readAs runs q (source, company, branch, login) on one connection of
// pool after SET ROLE role ("" for none).
func readAs(pool *pgxpool.Pool, role, q string) ([]shownRow, error) {
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if role != "" {
		if _, err := conn.Exec(ctx, `SET ROLE `+pgx.Identifier{role}.Sanitize()); err != nil {
			return nil, fmt.Errorf("SET ROLE %s: %w", role, err)
		}
		defer conn.Exec(ctx, `RESET ROLE`)
	}
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (shownRow, error) {
		var r shownRow
		return r, row.Scan(&r.source, &r.company, &r.branch, &r.login)
	})
}

// pinned is what a function of erp must be: its search_path pinned with
// pg_temp last, or, for a function that is no SECURITY DEFINER, an
// SQL-standard body (whose names Postgres binds at creation).
var searchPathEndsInTemp = regexp.MustCompile(`^search_path=.*,\s*pg_temp$`)

// catalogRelationNames are the tables and views of pg_catalog.
func catalogRelationNames(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return queryStrings(t, pool, `SELECT relname::text FROM pg_class WHERE relnamespace = 'pg_catalog'::regnamespace
		AND relkind IN ('r', 'v') ORDER BY 1`)
}

// queryStrings runs a query of one text column and returns its values.
func queryStrings(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// unqualified lists the catalog relations src names without
// "pg_catalog." before them.
func unqualified(src string, relations []string) []string {
	var out []string
	for _, rel := range relations {
		re := regexp.MustCompile(`(^|[^.\w])` + regexp.QuoteMeta(rel) + `\b`)
		if re.MatchString(src) {
			out = append(out, rel)
		}
	}
	return out
}
