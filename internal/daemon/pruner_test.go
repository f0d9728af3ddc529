package daemon

import (
	"context"
	"fmt"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestPruner documents the pruner of old bookkeeping: runs and rejected records
// past the retention, and where changes were seen past 30 days, a minute after
// start and hourly after that.
func TestPruner(t *testing.T) {
	// On a database holding old bookkeeping, nothing is pruned before First has passed
	// on the pruner's clock; then runs older than the retention go except each
	// stream's last Keep (running ones never), rejected records not seen within the
	// retention go, the counts reach the metrics, and the next pruning comes Every
	// later. Stop returns; a second Stop does nothing.
	t.Run("PrunesRunsAndRejectedRecordsPastTheRetentionOnItsClock", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dbURL := testdb.New(t)
		obs := testdb.ObserverPool(t, dbURL)
		const (
			keep      = 5
			retention = 90 * 24 * time.Hour
			first     = time.Minute
			every     = time.Hour
		)
		// Runs, inserted oldest first so that ids follow start times. Ages in
		// days; 200 is past the retention, 1 within it.
		type runs struct {
			stream, status string
			n, ageDays     int
		}
		fixture := []runs{
			{"invoices", "running", 1, 300}, // never finished: never pruned
			{"invoices", "succeeded", 30, 200},
			{"currencies", "failed", 3, 200},
			{"currencies", "succeeded", 4, 1}, // recent runs count towards keep
			{"cashboxes", "succeeded", 2, 200},
		}
		seq := 0
		for _, r := range fixture {
			for range r.n {
				seq++
				started := fmt.Sprintf("now() - interval '%d days' + interval '%d minutes'", r.ageDays, seq)
				finished := "NULL"
				if r.status != "running" {
					finished = started + " + interval '30 seconds'"
				}
				if _, err := obs.Exec(ctx, fmt.Sprintf(`INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at)
				VALUES ('default', $1, $2, %s, %s)`, started, finished), r.stream, r.status); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, ageDays := range []int{100, 100, 120, 95, 1, 0, 0} {
			if _, err := obs.Exec(ctx, `INSERT INTO erp.rejected_records (source, stream, reason, record, record_hash, rejected_at, last_seen)
			VALUES ('default', 'invoices', 'test', $1, sha256($1), now() - make_interval(days => $2 + 10), now() - make_interval(days => $2))`,
				[]byte(fmt.Sprintf(`{"id":%d}`, i)), ageDays); err != nil {
				t.Fatal(err)
			}
		}
		// Where changes were seen: 40 and 31 days ago (past the 30 days kept), 29
		// days and an hour ago.
		for _, age := range []string{"40 days", "31 days", "29 days", "1 hour"} {
			if _, err := obs.Exec(ctx, `INSERT INTO erp.change_positions (source, stream, login, kind, read_id, page, pages_from_end, changes, seen_at)
			VALUES ('default', 'invoices', 'north', 'window', 1, 1, 0, 1, now() - $1::interval)`, age); err != nil {
				t.Fatal(err)
			}
		}
		// What must stay: every stream's newest keep runs, the running one,
		// and the rejected records seen within the retention.
		survivors := func() []int64 {
			rows, err := obs.Query(ctx, `SELECT id FROM (
			SELECT id, status, row_number() OVER (PARTITION BY stream ORDER BY started_at DESC) AS rank FROM erp.sync_runs) r
			WHERE rank <= $1 OR status = 'running' ORDER BY id`, keep)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			return ids
		}
		wantRuns := survivors()
		allRuns := count(t, obs, `SELECT count(*) FROM erp.sync_runs`)
		wantPrunedRuns := allRuns - int64(len(wantRuns))
		if wantPrunedRuns != 25+2 {
			t.Fatalf("fixture: %d runs to prune, want 27 (25 invoices, 2 currencies)", wantPrunedRuns)
		}

		pools, err := db.OpenPools(ctx, dbURL, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer pools.Close()
		clock := newFakeClock()
		log, _ := testLog()
		metrics := &pruneCounts{}
		p := newPruner(prunerDeps{Pool: func() *db.Pools { return pools }, Retention: retention, Keep: keep, Every: every, First: first,
			Log: log, Clock: clock, Metrics: metrics})
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)

		clock.waitForWaiters(t, 1, "the pruner to wait for its first pruning")
		if asked := clock.Asked(); asked[0] != first {
			t.Errorf("the first pruning waits %s, want First (%s)", asked[0], first)
		}
		// Just short of First: the pruner is still blocked on the clock, so
		// nothing can have been pruned.
		clock.Advance(first - time.Second)
		if clock.Waiting() != 1 || len(metrics.get()) != 0 {
			t.Fatalf("the pruner acted before First had passed: metrics %v", metrics.get())
		}
		if n := count(t, obs, `SELECT count(*) FROM erp.sync_runs`); n != allRuns {
			t.Fatalf("%d runs before the first pruning, want %d", n, allRuns)
		}

		clock.Advance(time.Second)
		testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, "the first pruning to report", func() (bool, error) {
			return len(metrics.get()) == 3 && clock.Waiting() == 1, nil
		})
		want := []string{fmt.Sprintf("sync_runs=%d", wantPrunedRuns), "rejected_records=4", "change_positions=2"}
		if got := metrics.get(); !slices.Equal(got, want) {
			t.Errorf("Pruned calls %v, want %v", got, want)
		}
		if got := survivors(); !slices.Equal(got, wantRuns) {
			t.Errorf("runs left %v, want %v (each stream's last %d, and the running one)", got, wantRuns, keep)
		}
		if n := count(t, obs, `SELECT count(*) FROM erp.sync_runs`); n != int64(len(wantRuns)) {
			t.Errorf("%d runs left, want %d", n, len(wantRuns))
		}
		if n := count(t, obs, `SELECT count(*) FROM erp.rejected_records`); n != 3 {
			t.Errorf("%d rejected records left, want the 3 seen within the retention", n)
		}
		if n := count(t, obs, `SELECT count(*) FROM erp.change_positions WHERE seen_at > now() - interval '30 days'`); n != 2 {
			t.Errorf("%d change positions of the last 30 days left, want 2", n)
		}
		if asked := clock.Asked(); len(asked) != 2 || asked[1] != every {
			t.Errorf("waits asked %v, want [First, Every]", asked)
		}

		// Every later: prunes again, finding nothing.
		clock.Advance(every)
		testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, "the second pruning to report", func() (bool, error) {
			return len(metrics.get()) == 6 && clock.Waiting() == 1, nil
		})
		if got := metrics.get()[3:]; !slices.Equal(got, []string{"sync_runs=0", "rejected_records=0", "change_positions=0"}) {
			t.Errorf("second pruning: %v, want nothing pruned", got)
		}

		returnsWithin(t, 10*time.Second, "pruner Stop", p.Stop)
		returnsWithin(t, time.Second, "a second pruner Stop", p.Stop)
		clock.Advance(every)
		if got := metrics.get(); len(got) != 6 {
			t.Errorf("the pruner pruned after Stop: %v", got)
		}
	})

	// A pruning due while the connector has no pools yet is skipped, not a crash, and
	// the pruner waits for the next.
	t.Run("SkipsAPruningDueBeforeTheDatabase", func(t *testing.T) {
		clock := newFakeClock()
		log, _ := testLog()
		metrics := &pruneCounts{}
		p := newPruner(prunerDeps{Pool: func() *db.Pools { return nil }, Retention: time.Hour, Keep: 1, Every: time.Hour, First: time.Minute,
			Log: log, Clock: clock, Metrics: metrics})
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		clock.waitForWaiters(t, 1, "the first wait")
		clock.Advance(time.Minute)
		testutil.Eventually(t, 10*time.Second, time.Millisecond, "the pruner to wait for the next pruning", func() (bool, error) {
			return len(clock.Asked()) == 2 && clock.Waiting() == 1, nil
		})
		if got := metrics.get(); len(got) != 0 {
			t.Errorf("Pruned called without a database: %v", got)
		}
		returnsWithin(t, 10*time.Second, "pruner Stop", p.Stop)
		p.Stop()
	})
}

// pruneCounts records the pruner's Metrics.
type pruneCounts struct {
	mu    gosync.Mutex
	calls []string // "table=n", in order
}

func (p *pruneCounts) Pruned(table string, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("%s=%d", table, n))
}

func (p *pruneCounts) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}
