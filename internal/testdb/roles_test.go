package testdb

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRolesScript documents deploy/roles.sql, the script that creates an
// installation's roles and database.
func TestRolesScript(t *testing.T) {
	// deploy/roles.sql runs twice on a server that has the roles already (the
	// test template made them): both runs succeed and leave the roles, the
	// database and its privileges as an installation needs them, and the
	// second, run as the documentation writes it, prints nothing. The
	// script holds no password; they come from psql variables.
	t.Run("RunsTwiceLeavingWhatAnInstallationNeeds", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		New(t) // the template, hence the roles, exist
		admin := Admin(t)
		defer admin.Close(ctx)
		name := "erpsync_t_roles_" + randomHex(4)
		t.Cleanup(func() { dropDatabase(name) })
		for run := 1; run <= 2; run++ {
			out, err := RunRolesScript(ctx, t, name, "app_password=roles-test-"+randomHex(4))
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			if run == 2 && strings.TrimSpace(out) != "" {
				t.Errorf("the second run said something:\n%s", out)
			}
		}
		// The shared server's login keeps no password of this test's.
		t.Cleanup(func() { admin.Exec(context.Background(), `ALTER ROLE erpsync_app PASSWORD NULL`) })

		var got string
		if err := admin.QueryRow(ctx, `
SELECT concat_ws(' | ',
  (SELECT datdba::regrole::text FROM pg_database WHERE datname = $1),
  (SELECT string_agg(coalesce(r.rolname, 'PUBLIC') || ':' || a.privilege_type, ',' ORDER BY coalesce(r.rolname, 'PUBLIC'))
     FROM pg_database d, aclexplode(d.datacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
     WHERE d.datname = $1 AND a.privilege_type = 'TEMPORARY'),
  (SELECT string_agg(rolname || ' super=' || rolsuper || ' createrole=' || rolcreaterole || ' bypassrls=' || rolbypassrls
       || ' login=' || rolcanlogin, ', ' ORDER BY rolname)
     FROM pg_authid WHERE rolname IN ('erpsync_owner', 'erpsync_app', 'erpsync_runtime', 'erpsync_analyst', 'erpsync_sensitive', 'erpsync_scoped')),
  (SELECT string_agg(g.rolname || '>' || m.rolname || CASE WHEN a.admin_option THEN '*' ELSE '' END, ',' ORDER BY g.rolname)
     FROM pg_auth_members a JOIN pg_roles g ON g.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
     WHERE m.rolname IN ('erpsync_owner', 'erpsync_app')),
  (SELECT (rolpassword IS NOT NULL)::text FROM pg_authid WHERE rolname = 'erpsync_app'))`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		want := "erpsync_owner | erpsync_owner:TEMPORARY,erpsync_runtime:TEMPORARY | " +
			"erpsync_analyst super=false createrole=false bypassrls=false login=false, " +
			"erpsync_app super=false createrole=false bypassrls=true login=true, " +
			"erpsync_owner super=false createrole=false bypassrls=false login=true, " +
			"erpsync_runtime super=false createrole=false bypassrls=false login=false, " +
			"erpsync_scoped super=false createrole=false bypassrls=false login=false, " +
			"erpsync_sensitive super=false createrole=false bypassrls=false login=false | " +
			"erpsync_analyst>erpsync_owner*,erpsync_runtime>erpsync_app,erpsync_scoped>erpsync_owner* | true"
		if got != want {
			t.Errorf("after two runs:\n got %s\nwant %s", got, want)
		}

		script, err := os.ReadFile(rolesScript())
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`(?i)PASSWORD\s+'`).Find(script); m != nil {
			t.Errorf("deploy/roles.sql writes a password: %q", m)
		}
	})
	// The advisory-lock functions, every one the catalog of the warehouse's
	// database holds (session and transaction, shared or not, one key or
	// two), may be called by the owner (goose's migration lock) and the
	// daemon's roles, and by no other: neither PUBLIC nor a reader. A
	// branch-scoped accountant who tries to freeze the invoices of source
	// sim, as anyone could before, is refused. A database that an earlier
	// release's script left as Postgres makes it is set so by running the
	// script again.
	t.Run("LeavesStreamLocksToTheOwnerAndTheDaemon", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url := New(t)
		owner := PoolAs(t, url, Owner)
		scoped := Role(t)
		if _, err := owner.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, 'sim', '1', '1', ahead => true)`, scoped); err != nil {
			t.Fatal(err)
		}
		analyst := Role(t, "erpsync_analyst")
		for _, c := range []struct{ who, q string }{
			{scoped, `SELECT pg_advisory_lock(1163022419, 952744812)`},
			{scoped, `SELECT pg_try_advisory_xact_lock(1163022419, 952744812)`},
			{analyst, `SELECT pg_try_advisory_lock(1163022419, 952744812)`},
			{analyst, `SELECT pg_advisory_lock_shared(5887935127)`},
		} {
			if _, err := PoolAs(t, url, c.who).Exec(ctx, c.q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as %s: %v, want permission denied", c.q, c.who, err)
			}
		}
		may := map[string]bool{Owner: true, "erpsync_runtime": true, "erpsync_app": true, "erpsync_analyst": false,
			"erpsync_sensitive": false, "erpsync_scoped": false, scoped: false, Role(t): false}
		checkExecute(ctx, t, url, `p.proname ~ '^pg_(try_)?advisory_'`, 21, may)

		// An installation's database from before: the script run again.
		name := "erpsync_t_locks_" + randomHex(4)
		admin := Admin(t)
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" OWNER "+Owner); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dropDatabase(name) })
		checkExecute(ctx, t, URLOf(name), `p.proname ~ '^pg_(try_)?advisory_'`, 21, map[string]bool{analyst: true})
		if _, err := RunRolesScript(ctx, t, name); err != nil {
			t.Fatal(err)
		}
		checkExecute(ctx, t, URLOf(name), `p.proname ~ '^pg_(try_)?advisory_'`, 21, may)
	})

	// No login but a superuser may make, open, read or write a large object
	// in the warehouse's database: an analyst cannot pack every branch's
	// invoices into one to hand to a scoped login, nor anyone fill the disk
	// with them. erpsync uses none, so the daemon and the owner may not
	// either.
	t.Run("LeavesLargeObjectsToSuperusersAlone", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url := New(t)
		analyst, scoped := Role(t, "erpsync_analyst"), Role(t, "erpsync_scoped")
		for _, c := range []struct{ who, q string }{
			{analyst, `SELECT lo_from_bytea(0, convert_to((SELECT string_agg(id || ' ' || total_bc, ',') FROM erp.invoices), 'UTF8'))`},
			{analyst, `SELECT lo_create(0)`},
			{scoped, `SELECT lo_creat(-1)`},
			{scoped, `SELECT lo_get(16385)`},
			{Role(t, "erpsync_runtime"), `SELECT lo_from_bytea(0, '\x00')`},
		} {
			if _, err := PoolAs(t, url, c.who).Exec(ctx, c.q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as %s: %v, want permission denied", c.q, c.who, err)
			}
		}
		may := map[string]bool{}
		for _, r := range []string{Owner, "erpsync_runtime", "erpsync_app", "erpsync_analyst", "erpsync_sensitive", "erpsync_scoped", scoped, Role(t)} {
			may[r] = false
		}
		checkExecute(ctx, t, url, `p.proname ~ '^lo_' OR p.proname IN ('loread', 'lowrite')`, 20, may)
	})
}

// checkExecute enumerates the functions of pg_catalog that which selects
// in the database of url (Postgres 15 has n of them) and checks that each
// role of may can execute every one of them exactly when may says so (a
// login of no group stands for PUBLIC).
func checkExecute(ctx context.Context, t *testing.T, url, which string, n int, may map[string]bool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var count int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace AND (`+which+`)`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count < n {
		t.Errorf("%d functions where %s, want at least %d: the enumeration finds too few", count, which, n)
	}
	for role, want := range may {
		var wrong []string
		rows, err := conn.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'pg_catalog'::regnamespace AND (`+which+`) AND has_function_privilege($1, p.oid, 'EXECUTE') <> $2
		ORDER BY 1`, role, want)
		if err == nil {
			wrong, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(wrong) > 0 {
			t.Errorf("%s may execute = %v is false of %d of the %d, such as %s", role, want, len(wrong), count, strings.Join(wrong[:min(3, len(wrong))], ", "))
		}
	}
}
