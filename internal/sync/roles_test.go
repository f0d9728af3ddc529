package sync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// A login role that owns nothing and is only a member of erpsync_runtime
// checks the schema and runs every stream; it cannot change the schema.
func TestRuntimeRoleNeedsOnlyDML(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 120, SlashIDs: true})
	ctx := context.Background()
	pool := testdb.PoolAs(t, h.url, testdb.Role(t, "erpsync_runtime"))
	if err := db.EnsureSchema(ctx, pool, false, "", nil); err != nil {
		t.Fatalf("the runtime role cannot check the schema: %v", err)
	}
	h.runner = &sync.Runner{Pool: pool, Prefetch: 1}
	for _, s := range catalog.Names() {
		h.mustRun(s)
	}
	h.mustRun("invoices") // an ordinary sweep after the bulk load
	for _, ddl := range []string{`CREATE TABLE erp.x (id int)`, `ALTER TABLE erp.invoices ADD COLUMN x int`, `DROP TABLE erp.sweep_seen`, `CREATE ROLE x`} {
		if _, err := pool.Exec(ctx, ddl); err == nil || !strings.Contains(err.Error(), "denied") && !strings.Contains(err.Error(), "must be owner") {
			t.Errorf("%s as the runtime role: %v, want it refused", ddl, err)
		}
	}
}

// A run blocked on a lock another session holds fails within the lock
// timeout, naming the relation, and releases its stream's lock: the next
// run succeeds once the other session lets go.
func TestLockTimeoutFailsTheRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{})
	ctx := context.Background()
	pool, err := db.Open(ctx, h.url, db.WithLimits(time.Second, time.Minute, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h.runner = &sync.Runner{Pool: pool, Prefetch: 1}
	h.mustRun("cashboxes")

	other, err := pgx.Connect(ctx, h.url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx) // an analyst's LOCK, a VACUUM FULL, another tool's migration
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE erp.cashboxes IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res := h.run("cashboxes")
	if took := time.Since(start); res.Status != model.StatusFailed || took > 10*time.Second {
		t.Fatalf("run blocked by a lock: %s after %s (%v); want failed within the lock timeout", res.Status, took, res.Err)
	}
	if msg := res.Err.Error(); !strings.Contains(msg, "erp.cashboxes") || !strings.Contains(msg, "lock_timeout") {
		t.Errorf("error %q should name the relation and the lock timeout", msg)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	h.mustRun("cashboxes")
}
