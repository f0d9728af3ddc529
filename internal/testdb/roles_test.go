package testdb

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRolesScript documents deploy/roles.sql, the script that creates an
// installation's roles and database.
func TestRolesScript(t *testing.T) {
	// deploy/roles.sql runs twice on a server that has the roles already (the
	// test template made them): both runs succeed and leave the roles, the
	// database and its privileges as an installation needs them. The script
	// holds no password; they come from psql variables.
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
}
