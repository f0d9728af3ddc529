package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestRun documents `erpsync run` as the real binary runs it, against the
// simulator and a database of the test's own: replicas that take turns on one
// warehouse, and a SIGTERM that ends runs within the shutdown timeout.
func TestRun(t *testing.T) {
	// Two `erpsync run` processes on one warehouse, one killed mid-sweep with SIGKILL
	// and the other stopped with SIGTERM. The stream locks must make the replicas take
	// turns: no two runs of one stream overlap, the survivor closes the dead one's
	// runs as abandoned only after it died, resumes its sweep, and the warehouse ends
	// exact.
	t.Run("TakesTurnsWithAReplicaAndResumesWhatAKilledOneLeft", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const invoices = 600

		sim := erpsim.New(erpsim.Options{Invoices: invoices, PageSizeCap: pageSize, Latency: 20 * time.Millisecond})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		dbURL := testdb.New(t)
		pool := testdb.ObserverPool(t, dbURL)

		apps := []string{"erpsync-replica-1", "erpsync-replica-2"}
		procs := make([]*process, 2)
		addrs := make([]string, 2)
		started := time.Now()
		for i := range procs {
			addrs[i] = freeAddr(t)
			env := baseEnv(withAppName(t, dbURL, apps[i]), srv.URL,
				"ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(pageSize),
				"ERPSYNC_SCHEDULE=@every 1s",
				"ERPSYNC_HTTP_ADDR="+addrs[i],
			)
			procs[i] = startDaemon(t, ctx, bin, env, i+1)
		}
		pidOf := map[int]int{procs[0].cmd.Process.Pid: 0, procs[1].cmd.Process.Pid: 1}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		pollUntil(t, ctx, 30*time.Second, 50*time.Millisecond, "both replicas' /readyz to answer 200", procs, func() (bool, error) {
			return getStatus(hc, "http://"+addrs[0]+"/readyz") == 200 && getStatus(hc, "http://"+addrs[1]+"/readyz") == 200, nil
		})

		// Both replicas run for a while: ~6 s of 1-second ticks, until each has
		// won the lock of some stream and every stream has succeeded twice.
		pollUntil(t, ctx, 40*time.Second, 50*time.Millisecond, "6 s of runs, with succeeded runs by both replicas", procs, func() (bool, error) {
			if time.Since(started) < 6*time.Second {
				return false, nil
			}
			runs, err := loadDaemonRuns(ctx, pool)
			if err != nil {
				return false, err
			}
			return len(succeededBy(runs, procs[0].cmd.Process.Pid, time.Time{})) > 0 &&
				len(succeededBy(runs, procs[1].cmd.Process.Pid, time.Time{})) > 0 &&
				everyStream(succeededBy(runs, 0, time.Time{}), 2), nil
		})

		// Kill the replica that is in the middle of an invoice sweep (pages 2
		// to 8 of 12 committed: several pages to go), so it leaves a run
		// 'running' and a sweep half done.
		var killedRunID, sweepAtKill int64
		var killedPid int
		pollUntil(t, ctx, 20*time.Second, 2*time.Millisecond, "an invoice sweep in progress", procs, func() (bool, error) {
			err := pool.QueryRow(ctx, `
SELECT r.id, r.pid, c.sweep_id FROM erp.sync_runs r JOIN erp.sync_checkpoints c ON c.source = r.source AND c.stream = r.stream
WHERE r.source = 'default' AND r.stream = 'invoices' AND r.status = 'running'
  AND c.sweep_id IS NOT NULL AND c.pages BETWEEN 2 AND 8`).Scan(&killedRunID, &killedPid, &sweepAtKill)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			return err == nil, err
		})
		k, ok := pidOf[killedPid]
		if !ok {
			t.Fatalf("the running invoices run %d has pid %d, which is neither replica's (%v)", killedRunID, killedPid, pidOf)
		}
		killed, survivor := procs[k], procs[1-k]
		killAt := time.Now()
		if err := killed.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		select {
		case <-killed.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("replica #%d did not die after SIGKILL", killed.n)
		}
		var ee *exec.ExitError
		if !errors.As(killed.err, &ee) || ee.Exited() {
			t.Fatalf("replica #%d: want death by SIGKILL, got %v", killed.n, killed.err)
		}
		sessionsGone(t, ctx, pool, apps[k])
		// The dead replica's run stays 'running' until the survivor, holding
		// the lock, closes it (which may have happened already).
		var killedStatus, killedErr string
		if err := pool.QueryRow(ctx, `SELECT status, coalesce(error, '') FROM erp.sync_runs WHERE id = $1`, killedRunID).Scan(&killedStatus, &killedErr); err != nil {
			t.Fatal(err)
		}
		if killedStatus != "running" && !(killedStatus == "failed" && strings.Contains(killedErr, "abandoned")) {
			t.Fatalf("after the kill, the killed invoices run %d is %q (%q); want running or abandoned (the kill missed the sweep)",
				killedRunID, killedStatus, killedErr)
		}
		t.Logf("killed replica #%d (pid %d) %s after start, in invoices run %d of sweep %d",
			killed.n, killedPid, killAt.Sub(started).Round(time.Millisecond), killedRunID, sweepAtKill)

		// The survivor takes over: it closes the dead replica's runs and keeps
		// every stream succeeding for ~5 s.
		survivorPid := survivor.cmd.Process.Pid
		pollUntil(t, ctx, 40*time.Second, 50*time.Millisecond, "the survivor to take over every stream for 5 s", []*process{survivor}, func() (bool, error) {
			if time.Since(killAt) < 5*time.Second {
				return false, nil
			}
			runs, err := loadDaemonRuns(ctx, pool)
			if err != nil {
				return false, err
			}
			for _, r := range runs {
				if r.id == killedRunID && r.status == "running" {
					return false, nil
				}
			}
			return everyStream(succeededBy(runs, survivorPid, killAt), 2), nil
		})
		if code := getStatus(hc, "http://"+addrs[1-k]+"/readyz"); code != 200 {
			t.Errorf("the survivor's /readyz = %d, want 200", code)
		}

		took := survivor.stop(t, syscall.SIGTERM, 25*time.Second) // default grace 20s
		t.Logf("the survivor exited %s after SIGTERM", took.Round(time.Millisecond))
		if survivor.err != nil {
			t.Errorf("the survivor exited with %v after SIGTERM, want exit code 0", survivor.err)
		}
		for _, want := range []string{"shutting down", "erpsync stopped"} {
			if !hasMessage(survivor, want) {
				t.Errorf("the survivor logged no %q line", want)
			}
		}
		if !hasMessage(survivor, "closed runs left running by a process that died") {
			t.Errorf("the survivor did not log that it closed the dead replica's runs")
		}
		checkJSONLog(t, survivor)

		// The bookkeeping.
		runs, err := loadDaemonRuns(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		pids := map[int]bool{}
		for _, r := range runs {
			pids[r.pid] = true
		}
		before := map[int]map[string]int{}
		for _, p := range procs {
			before[p.cmd.Process.Pid] = map[string]int{}
		}
		for _, r := range runs {
			if _, ours := before[r.pid]; !ours {
				t.Errorf("run %v has a pid of neither replica", r)
				continue
			}
			if r.started.Before(killAt) && r.status == "succeeded" {
				before[r.pid][r.stream]++
			}
		}
		for _, p := range procs {
			m := before[p.cmd.Process.Pid]
			t.Logf("replica #%d (pid %d) succeeded runs before the kill: %v", p.n, p.cmd.Process.Pid, m)
			if len(m) == 0 {
				t.Errorf("replica #%d ran nothing before the kill: the replicas must take turns, not one idle", p.n)
			}
		}

		byStream := map[string][]syncRun{}
		abandoned := 0
		for _, r := range runs {
			byStream[r.stream] = append(byStream[r.stream], r)
			if r.status == "running" || r.finished == nil {
				t.Errorf("run %v is still open after both replicas stopped", r)
				continue
			}
			if r.finished.Before(r.started) {
				t.Errorf("run %v finished before it started", r)
			}
			// After the kill only the survivor runs anything.
			if !r.started.Before(killAt) && r.pid != survivorPid {
				t.Errorf("run %v started after the kill by the killed replica", r)
			}
			isAbandoned := r.status == "failed" && strings.Contains(r.errText, "abandoned")
			switch {
			case isAbandoned:
				abandoned++
				// Closed by the survivor, after the death, never before: a
				// replica must not close another's live run.
				if r.pid != killedPid || !r.started.Before(killAt) || r.finished.Before(killAt) {
					t.Errorf("abandoned run %v: want a run of the killed pid %d, started before and closed after the kill at %s",
						r, killedPid, killAt.Format("15:04:05.000000"))
				}
			case r.status == "failed":
				t.Errorf("failed run %v: nothing should fail", r)
			case r.status == "cancelled":
				// Only SIGTERM cancels, and only the survivor got it.
				if r.pid != survivorPid {
					t.Errorf("cancelled run %v of the killed replica", r)
				}
			}
		}
		if abandoned == 0 {
			t.Errorf("no run was closed as abandoned; the killed replica's invoices run %d was running", killedRunID)
		}
		for _, r := range runs {
			if r.id == killedRunID && !(r.status == "failed" && strings.Contains(r.errText, "abandoned")) {
				t.Errorf("the killed replica's invoices run: %v; want failed, abandoned", r)
			}
		}
		// No two runs of one stream overlap. A run's interval [started_at,
		// finished_at) lies inside its holding of the stream's advisory lock
		// (the row is inserted after the lock is taken and finished before it
		// is released; an abandoned run is closed by the next lock holder
		// before it inserts its own run), so with runs sorted by start each one
		// must finish before the next starts.
		for s, rs := range byStream {
			for i := 1; i < len(rs); i++ {
				prev, next := rs[i-1], rs[i]
				if prev.finished == nil || prev.finished.After(next.started) {
					t.Errorf("stream %s: runs overlap: %v and %v", s, prev, next)
				}
				// The run after an abandoned one starts only once the dead
				// replica is dead: the lock died with its session.
				if prev.status == "failed" && strings.Contains(prev.errText, "abandoned") {
					if next.pid != survivorPid || next.started.Before(killAt) {
						t.Errorf("stream %s: run %v follows abandoned run %v; want the survivor's, started after the kill at %s",
							s, next, prev, killAt.Format("15:04:05.000000"))
					}
				}
			}
		}
		// The survivor resumed the dead replica's sweep instead of restarting.
		for _, r := range byStream["invoices"] {
			if r.pid == survivorPid && !r.started.Before(killAt) {
				if r.sweepID == nil || *r.sweepID != sweepAtKill {
					t.Errorf("the survivor's first invoices run after the kill %v has sweep %v; want the dead replica's sweep %d resumed",
						r, deref(r.sweepID), sweepAtKill)
				}
				break
			}
		}
		if t.Failed() {
			for _, r := range runs {
				t.Logf("run %v", r)
			}
		}

		// The warehouse is exact.
		var count, distinct, live int64
		var sum string
		if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE deleted_at IS NULL), coalesce(sum(total_bc), 0)::text
FROM erp.invoices WHERE source = 'default'`).Scan(&count, &distinct, &live, &sum); err != nil {
			t.Fatal(err)
		}
		if count != invoices || distinct != invoices || live != invoices {
			t.Errorf("erp.invoices: %d rows, %d distinct, %d not deleted; want %d each", count, distinct, live, invoices)
		}
		if got, err := decimal.NewFromString(sum); err != nil || !got.Equal(sim.InvoiceTotal()) {
			t.Errorf("sum(total_bc) = %s, want exactly %s", sum, sim.InvoiceTotal())
		}
		var lastRows *int64
		if err := pool.QueryRow(ctx, `SELECT last_sweep_rows FROM erp.sync_checkpoints WHERE source = 'default' AND stream = 'invoices'`).Scan(&lastRows); err != nil {
			t.Fatal(err)
		}
		if lastRows == nil || *lastRows != invoices {
			t.Errorf("last completed invoice sweep has %v rows, want %d", deref(lastRows), invoices)
		}
		// The killed replica could not revoke its token; the survivor did.
		if got := sim.Revocations(); got != 1 {
			t.Errorf("the ERP saw %d revocations, want 1 (the survivor's)", got)
		}
	})

	// SIGTERM while an invoice page is being committed: that page commits and no page
	// after it, the run is cancelled, the token revoked, and the process exits 0
	// within the grace period.
	//
	// To have a page surely in flight at the signal, the test holds the invoices
	// checkpoint row (FOR UPDATE), so the next page's commit waits on it, and lets it
	// go once the stop has reached the runs: another stream's run, waiting on an ERP
	// that does not answer it, ends cancelled as soon as runs are told to stop. The
	// sweep is the daemon's second (the first, into an empty table, is a bulk load
	// that commits several pages at a time).
	t.Run("LetsThePageInFlightCommitOnSIGTERM", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		const (
			invoices = 1000
			grace    = 5 * time.Second
		)
		sim := erpsim.New(erpsim.Options{Invoices: invoices, PageSizeCap: pageSize})
		all := sim.Invoices()
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:pageSize] })
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) }) // before the server closes: Close waits for handlers
		sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/accounts/api/cashboxes/" {
				return false
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return true
		})
		dbURL := testdb.New(t)
		pool := testdb.ObserverPool(t, dbURL)
		addr := freeAddr(t)
		p := startDaemon(t, ctx, bin, baseEnv(dbURL, srv.URL,
			"ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(pageSize),
			// The hanging cashboxes request must leave a request for invoices.
			"ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS=2",
			"ERPSYNC_STREAMS=invoices,cashboxes",
			"ERPSYNC_SCHEDULE=@every 1s",
			"ERPSYNC_SHUTDOWN_GRACE="+grace.String(),
			"ERPSYNC_HTTP_ADDR="+addr,
		), 1)
		alive := []*process{p}
		countRuns := func(stream, status string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM erp.sync_runs WHERE source = 'default' AND stream = $1 AND status = $2`,
				stream, status).Scan(&n)
			return n, err
		}
		pollUntil(t, ctx, 40*time.Second, 20*time.Millisecond, "the first (one-page) invoice sweep to complete", alive, func() (bool, error) {
			n, err := countRuns("invoices", "succeeded")
			return n >= 1, err
		})
		sim.MutateInvoices(func([]erpsim.Invoice) []erpsim.Invoice { return all })
		sim.SetLatency(300 * time.Millisecond)
		pollUntil(t, ctx, 40*time.Second, 20*time.Millisecond, "the second sweep to reach 2 pages", alive, func() (bool, error) {
			var pages int64
			err := pool.QueryRow(ctx, `SELECT pages FROM erp.sync_checkpoints WHERE source = 'default' AND stream = 'invoices' AND sweep_id IS NOT NULL`).Scan(&pages)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			return pages >= 2, err
		})
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if code := getStatus(hc, "http://"+addr+"/readyz"); code != 200 {
			t.Errorf("/readyz = %d during the sweep, want 200", code)
		}

		// Hold the checkpoint row: what it says now is what had been committed
		// when the signal comes.
		const cpQuery = `SELECT sweep_id, pages, rows, coalesce(cursor, '') FROM erp.sync_checkpoints WHERE source = 'default' AND stream = 'invoices'`
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		var atSweep *int64
		var atPages, atRows int64
		var atCursor string
		if err := tx.QueryRow(ctx, cpQuery+` FOR UPDATE`).Scan(&atSweep, &atPages, &atRows, &atCursor); err != nil {
			t.Fatal(err)
		}
		waitBlockedBy(t, ctx, pool, tx.Conn().PgConn().PID(), alive, "the next page's commit to wait on the checkpoint row")
		if atSweep == nil || atPages < 2 || atPages >= invoices/pageSize {
			t.Fatalf("checkpoint at the signal: sweep %v, %d pages; want the second sweep under way", deref(atSweep), atPages)
		}
		signalAt := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, ctx, 30*time.Second, 5*time.Millisecond, "the stop to reach the runs (the hanging cashboxes run cancelled)", alive, func() (bool, error) {
			n, err := countRuns("cashboxes", "cancelled")
			return n == 1, err
		})
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(grace + 10*time.Second):
			t.Fatalf("erpsync run did not exit within %s of SIGTERM", grace+10*time.Second)
		}
		took := time.Since(signalAt)
		t.Logf("exited %s after SIGTERM; checkpoint then: sweep %v, %d pages, %d rows", took.Round(time.Millisecond), deref(atSweep), atPages, atRows)
		if p.err != nil {
			t.Errorf("erpsync run exited with %v after SIGTERM, want exit code 0", p.err)
		}
		// The page commits as soon as the test lets it go, well within the
		// grace period; 2 s of slack for process exit on a loaded machine.
		if took > grace+2*time.Second {
			t.Errorf("erpsync run took %s to exit; the grace period is %s", took, grace)
		}

		rs, err := loadRuns(ctx, pool, "default")
		if err != nil {
			t.Fatal(err)
		}
		var inv []syncRun
		for _, r := range rs {
			if r.stream == "invoices" {
				inv = append(inv, r)
			}
		}
		// The one-page sweep may have run more than once before the ERP grew.
		ok := len(inv) >= 2 && inv[len(inv)-1].status == "cancelled" && inv[len(inv)-1].finished != nil
		for _, r := range inv[:max(len(inv)-1, 0)] {
			ok = ok && r.status == "succeeded"
		}
		if !ok {
			t.Errorf("invoices runs %v; want the one-page sweeps, succeeded, then the interrupted one, cancelled and finished", inv)
		}
		var n, cpPages, cpRows int64
		var sweep *int64
		var cursor string
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM erp.invoices WHERE source = 'default'), sweep_id, pages, rows, coalesce(cursor, '')
FROM erp.sync_checkpoints WHERE source = 'default' AND stream = 'invoices'`).Scan(&n, &sweep, &cpPages, &cpRows, &cursor); err != nil {
			t.Fatal(err)
		}
		t.Logf("committed %d pages, %d invoices before the shutdown", cpPages, n)
		// The page in flight committed, and no page after it.
		if sweep == nil || *sweep != *atSweep || cpPages != atPages+1 || cpRows != atRows+pageSize || cursor == atCursor || cursor == "" {
			t.Errorf("checkpoint after the shutdown: sweep %v, %d pages, %d rows, cursor %q; at the signal: sweep %v, %d pages, %d rows, cursor %q; want the same sweep one page on",
				deref(sweep), cpPages, cpRows, cursor, deref(atSweep), atPages, atRows, atCursor)
		}
		// The second sweep's first page holds the first sweep's rows.
		if n != cpRows || n != cpPages*pageSize {
			t.Errorf("erp.invoices has %d rows; want the %d rows of the checkpoint's %d whole pages", n, cpRows, cpPages)
		}
		if got := sim.Revocations(); got != 1 {
			t.Errorf("the ERP saw %d revocations, want 1", got)
		}
		revoked := slices.ContainsFunc(sim.Requests(), func(r erpsim.Request) bool {
			return r.Method == http.MethodPost && r.Path == "/api/auth/revoke/" && r.Status == http.StatusOK
		})
		if !revoked {
			t.Errorf("the ERP recorded no POST /api/auth/revoke/")
		}
		if !hasMessage(p, "shutting down") || !hasMessage(p, "erpsync stopped") {
			t.Errorf("erpsync run did not log its shutdown (\"shutting down\" ... \"erpsync stopped\")")
		}
		if hasMessage(p, "grace period over") {
			t.Errorf("the page in flight did not commit within the grace period: the run was aborted")
		}
		checkJSONLog(t, p)
	})

	// SIGTERM in the worst case (a commit blocked on a lock another session
	// holds, an ERP that does not answer the revoke) still ends the daemon
	// within ERPSYNC_SHUTDOWN_TIMEOUT: grace, abort, revoke and HTTP phases in
	// turn.
	t.Run("EndsWithinTheShutdownTimeoutAfterSIGTERMInTheWorstCase", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const timeout = 12 * time.Second
		sim := erpsim.New(erpsim.Options{Invoices: 3000, PageSizeCap: pageSize, Latency: 100 * time.Millisecond})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		t.Cleanup(func() { sim.SetLatency(0) }) // before the server closes
		dbURL := testdb.New(t)
		pool := testdb.ObserverPool(t, dbURL)
		addr := freeAddr(t)
		p := startDaemon(t, ctx, bin, baseEnv(dbURL, srv.URL,
			"ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(pageSize), "ERPSYNC_STREAMS=invoices", "ERPSYNC_SCHEDULE=@every 1s",
			"ERPSYNC_SHUTDOWN_TIMEOUT="+timeout.String(), "ERPSYNC_HTTP_ADDR="+addr), 1)
		waitFirstInvoicePage(t, ctx, pool, p)
		// Another session locks the table: the next commit waits (its lock
		// timeout, 15 s, is longer than the grace period), and the ERP stops
		// answering, the revoke included.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx, `LOCK TABLE erp.invoices IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		sim.SetLatency(6 * time.Second)
		waitBlockedBy(t, ctx, pool, tx.Conn().PgConn().PID(), []*process{p}, "a commit to wait on the table lock")
		took := p.stop(t, syscall.SIGTERM, timeout+5*time.Second)
		t.Logf("exited %s after SIGTERM (shutdown timeout %s)", took.Round(time.Millisecond), timeout)
		if took > timeout+time.Second {
			t.Errorf("exit took %s, more than the shutdown timeout %s", took, timeout)
		}
		if p.err != nil {
			t.Errorf("exit: %v, want status 0", p.err)
		}
		if !hasMessage(p, "grace period over") {
			t.Errorf("the worst case did not happen: the run was not aborted")
		}
		if code := getStatus(&http.Client{Timeout: time.Second}, "http://"+addr+"/healthz"); code != 0 {
			t.Errorf("/healthz still answers %d after exit", code)
		}
	})

	// The fleet report: every source of a fleet (one simulated ERP per tenant) with
	// the four core streams, two replicas of `erpsync run` on one warehouse, until
	// every source is synced and then for a steady while. It asserts what a deployment
	// must hold (every source exact, no two runs of one stream at once, both replicas
	// working, no stream stale past the product's overdue mark, /readyz never 503) and
	// logs what it measured. Small by default; ERPSYNC_FLEET=full runs 200 sources of
	// 3000 invoices (`make fleet`); ERPSYNC_FLEET_SOURCES, _INVOICES, _DURATION (the
	// steady part) and _LATENCY override the sizes; ERPSYNC_FLEET_REPORT=path writes
	// the report there as markdown.
	t.Run("KeepsAFleetExactAndFreshWithTwoReplicas", func(t *testing.T) {
		bin := erpsyncBinary(t)
		s := fleetSizeFromEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.steady+10*time.Minute)
		defer cancel()

		fleet := erpsim.NewFleet(erpsim.FleetOptions{Tenants: s.sources,
			Template: erpsim.Options{Invoices: s.invoices, PageSizeCap: fleetPageSize, Latency: s.latency}})
		srv := httptest.NewServer(fleet)
		t.Cleanup(srv.Close)
		names := fleet.Names()
		cfgPath := writeFleetConfig(t, srv.URL, names, s)
		dbURL := testdb.New(t)
		pool := testdb.ObserverPool(t, dbURL)

		replicas := make([]*replica, 2)
		procs := make([]*process, 2)
		started := time.Now()
		for i := range replicas {
			r := &replica{addr: freeAddr(t), app: fmt.Sprintf("erpsync-fleet-%d", i+1), backends: map[int32]bool{}}
			env := []string{
				"ERPSYNC_CONFIG=" + cfgPath,
				"ERPSYNC_DATABASE_URL=" + withAppName(t, dbURL, r.app),
				"ERPSYNC_HTTP_ADDR=" + r.addr,
				"ERPSYNC_LOG_FORMAT=json",
				"ERPSYNC_LOG_LEVEL=warn",
				fleetPassword + "=erpsync-demo-password",
			}
			r.p = startDaemon(t, ctx, bin, env, i+1)
			r.pid = r.p.cmd.Process.Pid
			replicas[i], procs[i] = r, r.p
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		pollUntil(t, ctx, time.Minute, 50*time.Millisecond, "both replicas' /readyz to answer 200", procs, func() (bool, error) {
			return getStatus(hc, "http://"+replicas[0].addr+"/readyz") == 200 && getStatus(hc, "http://"+replicas[1].addr+"/readyz") == 200, nil
		})
		mon := startFleetMonitor(ctx, pool, replicas, s.poll)
		stopMonitor := gosync.OnceFunc(mon.Stop)
		defer stopMonitor()

		// The first full sync: every (source, stream) has succeeded once.
		jobs := len(names) * len(coreStreams)
		pollUntil(t, ctx, 10*time.Minute, 500*time.Millisecond, "every source's every stream to succeed once", procs, func() (bool, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT DISTINCT source, stream FROM erp.sync_runs WHERE status = 'succeeded') x`).Scan(&n)
			return n == jobs, err
		})
		synced := time.Now()
		cpuAtSync := machineCPU()
		t.Logf("fleet first fully synced %s after the start", synced.Sub(started).Round(time.Second))

		// The steady state.
		pollUntil(t, ctx, s.steady+time.Minute, time.Second, fmt.Sprintf("%s of steady state", s.steady), procs, func() (bool, error) {
			return time.Since(synced) >= s.steady, nil
		})
		for _, r := range replicas {
			r.hwmKiB = procStatusKiB(r.pid, "VmHWM")
			code, body := getWithBody(&http.Client{Timeout: 10 * time.Second}, "http://"+r.addr+"/metrics")
			if code != http.StatusOK {
				t.Errorf("replica #%d: GET /metrics: %d", r.p.n, code)
			}
			r.metrics = body
		}
		stopMonitor()

		// /readyz says 503 from here on, by design: the shutdown.
		stopAt := time.Now()
		busy := machineCPU().busySince(cpuAtSync)
		for _, r := range replicas {
			if err := r.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range replicas {
			select {
			case <-r.p.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("replica #%d did not exit within 30 s of SIGTERM", r.p.n)
			}
			if r.p.err != nil {
				t.Errorf("replica #%d exited with %v after SIGTERM, want status 0", r.p.n, r.p.err)
			}
		}

		runs, err := loadRuns(ctx, pool, "")
		if err != nil {
			t.Fatal(err)
		}
		rep := &fleetReport{sources: len(names), started: started, synced: synced, stopAt: stopAt,
			machineBusy: busy, peakConnTotal: mon.peakTotal}
		analyseFleet(t, rep, s, replicas, runs)
		checkFleetData(t, ctx, pool, fleet)

		text := rep.markdown(s, replicas)
		t.Logf("fleet report\n%s", text)
		if path := os.Getenv("ERPSYNC_FLEET_REPORT"); path != "" {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Errorf("ERPSYNC_FLEET_REPORT: %v", err)
			}
		}
	})
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// withAppName sets the application_name of a database URL, so the test
// can tell each process's Postgres sessions apart.
func withAppName(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// startDaemon starts `erpsync run`.
func startDaemon(t *testing.T, ctx context.Context, bin string, env []string, n int) *process {
	t.Helper()
	return startErpsync(t, ctx, bin, env, n, "run")
}

// pollUntil polls cond every interval until it holds; the timeout is the
// assertion. Any process in alive that exits meanwhile fails the test.
func pollUntil(t *testing.T, ctx context.Context, timeout, interval time.Duration, what string, alive []*process, cond func() (bool, error)) {
	t.Helper()
	testutil.Eventually(t, timeout, interval, what, func() (bool, error) {
		for _, p := range alive {
			if p.exited() {
				return false, fmt.Errorf("erpsync run #%d exited (%v)", p.n, p.err)
			}
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return cond()
	})
}

// syncRun is one row of erp.sync_runs.
type syncRun struct {
	id                     int64
	source, stream, status string
	errText                string
	started                time.Time
	finished               *time.Time
	pid                    int
	sweepID                *int64
}

func (r syncRun) String() string {
	fin := "-"
	if r.finished != nil {
		fin = r.finished.Format("15:04:05.000000")
	}
	return fmt.Sprintf("#%d %s/%s %s [%s, %s) pid %d err %q", r.id, r.source, r.stream, r.status,
		r.started.Format("15:04:05.000000"), fin, r.pid, r.errText)
}

// loadRuns reads the runs of one source ("": of every source) in the
// order they started.
func loadRuns(ctx context.Context, pool *pgxpool.Pool, source string) ([]syncRun, error) {
	rows, err := pool.Query(ctx, `
SELECT id, source, stream, status, coalesce(error, ''), started_at, finished_at, coalesce(pid, 0), sweep_id
FROM erp.sync_runs WHERE $1 = '' OR source = $1 ORDER BY started_at, id`, source)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (syncRun, error) {
		var x syncRun
		err := r.Scan(&x.id, &x.source, &x.stream, &x.status, &x.errText, &x.started, &x.finished, &x.pid, &x.sweepID)
		return x, err
	})
}

// loadDaemonRuns reads the runs of the source "default".
func loadDaemonRuns(ctx context.Context, pool *pgxpool.Pool) ([]syncRun, error) {
	return loadRuns(ctx, pool, "default")
}

// succeededBy counts succeeded runs per stream of pid (0: any pid)
// started after since (zero: any time).
func succeededBy(runs []syncRun, pid int, since time.Time) map[string]int {
	out := map[string]int{}
	for _, r := range runs {
		if r.status == "succeeded" && (pid == 0 || r.pid == pid) && !r.started.Before(since) {
			out[r.stream]++
		}
	}
	return out
}

func everyStream(m map[string]int, atLeast int) bool {
	for _, s := range coreStreams {
		if m[s] < atLeast {
			return false
		}
	}
	return true
}

// sessionsGone waits until no Postgres session of application name app
// is left (a killed process's backends end when Postgres notices).
func sessionsGone(t *testing.T, ctx context.Context, pool *pgxpool.Pool, app string) {
	t.Helper()
	pollUntil(t, ctx, 30*time.Second, 10*time.Millisecond, "the Postgres sessions of "+app+" to end", nil, func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = $1`, app).Scan(&n)
		return n == 0, err
	})
}

func checkJSONLog(t *testing.T, p *process) {
	t.Helper()
	for i, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Errorf("erpsync run #%d: stderr line %d is not JSON (ERPSYNC_LOG_FORMAT=json): %s", p.n, i+1, line)
		}
	}
}

// logMessages returns the msg of every JSON log line.
func logMessages(p *process) []string {
	var out []string
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
			out = append(out, rec.Msg)
		}
	}
	return out
}

func hasMessage(p *process, prefix string) bool {
	return slices.ContainsFunc(logMessages(p), func(m string) bool { return strings.HasPrefix(m, prefix) })
}

func getStatus(c *http.Client, u string) int {
	resp, err := c.Get(u)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitBlockedBy waits until some session waits on a lock that the
// session of pid holds.
func waitBlockedBy(t *testing.T, ctx context.Context, pool *pgxpool.Pool, pid uint32, alive []*process, what string) {
	t.Helper()
	pollUntil(t, ctx, 30*time.Second, 5*time.Millisecond, what, alive, func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, int32(pid)).Scan(&n)
		return n > 0, err
	})
}
