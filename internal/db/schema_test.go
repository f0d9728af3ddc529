package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestSchemaVersions documents SchemaVersions: the schema's version as a login
// reads it, and what a login that may not read it is told.
func TestSchemaVersions(t *testing.T) {
	t.Parallel()

	// Each way a login may lack the right to read the version table is named with
	// the grant that gives it, and that grant, run as the one it names, is the fix:
	// a runtime role the table was never granted to (the schema migrated before
	// deploy/roles.sql made the role), and a login outside the runtime role.
	t.Run("NamesTheGrantALoginLacksAndThatGrantIsTheFix", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dbURL := testdb.New(t)
		admin := testdb.Admin(t)
		defer admin.Close(ctx)
		owner := testdb.PoolAs(t, dbURL, testdb.Owner)

		outsider := testdb.Role(t)
		member := testdb.Role(t, db.RuntimeRole)
		if _, err := owner.Exec(ctx, `REVOKE SELECT ON goose_db_version FROM erpsync_runtime`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { owner.Exec(context.Background(), `GRANT SELECT ON goose_db_version TO erpsync_runtime`) })

		for _, tc := range []struct {
			login, by, why, grant string
			fix                   func(grant string) error
		}{
			{login: member, by: "as the table's owner, " + testdb.Owner, why: "erpsync_runtime may not read it",
				grant: "GRANT SELECT ON goose_db_version TO erpsync_runtime;",
				fix:   func(g string) error { _, err := owner.Exec(ctx, g); return err }},
			{login: outsider, by: "as a superuser", why: "it is not a member of erpsync_runtime", grant: "GRANT erpsync_runtime TO " + outsider + ";",
				fix: func(g string) error { _, err := admin.Exec(ctx, g); return err }},
		} {
			pool := testdb.PoolAs(t, dbURL, tc.login)
			_, _, err := db.SchemaVersions(ctx, pool)
			var ge *db.GrantError
			if !errors.As(err, &ge) {
				t.Fatalf("%s: SchemaVersions = %v, want a *GrantError", tc.login, err)
			}
			for _, want := range []string{"role " + tc.login + " may not read the schema's version table goose_db_version", tc.why, tc.by + ", run: " + tc.grant} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v\nlacks %q", tc.login, err, want)
				}
			}
			if err := tc.fix(tc.grant); err != nil {
				t.Fatalf("%s: %s: %v", tc.login, tc.grant, err)
			}
			if cur, target, err := db.SchemaVersions(ctx, pool); err != nil || cur != target {
				t.Errorf("%s after %s: version %d of %d, %v; want the current schema read", tc.login, tc.grant, cur, target, err)
			}
		}
	})
}
