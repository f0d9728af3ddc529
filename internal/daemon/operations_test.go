package daemon

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// With more streams than run slots (and so than run connections) and a
// slow ERP, /readyz stays 200 all along: runs never take the connections
// it uses. Runs never exceed the slots, and the ticks that found none free
// are counted.
func TestReadyzWithMoreStreamsThanConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	h.maxRuns = 2
	sim, simURL := newSim(t, erpsim.Options{Invoices: 200, PageSizeCap: 50})
	streams := []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations", "journal_entries",
		"payment_vouchers", "receipt_vouchers", "messaging_queue"}
	// A request budget larger than the slots: the slots are what is tested.
	h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: streams, schedule: "@every 1s", maxRequests: 8})
	h.waitReady(30 * time.Second)
	sim.SetLatency(700 * time.Millisecond)

	var bad atomic.Int64
	var maxConns atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if code := getStatusCode(c, h.base+"/readyz"); code != http.StatusOK {
				bad.Add(1)
			}
			var n int64
			// Runs in progress: sessions holding a stream lock (erpsync's
			// two-key advisory locks, first key "ERPS").
			if err := h.pool.QueryRow(context.Background(), `SELECT count(DISTINCT pid) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = x'45525053'::int AND objsubid = 2 AND granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err == nil && n > maxConns.Load() {
				maxConns.Store(n)
			}
		}
	}()
	h.waitFor(40*time.Second, "every stream to succeed twice under a slow ERP", func() (bool, error) {
		for _, s := range streams {
			if rs, err := h.queryRuns("default", s); err != nil || countStatus(rs, model.StatusSucceeded) < 2 {
				return false, err
			}
		}
		return true, nil
	})
	close(stop)
	<-done
	if n := bad.Load(); n != 0 {
		t.Errorf("/readyz answered other than 200 %d times while runs used every slot", n)
	}
	if n := maxConns.Load(); n > 2 || n < 1 {
		t.Errorf("%d sessions held stream locks at once, want 1 or 2 (the run slots)", n)
	}
	fams, _ := h.scrape()
	if v, _ := metricValue(fams, "erpsync_runs_skipped_total", map[string]string{"reason": "capacity"}); v < 1 {
		t.Errorf("erpsync_runs_skipped_total{reason=capacity} = %v: 8 streams every second, each run 0.7 s or more, 2 slots: ticks must have found none free", v)
	}
	h.checkNoOverlap("default", streams...)
}

// A stream whose lock another process holds is skipped and counted, and
// a holder that has kept it more than three intervals is reported in
// /readyz's detail (which stays 200) and in the metric of how long.
func TestLockHeldElsewhereIsReported(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	_, simURL := newSim(t, erpsim.Options{Invoices: 60, PageSizeCap: 50})
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if release, err := db.LockStream(ctx, holder, "default", "invoices", model.KindSweep); err != nil || release == nil {
		t.Fatalf("taking the lock: %v", err)
	}
	// What a holder that started an hour ago left in sync_runs.
	if _, err := holder.Exec(ctx, `INSERT INTO erp.sync_runs (source, stream, status, started_at, host, pid)
		VALUES ('default', 'invoices', 'running', now() - interval '1 hour', 'other-host', 4242)`); err != nil {
		t.Fatal(err)
	}
	h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: []string{"invoices", "currencies"}, schedule: "@every 1s"})
	h.waitFor(30*time.Second, "two skipped invoice runs and /readyz naming the holder", func() (bool, error) {
		fams, _ := h.scrape()
		v, _ := metricValue(fams, "erpsync_runs_skipped_total", map[string]string{"stream": "invoices", "reason": "locked"})
		_, body, _ := h.get("/readyz")
		return v >= 2 && strings.Contains(body, "warning: default/invoices: lock held by other-host (pid 4242)"), nil
	})
	code, body, _ := h.get("/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready") {
		t.Errorf("/readyz = %d %q; a lock held elsewhere is a warning, not unreadiness", code, body)
	}
	fams, _ := h.scrape()
	if v := h.metric(fams, "erpsync_lock_held_by_other_seconds", map[string]string{"stream": "invoices"}); v < 3500 {
		t.Errorf("erpsync_lock_held_by_other_seconds = %v, want about an hour", v)
	}
	if !strings.Contains(h.logs.String(), "held the stream's lock too long") {
		t.Errorf("no warning in the log")
	}
	if rs := h.runs("default", "invoices"); len(rs) != 1 {
		t.Errorf("invoices runs %v: the daemon must not run a stream whose lock is held", rs)
	}
	// Once the holder lets go, the stream runs and the warning goes.
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	h.waitFor(30*time.Second, "the invoices run once the lock is free", func() (bool, error) {
		rs, err := h.queryRuns("default", "invoices")
		return countStatus(rs, model.StatusSucceeded) >= 1, err
	})
	h.waitFor(10*time.Second, "the warning to go", func() (bool, error) {
		_, body, _ := h.get("/readyz")
		return !strings.Contains(body, "warning"), nil
	})
}

func getStatusCode(c *http.Client, u string) int {
	resp, err := c.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
