package db_test

import (
	"context"
	"errors"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestMigrate documents Migrate and CheckMigrate: who may migrate the schema, and
// replicas migrating it at once.
func TestMigrate(t *testing.T) {
	// Replicas that start together on an empty database take turns: every
	// one of them succeeds and the schema is migrated once.
	t.Run("RunsEachMigrationOnceWhenReplicasStartTogether", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		url := testdb.Empty(t)

		const replicas = 4
		var wg sync.WaitGroup
		errs := make([]error, replicas)
		applied := make([]int, replicas)
		for i := range replicas {
			wg.Go(func() {
				pool, err := db.Open(ctx, url)
				if err != nil {
					errs[i] = err
					return
				}
				defer pool.Close()
				versions, err := db.Migrate(ctx, pool, nil)
				errs[i], applied[i] = err, len(versions)
			})
		}
		wg.Wait()
		total := 0
		for i := range replicas {
			if errs[i] != nil {
				t.Errorf("replica %d: %v", i, errs[i])
			}
			total += applied[i]
		}
		pool, err := db.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		cur, target, err := db.SchemaVersions(ctx, pool)
		if err != nil || cur != target {
			t.Fatalf("schema at %d of %d: %v", cur, target, err)
		}
		if total != int(target) {
			t.Errorf("migrations applied %d times in all, want each of the %d once", total, target)
		}
	})

	// The runtime role is told, before goose runs a statement, that it may not and
	// what to do; the database's owner (no superuser) may, and does. Once the schema
	// is behind, only a member of its owner may bring it up to date.
	t.Run("RefusesTheRuntimeRoleWithTheWayOutAndLetsTheSchemasOwner", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		url := testdb.Empty(t)
		runtime := testdb.PoolAs(t, url, testdb.Role(t, "erpsync_runtime"))
		ownerRole := testdb.Role(t)
		admin := testdb.Admin(t)
		defer admin.Close(ctx)
		u, _ := neturl.Parse(url)
		dbName := strings.TrimPrefix(u.Path, "/")
		for _, stmt := range []string{
			"ALTER DATABASE " + dbName + " OWNER TO " + ownerRole,
			"GRANT erpsync_analyst, erpsync_scoped TO " + ownerRole + " WITH ADMIN OPTION",
		} {
			if _, err := admin.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { // the role is dropped when t ends: its database must go first
			if c, err := pgx.Connect(context.Background(), testdb.AdminURL()); err == nil {
				c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
				c.Close(context.Background())
			}
		})
		owner := testdb.PoolAs(t, url, ownerRole)

		refused := func(q db.Querier, want string) {
			t.Helper()
			err := db.CheckMigrate(ctx, q)
			var se *db.SchemaError
			if !errors.As(err, &se) || se.Denied == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "ERPSYNC_MIGRATE_DATABASE_URL") {
				t.Errorf("CheckMigrate: %v; want a *SchemaError saying %q and how to migrate as the owner", err, want)
			}
		}
		refused(runtime, "may not create schema erp")
		_, err := db.Migrate(ctx, runtime, nil)
		var se *db.SchemaError
		if !errors.As(err, &se) || strings.Contains(err.Error(), "42501") {
			t.Errorf("Migrate as the runtime role: %v; want the *SchemaError, not goose's permission denied", err)
		}
		if err := db.CheckMigrate(ctx, owner); err != nil {
			t.Fatalf("CheckMigrate as the database's owner: %v", err)
		}
		if _, err := db.Migrate(ctx, owner, nil); err != nil {
			t.Fatalf("Migrate as the database's owner, which CheckMigrate allowed: %v", err)
		}
		if err := db.CheckMigrate(ctx, runtime); err != nil {
			t.Errorf("CheckMigrate as the runtime role on a current schema, where there is nothing to do: %v", err)
		}

		// One migration behind.
		if _, err := owner.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`); err != nil {
			t.Fatal(err)
		}
		refused(runtime, "does not own schema erp ("+ownerRole+" does)")
		if err := db.CheckMigrate(ctx, owner); err != nil {
			t.Errorf("CheckMigrate as the owner of a schema one migration behind: %v", err)
		}
	})
}
