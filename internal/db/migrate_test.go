package db_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
)

// Replicas that start together on an empty database take turns: every
// one of them succeeds and the schema is migrated once.
func TestConcurrentMigrations(t *testing.T) {
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
}
