package sync_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// hijack is a temporary function that reports being run, and as whom: a
// function of erp that a temporary object steers into it fails with it.
const hijack = `CREATE FUNCTION pg_temp.hijack() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked: running as %', current_user; END $$`

// databaseOf is the name of the database pool is connected to.
func databaseOf(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	if err := pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// probesFor is what a session reads and calls: a table under a policy,
// every function of erp it may call (a set-returning one counted), and,
// for the runtime role, updates and deletes that run the tables'
// triggers (in transactions rolled back).
func probesFor(t *testing.T, pool *pgxpool.Pool, writer bool) []string {
	t.Helper()
	probes := []string{`SELECT count(*)::text FROM erp.invoices`, `SELECT count(*)::text FROM erp.sync_checkpoints`,
		`SELECT count(*)::text FROM erp.invoices_current`}
	rows, err := pool.Query(context.Background(), `
SELECT p.oid::regprocedure::text, p.proretset, pg_get_function_identity_arguments(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'erp' AND p.prokind = 'f' AND p.prorettype <> 'trigger'::regtype
  AND has_function_privilege(p.oid, 'EXECUTE') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var sig, args string
	var set bool
	args0 := map[string]string{"": "", "ts timestamp with time zone": "now()", "month date": "current_date - 40",
		"company_wide boolean": "true", "v jsonb": `'"2026-01-31"'::jsonb`, "id text": `'1'`,
		"source text, stream text, login text, sweep_id bigint": "'test', 'invoices', 'erpsync', 1"}
	if _, err := pgx.ForEachRow(rows, []any{&sig, &set, &args}, func() error {
		call, ok := args0[args]
		if !ok {
			t.Errorf("%s: the probes do not know how to call it", sig)
			return nil
		}
		name := strings.SplitN(sig, "(", 2)[0]
		if set {
			probes = append(probes, fmt.Sprintf(`SELECT count(*)::text FROM %s(%s)`, name, call))
		} else {
			probes = append(probes, fmt.Sprintf(`SELECT %s(%s)::text`, name, call))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if writer {
		probes = append(probes,
			`UPDATE erp.invoices SET payload = payload || '{"probe": 1}' WHERE id = (SELECT min(id) FROM erp.invoices WHERE source = 'test') RETURNING 'updated'`,
			`DELETE FROM erp.journal_lines WHERE source = 'test' RETURNING 'deleted'`)
	}
	return probes
}

// runProbes runs setup, then each probe, in one transaction rolled back
// at the end, and returns each probe's answer (its error's text when it
// fails).
func runProbes(t *testing.T, pool *pgxpool.Pool, setup string, probes []string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if setup != "" {
		if _, err := tx.Exec(ctx, setup); err != nil {
			t.Fatalf("setting up %s: %v", setup, err)
		}
	}
	out := make([]string, len(probes))
	for i, p := range probes {
		if _, err := tx.Exec(ctx, `SAVEPOINT probe`); err != nil {
			t.Fatal(err)
		}
		var v *string
		rows, err := tx.Query(ctx, p)
		if err == nil {
			var got []*string
			got, err = pgx.CollectRows(rows, pgx.RowTo[*string])
			if len(got) > 0 {
				v = got[0]
			}
		}
		switch {
		case err != nil:
			out[i] = "error: " + err.Error()
			tx.Exec(ctx, `ROLLBACK TO SAVEPOINT probe`)
		default:
			out[i] = str(v)
			tx.Exec(ctx, `RELEASE SAVEPOINT probe`)
		}
	}
	return out
}

// catalogRelation is a table or view of pg_catalog, with its columns
// that a temporary table can have (not those of pseudo-types).
type catalogRelation struct{ name, columns string }

// catalogFunction is a function of pg_catalog, with a signature a
// temporary function can take.
type catalogFunction struct {
	name, args, returns string
	set                 bool
}

// shadow creates a temporary function with its name and signature that
// runs the hijack.
func (f catalogFunction) shadow() string {
	ret := f.returns
	if f.set {
		ret = "SETOF " + ret
	}
	return fmt.Sprintf(`CREATE FUNCTION pg_temp.%s(%s) RETURNS %s LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked: running as %%', current_user; END $$`, f.name, f.args, ret)
}

// catalogObjectsRead lists the catalog relations and functions that the
// functions of erp read: named in a body that is text, or bound (in
// pg_depend) by an SQL-standard one. Functions whose signature a
// temporary function cannot take (pseudo-types, aggregates) are left out.
func catalogObjectsRead(t *testing.T, pool *pgxpool.Pool) ([]catalogRelation, []catalogFunction) {
	t.Helper()
	ctx := context.Background()
	bodies := queryStrings(t, pool, `SELECT coalesce(p.prosrc, '') FROM pg_proc p WHERE p.pronamespace = 'erp'::regnamespace`)
	words := map[string]bool{}
	word := regexp.MustCompile(`[a-z_][a-z0-9_]*`)
	for _, b := range bodies {
		for _, w := range word.FindAllString(strings.ToLower(b), -1) {
			words[w] = true
		}
	}
	var named []string
	for w := range words {
		named = append(named, w)
	}
	rows, err := pool.Query(ctx, `
SELECT c.relname::text, (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute a
       JOIN pg_type ty ON ty.oid = a.atttypid WHERE a.attrelid = c.oid AND a.attnum > 0 AND ty.typtype <> 'p')
FROM pg_class c
WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind IN ('r', 'v')
  AND (c.relname = ANY ($1::text[]) OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
       WHERE d.classid = 'pg_proc'::regclass AND p.pronamespace = 'erp'::regnamespace AND d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid))
ORDER BY 1`, named)
	if err != nil {
		t.Fatal(err)
	}
	relations, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalogRelation, error) {
		var c catalogRelation
		return c, r.Scan(&c.name, &c.columns)
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `
SELECT f.proname::text, pg_get_function_identity_arguments(f.oid), format_type(f.prorettype, NULL), f.proretset
FROM pg_proc f
WHERE f.pronamespace = 'pg_catalog'::regnamespace AND f.prokind = 'f'
  AND (f.proname = ANY ($1::text[]) OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
       WHERE d.classid = 'pg_proc'::regclass AND p.pronamespace = 'erp'::regnamespace AND d.refclassid = 'pg_proc'::regclass AND d.refobjid = f.oid))
  AND NOT EXISTS (SELECT 1 FROM unnest(f.proargtypes::oid[]) ty
                  WHERE ty IN (SELECT oid FROM pg_type WHERE typtype = 'p' AND typname NOT IN ('anyelement', 'anyarray')))
  AND f.prorettype NOT IN (SELECT oid FROM pg_type WHERE typtype = 'p' AND typname NOT IN ('anyelement', 'anyarray', 'record', 'void'))
ORDER BY 1, 2`, named)
	if err != nil {
		t.Fatal(err)
	}
	functions, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalogFunction, error) {
		var f catalogFunction
		return f, r.Scan(&f.name, &f.args, &f.returns, &f.set)
	})
	if err != nil {
		t.Fatal(err)
	}
	return relations, functions
}
