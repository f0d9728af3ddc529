package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
)

// TestDaemon documents Run: the services started in order and stopped in reverse,
// as `erpsync run` runs them, around a simulated ERP and a database of the test's
// own.
func TestDaemon(t *testing.T) {
	// Cancelled while an invoice page is being committed: that page commits, no page
	// after it does, the run ends cancelled, the token is revoked, Run returns nil
	// without the grace period running out, and /readyz says 503 as soon as shutdown
	// begins.
	//
	// To have a page surely in flight when the cancellation comes, the test holds the
	// invoices checkpoint row (FOR UPDATE): the next page's commit waits on it. The
	// test lets it go once the stop has reached the runs, which another stream shows:
	// its run, waiting on an ERP that does not answer, ends cancelled at once when the
	// runs are told to stop.
	//
	// The sweep is the second one, as in a running daemon (the first, into an empty
	// table, is a bulk load whose group commits take several pages at a time).
	t.Run("LetsTheCommitInFlightFinishWhenStopped", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		const (
			pageSize = 50
			invoices = 2000 // 40 pages of ~150 ms each
			grace    = 4 * time.Second
		)
		ctx := context.Background()
		h := newHarness(t)
		sim, simURL := newSim(t, erpsim.Options{Invoices: invoices, PageSizeCap: pageSize})
		all := sim.Invoices()
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:pageSize] })
		hangingRoute(t, sim, "/accounts/api/cashboxes/")
		// Two requests at once: the hanging cashboxes run must not hold up the
		// invoice runs.
		h.start("", grace, source{name: "default", baseURL: simURL, pageSize: pageSize, maxRequests: 2,
			streams: []string{"invoices", "cashboxes"}})
		h.waitReady(30 * time.Second)
		h.waitFor(30*time.Second, "the first (one-page) invoice sweep to complete", func() (bool, error) {
			rs, err := h.queryRuns("default", "invoices")
			return err == nil && countStatus(rs, model.StatusSucceeded) >= 1, err
		})
		sim.MutateInvoices(func([]erpsim.Invoice) []erpsim.Invoice { return all })
		sim.SetLatency(150 * time.Millisecond)
		stopPoll := h.pollReadyz()
		h.waitFor(40*time.Second, "the second invoice sweep to commit 3 pages", func() (bool, error) {
			cp, ok, err := h.checkpoint("default", "invoices")
			return ok && cp.sweepID != nil && cp.pages >= 3, err
		})

		// Hold the checkpoint row; what it says now is what was committed
		// when the cancellation comes.
		tx, err := h.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var at checkpointRow
		if err := tx.QueryRow(ctx, checkpointQuery+` FOR UPDATE`).Scan(&at.sweepID, &at.pages, &at.rows, &at.cursor); err != nil {
			t.Fatal(err)
		}
		holder := tx.Conn().PgConn().PID()
		h.waitFor(30*time.Second, "the next page's commit to wait on the checkpoint row", func() (bool, error) {
			var n int
			err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
			return n > 0, err
		})
		if at.sweepID == nil || at.pages < 3 || at.pages >= invoices/pageSize {
			t.Fatalf("checkpoint at the cancellation: %v; want the second sweep under way", at)
		}
		cancelAt := time.Now()
		h.cancel()
		h.waitFor(30*time.Second, "the stop to reach the runs (the hanging cashboxes run cancelled)", func() (bool, error) {
			rs, err := h.queryRuns("default", "cashboxes")
			return err == nil && countStatus(rs, model.StatusCancelled) == 1, err
		})
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		h.stop(grace + 15*time.Second)
		took := time.Since(cancelAt)
		samples := stopPoll()
		t.Logf("Run returned %s after the cancellation; checkpoint then: %v", took.Round(time.Millisecond), at)
		if h.runErr != nil {
			t.Errorf("Run returned %v, want nil", h.runErr)
		}
		// The page commits within the grace period, so Run returns well
		// within it; 2 s of slack for a loaded CI machine under -race.
		if took > grace+2*time.Second {
			t.Errorf("Run took %s to return; the grace period is %s", took, grace)
		}
		if strings.Contains(h.logs.String(), "grace period over") {
			t.Errorf("the grace period ran out: the page in flight was aborted, not committed")
		}

		// The page in flight committed, and no page after it.
		var after checkpointRow
		if err := h.pool.QueryRow(ctx, checkpointQuery).Scan(&after.sweepID, &after.pages, &after.rows, &after.cursor); err != nil {
			t.Fatal(err)
		}
		if after.sweepID == nil || *after.sweepID != *at.sweepID || after.pages != at.pages+1 || after.rows != at.rows+pageSize ||
			after.cursor == at.cursor || after.cursor == "" {
			t.Errorf("checkpoint after the shutdown: %v; at the cancellation: %v; want the same sweep one page (%d rows) on, with the next page's cursor",
				after, at, pageSize)
		}
		// The one-page sweep may have run more than once before the ERP grew.
		rs := h.runs("default", "invoices")
		if len(rs) < 2 || countStatus(rs[:len(rs)-1], model.StatusSucceeded) != len(rs)-1 {
			t.Fatalf("invoices runs %v; want the one-page sweeps, succeeded, then the interrupted one", rs)
		}
		run := rs[len(rs)-1]
		if run.status != model.StatusCancelled || run.finished == nil || run.pages != after.pages {
			t.Errorf("invoices run %v; want cancelled and finished, with the checkpoint's %d pages", run, after.pages)
		}
		// The first page of the second sweep holds the first sweep's rows.
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE source = 'default'`); n != after.rows || n != after.pages*pageSize {
			t.Errorf("erp.invoices has %d rows; want the %d of the checkpoint's %d whole pages", n, after.rows, after.pages)
		}
		if got := sim.Revocations(); got != 1 {
			t.Errorf("the ERP saw %d token revocations, want 1", got)
		}
		if got := sim.ActiveTokens(); got != 0 {
			t.Errorf("%d tokens still active after the shutdown", got)
		}
		for _, s := range []string{"invoices", "cashboxes"} {
			for _, r := range h.runs("default", s) {
				if r.status == model.StatusRunning || r.status == model.StatusFailed {
					t.Errorf("run %v after a graceful shutdown", r)
				}
			}
		}

		// /readyz: 200 before, 503 once shutdown began, never 200 again.
		var before200, after503 int
		first503 := -1
		for i, s := range samples {
			if s.at.Before(cancelAt) && s.code == http.StatusOK {
				before200++
			}
			if !s.at.Before(cancelAt) && s.code == http.StatusServiceUnavailable {
				after503++
				if first503 < 0 {
					first503 = i
				}
			}
		}
		if before200 == 0 {
			t.Errorf("/readyz never answered 200 before the shutdown")
		}
		if after503 == 0 {
			t.Errorf("/readyz never answered 503 between the cancellation and Run's return (%d samples)", len(samples))
		}
		if first503 >= 0 {
			for _, s := range samples[first503:] {
				if s.code == http.StatusOK {
					t.Errorf("/readyz answered 200 at %s, after it had said 503 for the shutdown", s.at.Format("15:04:05.000"))
					break
				}
			}
		}
		// Read from the registry: the server is gone.
		mfs, err := h.m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]*dto.MetricFamily{}
		for _, f := range mfs {
			fams[f.GetName()] = f
		}
		// (erpsync_ready is not checked here: a /readyz check in flight when
		// shutdown begins can set it back to 1, see TestEndpoints's
		// KeepErpsyncReadyAt0OnceShutdownBegins.)
		if v, _ := metricValue(fams, "erpsync_runs_total", map[string]string{"stream": "invoices", "status": "cancelled"}); v != 1 {
			t.Errorf("erpsync_runs_total{stream=invoices,status=cancelled} = %v, want 1", v)
		}
		logs := h.logs.String()
		for _, want := range []string{"shutting down", "erpsync stopped"} {
			if !strings.Contains(logs, want) {
				t.Errorf("the log has no %q line", want)
			}
		}
	})

	// Like LetsTheCommitInFlightFinishWhenStopped, but the sweep in flight was started
	// by a cron tick instead of the start-up run. The grace period must bound the
	// shutdown all the same.
	t.Run("BoundsTheStopOfATickStartedSweepByTheGracePeriod", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		const (
			pageSize = 50
			grace    = 2 * time.Second
		)
		h := newHarness(t)
		sim, simURL := newSim(t, erpsim.Options{Invoices: pageSize, PageSizeCap: pageSize})
		h.start("", grace, source{name: "default", baseURL: simURL, pageSize: pageSize, streams: []string{"invoices"}})
		// The start-up run syncs the one page at once.
		h.waitFor(30*time.Second, "the start-up invoices run to succeed", func() (bool, error) {
			rs, err := h.queryRuns("default", "invoices")
			return err == nil && countStatus(rs, model.StatusSucceeded) >= 1, err
		})
		// Now the ERP has 40 slow pages: the next sweep is started by a tick.
		big := erpsim.New(erpsim.Options{Invoices: 40 * pageSize, Seed: 7}).Invoices()
		sim.MutateInvoices(func([]erpsim.Invoice) []erpsim.Invoice { return big })
		sim.SetLatency(150 * time.Millisecond)
		h.waitFor(30*time.Second, "a tick-started sweep to commit 3 pages", func() (bool, error) {
			cp, ok, err := h.checkpoint("default", "invoices")
			return ok && cp.sweepID != nil && cp.pages >= 3, err
		})
		took := h.stop(60 * time.Second)
		t.Logf("Run returned %s after the cancellation", took.Round(time.Millisecond))
		if h.runErr != nil {
			t.Errorf("Run returned %v, want nil", h.runErr)
		}
		if took > grace+time.Second {
			t.Errorf("Run took %s to return; the grace period is %s", took, grace)
		}
		rs := h.runs("default", "invoices")
		if last := rs[len(rs)-1]; last.status != model.StatusCancelled {
			t.Errorf("the tick-started run ended %v; want cancelled", last)
		}
		if got := sim.Revocations(); got != 1 {
			t.Errorf("the ERP saw %d token revocations, want 1", got)
		}
	})

	// With no prefetch, the page in flight is a fetch the ERP does not answer; the
	// grace period bounds the wait, then the run is aborted, recorded as
	// cancelled, and nothing half-written stays behind.
	t.Run("AbortsAFetchThatOutlastsTheGracePeriod", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		const (
			pageSize = 50
			grace    = 700 * time.Millisecond
		)
		h := newHarness(t)
		h.prefetch = 0
		sim, simURL := newSim(t, erpsim.Options{Invoices: 10 * pageSize, PageSizeCap: pageSize})
		// Every invoice page after the first hangs for 30 s (or until the
		// client gives up).
		sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == invoicesPath && r.URL.Query().Get("cursor") != "" {
				select {
				case <-time.After(30 * time.Second):
				case <-r.Context().Done():
					return true
				}
			}
			return false
		})
		h.start("", grace, source{name: "default", baseURL: simURL, pageSize: pageSize, streams: []string{"invoices"}})
		h.waitFor(30*time.Second, "the first invoice page to commit and the second to be asked for", func() (bool, error) {
			cp, ok, err := h.checkpoint("default", "invoices")
			if err != nil || !ok || cp.sweepID == nil || cp.pages < 1 {
				return false, err
			}
			return slices.ContainsFunc(sim.Requests(), func(r erpsim.Request) bool {
				return r.Path == invoicesPath && strings.Contains(r.RawQuery, "cursor=")
			}), nil
		})
		took := h.stop(grace + 15*time.Second)
		t.Logf("Run returned %s after the cancellation (grace %s)", took.Round(time.Millisecond), grace)
		if h.runErr != nil {
			t.Errorf("Run returned %v, want nil", h.runErr)
		}
		if took < grace || took > grace+3*time.Second {
			t.Errorf("Run took %s to return; want the grace period (%s), then an abort", took, grace)
		}
		rs := h.runs("default", "invoices")
		if len(rs) != 1 || rs[0].status != model.StatusCancelled || rs[0].finished == nil {
			t.Errorf("invoices runs %v; want one, cancelled and finished", rs)
		}
		cp, _, err := h.checkpoint("default", "invoices")
		if err != nil {
			t.Fatal(err)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE source = 'default'`); n != pageSize || cp.rows != pageSize || cp.pages != 1 {
			t.Errorf("erp.invoices has %d rows, checkpoint %d pages / %d rows; want the one committed page", n, cp.pages, cp.rows)
		}
		if got := sim.Revocations(); got != 1 {
			t.Errorf("the ERP saw %d revocations, want 1", got)
		}
		if !strings.Contains(h.logs.String(), "grace period over") {
			t.Errorf("the log does not say the grace period ran out")
		}
	})

	// When the endpoints' server fails, Run returns an error; it must not leave
	// the scheduler running behind it nor the ERP token unrevoked.
	t.Run("StopsEveryServiceWhenItsHTTPServerFails", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		h := newHarness(t)
		sim, simURL := newSim(t, erpsim.Options{Invoices: 10, PageSizeCap: 50})
		h.start("", 5*time.Second, source{name: "default", baseURL: simURL, streams: []string{"currencies"}})
		h.waitReady(30 * time.Second)
		h.waitFor(30*time.Second, "a succeeded currencies run", func() (bool, error) {
			rs, err := h.queryRuns("default", "currencies")
			return err == nil && countStatus(rs, model.StatusSucceeded) >= 1, err
		})
		h.ln.Close() // the server's Serve fails
		select {
		case <-h.exited:
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after its HTTP server failed")
		}
		if h.runErr == nil {
			t.Errorf("Run returned nil after its HTTP server failed, want an error")
		}
		runsTotal := func() float64 {
			mfs, err := h.m.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			fams := map[string]*dto.MetricFamily{}
			for _, f := range mfs {
				fams[f.GetName()] = f
			}
			v, _ := metricValue(fams, "erpsync_runs_total", nil)
			return v
		}
		before := runsTotal()
		// Observation window: two ticks of the 1 s schedule.
		time.Sleep(2500 * time.Millisecond)
		if after := runsTotal(); after != before {
			t.Errorf("%v runs finished after Run had returned: the scheduler is still running", after-before)
		}
		if got := sim.Revocations(); got != 1 {
			t.Errorf("the ERP saw %d revocations after Run returned, want 1", got)
		}
	})

	// A long run logs a progress line at INFO every so often (the daemon's
	// ProgressEvery): pages, rows, rows a second, and that it is the first load.
	t.Run("LogsTheProgressOfALongRunEverySoOften", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		h := newHarness(t)
		h.progressEvery = 200 * time.Millisecond
		h.prefetch = 0 // a commit a page (a bulk load groups the pages fetched ahead, a second at most)
		_, simURL := newSim(t, erpsim.Options{Invoices: 1000, PageSizeCap: 50, Latency: 40 * time.Millisecond})
		h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: []string{"invoices"}, schedule: "@every 1h"})
		h.waitFor(40*time.Second, "the first load of invoices to finish", func() (bool, error) {
			return strings.Contains(h.logs.String(), `msg="sync finished" source=default stream=invoices first_load=true`), nil
		})
		var progress []string
		for _, line := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(line, `msg="sync in progress"`) {
				progress = append(progress, line)
			}
		}
		if len(progress) < 2 {
			t.Fatalf("%d progress lines of a first load of 20 pages at 40 ms each, one every 200 ms; want 2 or more", len(progress))
		}
		for _, want := range []string{"level=INFO", "stream=invoices", "first_load=true", "pages=", "rows=", "rows_per_second="} {
			if !strings.Contains(progress[0], want) {
				t.Errorf("progress line %q lacks %q", progress[0], want)
			}
		}
	})

	// A stream that panics once is a failed run mentioning the panic; the daemon
	// lives on, runs the stream again on a later tick, and the other streams are
	// not disturbed.
	t.Run("RecordsAPanickingStreamAsAFailedRunAndRunsItAgain", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		var panicCalls atomic.Int64
		h := newHarness(t)
		h.extra = append(h.extra, panicStream(&panicCalls))
		if _, err := h.pool.Exec(context.Background(), `CREATE TABLE erp.test_panics (LIKE erp.cashboxes INCLUDING ALL)`); err != nil {
			t.Fatal(err)
		}
		_, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		others := []string{"invoices", "currencies", "cashboxes"}
		h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: append(slices.Clone(others), "test_panics")})

		var failedID int64
		h.waitFor(40*time.Second, "test_panics to fail once, then succeed, while the other streams succeed twice", func() (bool, error) {
			rs, err := h.queryRuns("default", "test_panics")
			if err != nil {
				return false, err
			}
			failedID = 0
			okAfter := false
			for _, r := range rs {
				if r.status == model.StatusFailed && failedID == 0 {
					failedID = r.id
				}
				if r.status == model.StatusSucceeded && failedID != 0 && r.id > failedID {
					okAfter = true
				}
			}
			if !okAfter {
				return false, nil
			}
			for _, s := range others {
				rs, err := h.queryRuns("default", s)
				if err != nil || countStatus(rs, model.StatusSucceeded) < 2 {
					return false, err
				}
			}
			return true, nil
		})

		rs := h.runs("default", "test_panics")
		first := rs[0]
		if first.id != failedID || first.status != model.StatusFailed || first.finished == nil ||
			!strings.Contains(first.errText, "panic") || !strings.Contains(first.errText, "deliberate panic") {
			t.Errorf("first test_panics run: %v; want failed, finished, with an error mentioning the panic", first)
		}
		if n := countStatus(rs, model.StatusFailed); n != 1 {
			t.Errorf("test_panics has %d failed runs, want 1 (only the first call panics): %v", n, rs)
		}
		if n := panicCalls.Load(); n < 2 {
			t.Errorf("children read %d times, want >= 2", n)
		}
		if got := h.count(`SELECT count(*) FROM erp.test_panics WHERE source = 'default'`); got == 0 {
			t.Errorf("erp.test_panics is empty after a succeeded run")
		}
		for _, s := range others {
			for _, r := range h.runs("default", s) {
				if r.status != model.StatusSucceeded && r.status != model.StatusRunning {
					t.Errorf("stream %s: run %v; the panic of another stream must not disturb it", s, r)
				}
			}
		}
		if !h.running() {
			t.Fatalf("the daemon stopped after a stream panicked")
		}
		h.checkNoOverlap("default", append(slices.Clone(others), "test_panics")...)
		if code, body, err := h.get("/healthz"); code != http.StatusOK {
			t.Errorf("/healthz after the panic: %d %q %v", code, body, err)
		}
		if code, body, err := h.get("/readyz"); code != http.StatusOK {
			t.Errorf("/readyz after the panic: %d %q %v", code, body, err)
		}
		fams, _ := h.scrape()
		if v := h.metric(fams, "erpsync_runs_total", map[string]string{"stream": "test_panics", "status": "failed"}); v != 1 {
			t.Errorf("erpsync_runs_total{stream=test_panics,status=failed} = %v, want 1", v)
		}
		if v := h.metric(fams, "erpsync_runs_total", map[string]string{"stream": "test_panics", "status": "succeeded"}); v < 1 {
			t.Errorf("erpsync_runs_total{stream=test_panics,status=succeeded} = %v, want >= 1", v)
		}
		if !strings.Contains(h.logs.String(), "panic in stream") {
			t.Errorf("the daemon's log does not mention the panic")
		}
		h.stop(30 * time.Second)
		if h.runErr != nil {
			t.Errorf("Run returned %v, want nil", h.runErr)
		}
	})

	// `erpsync status`, the analysts' view erp.stream_freshness and the metric tell
	// the same time for a list stream and for a snapshot stream: when their data were
	// last complete.
	t.Run("TellsOneFreshnessInStatusTheViewAndTheMetric", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		h := newHarness(t)
		_, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		streamNames := []string{"invoices", "balance_sheet"}
		h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: streamNames, schedule: "@every 1h"})
		h.waitFor(30*time.Second, "a succeeded run of each stream", func() (bool, error) {
			for _, s := range streamNames {
				if rs, err := h.queryRuns("default", s); err != nil || countStatus(rs, model.StatusSucceeded) < 1 {
					return false, err
				}
			}
			return true, nil
		})
		fams, _ := h.scrape()
		h.stop(30 * time.Second)

		status, err := db.LoadStatus(context.Background(), h.pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range streamNames {
			var view float64
			if err := h.pool.QueryRow(context.Background(), `SELECT extract(epoch FROM last_sweep_completed_at)::float8
			FROM erp.stream_freshness WHERE source = 'default' AND stream = $1`, s).Scan(&view); err != nil {
				t.Fatalf("%s: erp.stream_freshness: %v", s, err)
			}
			metric := h.metric(fams, "erpsync_last_success_timestamp_seconds", map[string]string{"source": "default", "stream": s})
			var fromStatus float64
			for _, st := range status {
				if st.Source == "default" && st.Stream == s && st.LastSuccess != nil {
					fromStatus = float64(st.LastSuccess.UnixNano()) / 1e9
				}
			}
			if math.Abs(view-metric) > 1e-3 || math.Abs(view-fromStatus) > 1e-3 {
				t.Errorf("%s: freshness differs: view %.6f, metric %.6f, status %.6f", s, view, metric, fromStatus)
			}
		}
	})
}

// panicStream writes the cashboxes into erp.test_panics as the cashboxes
// stream does, one child per cashbox listed, and panics in its first.
func panicStream(calls *atomic.Int64) sync.Stream {
	table := streams.Cashboxes().Table
	table.Name = "test_panics"
	return &sync.Fanout[[]byte]{
		Info: sync.Info{Name: "test_panics", Table: table},
		Parents: sync.ListedParents(erp.ListRequest{Path: "/accounts/api/cashboxes/"}, func(it sync.Item) ([]byte, bool) {
			return bytes.Clone(it.Raw), true
		}),
		Child: func(_ context.Context, r *sync.Run, raw []byte) (sync.Child, error) {
			if calls.Add(1) == 1 {
				panic("test_panics: deliberate panic in a child")
			}
			rec, err := erp.ParseRecord(raw)
			if err != nil {
				return sync.Child{}, err
			}
			row, err := table.Row(rec, raw, nil, nil)
			if err != nil {
				return sync.Child{}, err
			}
			return sync.Child{Step: &sync.Step{Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
				return r.Upsert(ctx, tx, table, []db.Row{row})
			}}}, nil
		},
	}
}

// readyzSample is one answer of /readyz during a shutdown.
type readyzSample struct {
	at   time.Time // when the request was sent
	code int       // 0: no answer
}

// pollReadyz asks /readyz every few milliseconds until the returned stop
// is called; stop returns the answers.
func (h *harness) pollReadyz() (stop func() []readyzSample) {
	var mu gosync.Mutex
	var out []readyzSample
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			at := time.Now()
			code := 0
			if resp, err := c.Get(h.base + "/readyz"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			out = append(out, readyzSample{at: at, code: code})
			mu.Unlock()
		}
	}()
	stopFn := gosync.OnceValue(func() []readyzSample {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return out
	})
	h.t.Cleanup(func() { stopFn() })
	return stopFn
}

// hangingRoute makes sim hold every request for path without answering,
// until the client gives up or the test ends (before the simulator's
// server closes: its Close waits for handlers).
func hangingRoute(t *testing.T, sim *erpsim.Sim, path string) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != path {
			return false
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})
}

// checkpointRow is a stream's checkpoint as a page commit leaves it.
type checkpointRow struct {
	sweepID     *int64
	pages, rows int64
	cursor      string
}

func (c checkpointRow) String() string {
	sweep := "-"
	if c.sweepID != nil {
		sweep = fmt.Sprint(*c.sweepID)
	}
	return fmt.Sprintf("sweep %s, %d pages, %d rows, cursor %q", sweep, c.pages, c.rows, c.cursor)
}

const checkpointQuery = `SELECT sweep_id, pages, rows, coalesce(cursor, '') FROM erp.sync_checkpoints
WHERE source = 'default' AND stream = 'invoices'`
