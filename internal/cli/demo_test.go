package cli

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/testdb"
)

// TestDemo documents `erpsync demo`: it creates the database
// ERPSYNC_DATABASE_URL names when it is missing (and says so), and may run
// again on the same database with another size.
func TestDemo(t *testing.T) {
	t.Parallel()
	env := func(dbURL string) []string { return environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_LOG_FORMAT=text") }

	t.Run("RefusesClearlyADatabaseItsLoginMayNotCreate", func(t *testing.T) {
		t.Parallel()
		name, dbURL := missingDatabase(t)
		r := runMain(t, env(testdb.URLAs(t, dbURL, testdb.Role(t))), "demo", "--invoices", "10")
		if r.code == exitOK || !strings.Contains(r.stderr, "database "+name+" does not exist, and role erpsync_t_role_") || !strings.Contains(r.stderr, "may not create it") {
			t.Errorf("demo on a missing database its login may not create: want a refusal naming both\n%s", r)
		}
	})

	// The second demo's ERP is a new one, and its totals still agree to
	// the digit.
	t.Run("CreatesItsDatabaseAndRunsAgainOnItWithAnotherSize", func(t *testing.T) {
		t.Parallel()
		name, dbURL := missingDatabase(t)
		for i, size := range []string{"300", "100"} {
			r := runMain(t, env(dbURL), "demo", "--invoices", size)
			if r.code != exitOK || !strings.Contains(r.stdout, "(equal, digit for digit)") {
				t.Fatalf("demo #%d with %s invoices: want exit 0 and equal totals\n%s", i+1, size, r)
			}
			if created := strings.Contains(r.stdout, "created the database "+name); created != (i == 0) {
				t.Errorf("demo #%d: says it created the database: %v, want %v\n%s", i+1, created, i == 0, r)
			}
			if earlier := strings.Contains(r.stdout, "holds an earlier demo"); earlier != (i == 1) {
				t.Errorf("demo #%d: says an earlier demo is there: %v, want %v\n%s", i+1, earlier, i == 1, r)
			}
		}
	})
}

var demoDatabases atomic.Int64

// missingDatabase names a database that does not exist yet on the test
// server, dropped when the test ends if something created it.
func missingDatabase(t *testing.T) (name, dbURL string) {
	t.Helper()
	name = fmt.Sprintf("erpsync_t_demo_%d_%d", time.Now().UnixNano(), demoDatabases.Add(1))
	t.Cleanup(func() {
		ctx := context.Background()
		if c, err := pgx.Connect(ctx, testdb.AdminURL()); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	return name, testdb.URLOf(name)
}
