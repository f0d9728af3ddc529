package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
)

func TestPrune(t *testing.T) {
	// Retention removes runs older than it except the last ones of each
	// stream (and never a running one), and rejected records not rejected
	// again within it.
	t.Run("KeepsEachStreamsLastRunsRunningOnesAndRejectionsSeenAgain", func(t *testing.T) {
		pool, _ := testdb.Pool(t)
		ctx := context.Background()
		// invoices: 30 runs, a day apart, the newest today; currencies: 3 old
		// runs only; cashboxes: an old run still marked running.
		if _, err := pool.Exec(ctx, `
INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at)
SELECT 's', 'invoices', 'succeeded', now() - make_interval(days => d), now() - make_interval(days => d) + interval '1 minute'
FROM generate_series(29, 0, -1) AS d;
INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at)
SELECT 's', 'currencies', 'failed', now() - make_interval(days => 200 + d), now() - make_interval(days => 200 + d)
FROM generate_series(2, 0, -1) AS d;
INSERT INTO erp.sync_runs (source, stream, status, started_at) VALUES ('s', 'cashboxes', 'running', now() - interval '300 days');
INSERT INTO erp.rejected_records (source, stream, reason, record, record_hash, rejected_at, last_seen)
VALUES ('s', 'invoices', 'old', '\x01', '\x01', now() - interval '100 days', now() - interval '95 days'),
       ('s', 'invoices', 'seen again', '\x02', '\x02', now() - interval '100 days', now() - interval '1 day');`); err != nil {
			t.Fatal(err)
		}
		runs, rejected, err := db.Prune(ctx, pool, 10*24*time.Hour, 5)
		if err != nil {
			t.Fatal(err)
		}
		// invoices: the runs of 11..29 days ago finished before the 10 days
		// of retention (the one of 10 days ago a minute after): 19 go; the
		// last 5 would be kept anyway. currencies: its 3 are its last 5:
		// kept. cashboxes: still running: kept.
		if runs != 19 || rejected != 1 {
			t.Errorf("pruned %d runs, %d rejected records; want 19 and 1", runs, rejected)
		}
		var left map[string]int64
		rows, err := pool.Query(ctx, `SELECT stream, count(*) FROM erp.sync_runs GROUP BY stream`)
		if err != nil {
			t.Fatal(err)
		}
		left = map[string]int64{}
		for rows.Next() {
			var s string
			var n int64
			rows.Scan(&s, &n)
			left[s] = n
		}
		if left["invoices"] != 11 || left["currencies"] != 3 || left["cashboxes"] != 1 {
			t.Errorf("runs left %v; want invoices 11, currencies 3, cashboxes 1", left)
		}
		// Pruning again removes nothing more.
		if runs, rejected, err := db.Prune(ctx, pool, 10*24*time.Hour, 5); err != nil || runs+rejected != 0 {
			t.Errorf("second prune: %d, %d, %v", runs, rejected, err)
		}
	})
}
