package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// TestSync documents `erpsync sync` as the real binary runs it, against the
// simulator and a database of the test's own: safe to kill at any instant, bounded
// in memory, and stopped by a signal between streams.
func TestSync(t *testing.T) {
	// `erpsync sync invoices` killed with SIGKILL several times mid-sweep, then let
	// finish, holds what "safe to stop" promises: no duplicate, no gap, exact money,
	// at most one page re-fetched per restart, and bookkeeping that tells what
	// happened.
	t.Run("ResumesAfterSIGKILLWithNoDuplicateNoGapAndExactMoney", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 85*time.Second)
		defer cancel()

		sim := erpsim.New(erpsim.Options{Invoices: totalInvoices, PageSizeCap: pageSize, Latency: 40 * time.Millisecond})
		var bigID string
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			i := len(inv)/2 + 17
			inv[i].TotalBC = decimal.RequireFromString(bigTotal)
			bigID = strconv.FormatInt(inv[i].ID, 10)
			return inv
		})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)

		dbURL := testdb.New(t)
		pool := testdb.ObserverPool(t, dbURL)

		env := baseEnv(dbURL, srv.URL,
			"ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(pageSize),
		)

		// A page costs ~40ms of ERP latency, then a commit of a few ms. The
		// test notices a commit within ~2ms, so a kill after a short delay
		// lands during the next fetch, one after ~40-50ms lands around the
		// answer, its preparation and its commit.
		delays := []time.Duration{0, 43 * time.Millisecond, 20 * time.Millisecond, 46 * time.Millisecond, 8 * time.Millisecond, 41 * time.Millisecond}
		type kill struct {
			delay  time.Duration
			pages  int64  // checkpoint pages once the process was gone
			cursor string // checkpoint cursor once the process was gone
			runID  int64
		}
		var kills []kill
		var lastPages int64
		for i, delay := range delays {
			p := startSync(t, ctx, bin, env, i+1)
			target := lastPages + 3 + int64(i%3)
			waitFor(t, ctx, 40*time.Second, fmt.Sprintf("run #%d to commit page %d", i+1, target), func() (bool, error) {
				if p.exited() {
					return false, fmt.Errorf("erpsync exited on its own (%v) before it was killed\n%s", p.err, p.output())
				}
				cp, ok, err := readCheckpoint(ctx, pool)
				return ok && cp.pages >= target, err
			})
			time.Sleep(delay) // where the kill lands, not an assertion
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatalf("kill: %v", err)
			}
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("run #%d did not die after SIGKILL", i+1)
			}
			var ee *exec.ExitError
			if !errors.As(p.err, &ee) || ee.Exited() {
				t.Fatalf("run #%d: want death by SIGKILL, got %v\n%s", i+1, p.err, p.output())
			}
			waitSessionsGone(t, ctx, pool, 30*time.Second)
			cp, ok, err := readCheckpoint(ctx, pool)
			if err != nil || !ok {
				t.Fatalf("checkpoint after kill #%d: found %v, err %v", i+1, ok, err)
			}
			if cp.sweepID == nil || cp.cursor == nil || *cp.cursor == "" {
				t.Fatalf("after kill #%d the sweep should be in progress with a saved cursor: sweep_id %v, cursor %v", i+1, cp.sweepID, cp.cursor)
			}
			if cp.pages >= totalPages {
				t.Fatalf("after kill #%d the checkpoint is at page %d of %d: the sweep should not be complete", i+1, cp.pages, totalPages)
			}
			runs := readRuns(t, ctx, pool)
			checkKilledRuns(t, runs, i, true)
			kills = append(kills, kill{delay: delay, pages: cp.pages, cursor: *cp.cursor, runID: runs[len(runs)-1].id})
			lastPages = cp.pages
		}

		final := startSync(t, ctx, bin, env, len(delays)+1)
		select {
		case <-final.done:
		case <-ctx.Done():
			t.Fatalf("the final run did not finish in time\n%s", final.output())
		}
		if final.err != nil {
			t.Fatalf("the final run failed: %v\n%s", final.err, final.output())
		}
		for i, line := range strings.Split(strings.TrimSpace(final.stderr.String()), "\n") {
			if line != "" && !json.Valid([]byte(line)) {
				t.Errorf("final run: stderr line %d is not JSON (ERPSYNC_LOG_FORMAT=json): %s", i+1, line)
			}
		}

		checkWarehouseExact(ctx, t, pool, sim, bigID)

		// Re-fetches. Each process logs in once, so the bearer tokens, in the
		// order the simulator first saw them, tell the processes apart (a
		// request of a killed process that reached the server late still
		// carries its own token).
		reqs := sim.Requests()
		tokenOf := map[string]int{}
		var tokens int
		firstInv := map[int]erpsim.Request{}
		lastInv := map[int]erpsim.Request{}
		okFetches := map[string]int{}
		for _, r := range reqs {
			tok, isBearer := strings.CutPrefix(r.Authorization, "Bearer ")
			if isBearer && tok != "" {
				if _, seen := tokenOf[tok]; !seen {
					tokenOf[tok] = tokens
					tokens++
				}
			}
			if r.Method != http.MethodGet || r.Path != invoicesPath {
				continue
			}
			proc, known := tokenOf[tok]
			if !isBearer || !known {
				t.Fatalf("invoice request without a known bearer token: %+v", r)
			}
			if _, seen := firstInv[proc]; !seen {
				firstInv[proc] = r
			}
			lastInv[proc] = r
			if r.Status == http.StatusOK {
				okFetches[r.RawQuery]++
			}
		}
		if tokens != len(kills)+1 {
			t.Fatalf("the simulator saw %d bearer tokens, want one per process (%d)", tokens, len(kills)+1)
		}
		extraFetches := 0
		for q, n := range okFetches {
			extraFetches += n - 1
			if n > 2 {
				t.Errorf("page %q was fetched %d times; a restart may re-fetch only the one uncommitted page", q, n)
			}
		}
		if len(okFetches) != totalPages {
			t.Errorf("%d distinct pages fetched, want %d", len(okFetches), totalPages)
		}
		if extraFetches > len(kills) {
			t.Errorf("%d pages re-fetched after %d kills; each restart may re-fetch at most one page", extraFetches, len(kills))
		}
		cursorOf := func(r erpsim.Request) (string, string) {
			q, err := url.ParseQuery(r.RawQuery)
			if err != nil {
				t.Fatalf("query %q: %v", r.RawQuery, err)
			}
			return q.Get("cursor"), q.Get("page_size")
		}
		if c, ps := cursorOf(firstInv[0]); c != "" || ps != strconv.Itoa(pageSize) {
			t.Errorf("the first run's first page request has cursor %q, page_size %q; want no cursor, page_size %d", c, ps, pageSize)
		}
		landed := map[string]int{}
		for i, k := range kills {
			// The restart asks first for the page after the last committed one.
			if c, ps := cursorOf(firstInv[i+1]); c != k.cursor || ps != strconv.Itoa(pageSize) {
				t.Errorf("restart after kill #%d: first request has cursor %q (page_size %q); want the checkpoint's %q", i+1, c, ps, k.cursor)
			}
			// Where did the kill land? (logged, not asserted: timing decides)
			last := lastInv[i]
			c, _ := cursorOf(last)
			where := "after a commit, before the next request reached the ERP"
			switch {
			case last.Status != http.StatusOK:
				where = "during a fetch"
			case c == k.cursor:
				where = "after a fetch, before its commit landed"
			}
			landed[where]++
			t.Logf("kill #%d after %v: checkpoint at page %d, %s", i+1, k.delay, k.pages, where)
		}
		t.Logf("kills: %d, pages re-fetched: %d, kill points: %v", len(kills), extraFetches, landed)

		// Bookkeeping: every killed run was closed as abandoned by the next
		// start, the final run succeeded, the sweep is complete.
		runs := readRuns(t, ctx, pool)
		checkKilledRuns(t, runs[:min(len(kills), len(runs))], len(kills), false)
		for i, k := range kills {
			if i < len(runs) && runs[i].id != k.runID {
				t.Errorf("run %d has id %d, want %d (the run of killed process #%d)", i+1, runs[i].id, k.runID, i+1)
			}
		}
		if len(runs) != len(kills)+1 {
			t.Fatalf("%d invoices runs, want %d", len(runs), len(kills)+1)
		}
		if r := runs[len(runs)-1]; r.status != "succeeded" || !r.ended || r.errMsg != "" {
			t.Errorf("final run: status %q, finished %v, error %q; want succeeded", r.status, r.ended, r.errMsg)
		}
		cp, ok, err := readCheckpoint(ctx, pool)
		if err != nil || !ok {
			t.Fatalf("final checkpoint: found %v, err %v", ok, err)
		}
		if cp.sweepID != nil || cp.cursor != nil {
			t.Errorf("final checkpoint: sweep_id %v, cursor %v; want both NULL (sweep complete)", deref(cp.sweepID), deref(cp.cursor))
		}
		if cp.lastSweepRows == nil || *cp.lastSweepRows != totalInvoices {
			t.Errorf("final checkpoint: last_sweep_rows %v, want %d", deref(cp.lastSweepRows), totalInvoices)
		}
		if t.Failed() {
			t.Logf("final run output:\n%s", final.output())
		}
	})

	// The same with the default --prefetch 1, where a bulk load commits groups of
	// pages (up to 1 s of pages per transaction): SIGKILL several times mid-sweep,
	// then run to completion, and prove every invoice exactly once, exact money,
	// restarts from the saved cursor, and re-fetches bounded by one group per kill.
	t.Run("ResumesAfterSIGKILLDuringGroupCommitsRefetchingAGroupAtMost", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
		defer cancel()

		sim := erpsim.New(erpsim.Options{Invoices: totalInvoices, PageSizeCap: pageSize, Latency: groupLatency})
		var bigID string
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			i := len(inv)/2 + 17
			inv[i].TotalBC = decimal.RequireFromString(bigTotal)
			bigID = strconv.FormatInt(inv[i].ID, 10)
			return inv
		})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)

		dbURL := testdb.New(t)
		pool := testdb.ObserverPool(t, dbURL)
		env := baseEnv(dbURL, srv.URL,
			"ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(groupPageSize),
		)
		args := []string{"sync", "invoices"} // default --prefetch 1

		// A commit lands about every second (one group). The test notices it
		// within ~2ms, so the kill lands, after the delay, early in the next
		// group, in its middle, or around its deadline, copy and commit; the
		// delays over 1 s would land late in a group that outlived its 1 s.
		delays := []time.Duration{0, 1400 * time.Millisecond, 500 * time.Millisecond, 1900 * time.Millisecond, 990 * time.Millisecond, 250 * time.Millisecond}
		type kill struct {
			delay  time.Duration
			pages  int64  // checkpoint pages once the process was gone
			cursor string // checkpoint cursor once the process was gone
			runID  int64
		}
		var kills []kill
		var lastPages, sweepID, maxStep int64
		for i, delay := range delays {
			p := startErpsync(t, ctx, bin, env, i+1, args...)
			// The first run must commit more than maxRefetch pages (two
			// groups), the others must advance the checkpoint (one group).
			target := lastPages + 1
			if i == 0 {
				target = int64(maxRefetch) + 1
			}
			seen := lastPages
			waitFor(t, ctx, 20*time.Second, fmt.Sprintf("run #%d to commit page %d", i+1, target), func() (bool, error) {
				if p.exited() {
					return false, fmt.Errorf("erpsync exited on its own (%v) before it was killed\n%s", p.err, p.output())
				}
				cp, ok, err := readGroupCheckpoint(ctx, pool)
				if ok && cp.sweepID != nil && cp.pages > seen {
					maxStep = max(maxStep, cp.pages-seen)
					seen = cp.pages
				}
				return ok && cp.pages >= target, err
			})
			time.Sleep(delay) // where the kill lands, not an assertion
			if err := p.cmd.Process.Kill(); err != nil {
				<-p.done
				t.Fatalf("run #%d: kill: %v (erpsync exited on its own: %v)\n%s", i+1, err, p.err, p.output())
			}
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				t.Fatalf("run #%d did not die after SIGKILL", i+1)
			}
			var ee *exec.ExitError
			if !errors.As(p.err, &ee) {
				t.Fatalf("run #%d: want death by SIGKILL, got %v\n%s", i+1, p.err, p.output())
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("run #%d: want death by SIGKILL, got %v\n%s", i+1, p.err, p.output())
			}
			waitSessionsGone(t, ctx, pool, 20*time.Second)
			cp, ok, err := readGroupCheckpoint(ctx, pool)
			if err != nil || !ok {
				t.Fatalf("checkpoint after kill #%d: found %v, err %v", i+1, ok, err)
			}
			if cp.sweepID == nil || cp.cursor == nil || *cp.cursor == "" {
				t.Fatalf("after kill #%d the sweep should be in progress with a saved cursor: sweep_id %v, cursor %v", i+1, deref(cp.sweepID), deref(cp.cursor))
			}
			if cp.pages < target || cp.pages >= groupTotalPages {
				t.Fatalf("after kill #%d the checkpoint is at page %d; want at least %d and fewer than %d", i+1, cp.pages, target, groupTotalPages)
			}
			if cp.rows != cp.pages*groupPageSize {
				t.Errorf("after kill #%d the checkpoint counts %d rows for %d pages of %d", i+1, cp.rows, cp.pages, groupPageSize)
			}
			var committed int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM erp.invoices`).Scan(&committed); err != nil {
				t.Fatal(err)
			}
			if committed != cp.rows {
				t.Errorf("after kill #%d erp.invoices holds %d rows, the checkpoint %d: rows and checkpoint must commit together", i+1, committed, cp.rows)
			}
			// The sweep began on an empty table: a bulk load, kept across
			// restarts, and the same sweep resumed each time.
			if !cp.bulkLoad {
				t.Errorf("after kill #%d: bulk_load is false; the sweep started on an empty table", i+1)
			}
			if i == 0 {
				sweepID = *cp.sweepID
			} else if *cp.sweepID != sweepID {
				t.Errorf("after kill #%d the sweep is %d, want %d resumed", i+1, *cp.sweepID, sweepID)
			}
			runs := readRuns(t, ctx, pool)
			checkKilledRuns(t, runs, i, true)
			kills = append(kills, kill{delay: delay, pages: cp.pages, cursor: *cp.cursor, runID: runs[len(runs)-1].id})
			lastPages = cp.pages
		}
		// Premise: the pages really were committed in groups (one commit of
		// pages arriving every 40ms is seen by a 2ms poll one page at a time).
		if maxStep < 5 {
			t.Errorf("the checkpoint never advanced by more than %d pages in one step: no group commits seen", maxStep)
		}

		final := startErpsync(t, ctx, bin, env, len(delays)+1, args...)
		select {
		case <-final.done:
		case <-ctx.Done():
			t.Fatalf("the final run did not finish in time\n%s", final.output())
		}
		if final.err != nil {
			t.Fatalf("the final run failed: %v\n%s", final.err, final.output())
		}

		checkWarehouseExact(ctx, t, pool, sim, bigID)

		// Re-fetches. The bearer tokens, in the order the simulator first saw
		// them, tell the processes apart (each logs in once).
		type invReq struct {
			cursor, pageSize string
			status           int
		}
		var tokens int
		tokenOf := map[string]int{}
		var byProc [][]invReq
		for _, r := range sim.Requests() {
			tok, isBearer := strings.CutPrefix(r.Authorization, "Bearer ")
			if isBearer && tok != "" {
				if _, seen := tokenOf[tok]; !seen {
					tokenOf[tok] = tokens
					tokens++
					byProc = append(byProc, nil)
				}
			}
			if r.Method != http.MethodGet || r.Path != invoicesPath {
				continue
			}
			proc, known := tokenOf[tok]
			if !isBearer || !known {
				t.Fatalf("invoice request without a known bearer token: %+v", r)
			}
			q, err := url.ParseQuery(r.RawQuery)
			if err != nil {
				t.Fatalf("query %q: %v", r.RawQuery, err)
			}
			byProc[proc] = append(byProc[proc], invReq{cursor: q.Get("cursor"), pageSize: q.Get("page_size"), status: r.Status})
		}
		if tokens != len(kills)+1 {
			t.Fatalf("the simulator saw %d bearer tokens, want one per process (%d)", tokens, len(kills)+1)
		}
		for i, reqs := range byProc {
			if len(reqs) == 0 {
				t.Fatalf("process #%d made no invoice request", i+1)
			}
		}
		if r := byProc[0][0]; r.cursor != "" || r.pageSize != strconv.Itoa(groupPageSize) {
			t.Errorf("the first run's first page request has cursor %q, page_size %q; want no cursor, page_size %d", r.cursor, r.pageSize, groupPageSize)
		}
		fetched := map[string]int{} // answered pages so far, by cursor
		addFetched := func(reqs []invReq) {
			for _, r := range reqs {
				if r.status == http.StatusOK {
					fetched[r.cursor]++
				}
			}
		}
		addFetched(byProc[0])
		t.Logf("re-fetch bound: %d pages per kill (1s / %v + 2)", maxRefetch, groupLatency)
		for i, k := range kills {
			// The restart asks first for the page after the last committed one.
			restart := byProc[i+1]
			if r := restart[0]; r.cursor != k.cursor || r.pageSize != strconv.Itoa(groupPageSize) {
				t.Errorf("restart after kill #%d: first request has cursor %q (page_size %q); want the checkpoint's %q", i+1, r.cursor, r.pageSize, k.cursor)
			}
			// Pages the killed process fetched (or was fetching) after its
			// last committed checkpoint: its requests from the one for the
			// checkpoint's cursor on. None if it died before asking for it.
			killed := byProc[i]
			after, answered := 0, 0
			if at := slices.IndexFunc(killed, func(r invReq) bool { return r.cursor == k.cursor }); at >= 0 {
				after = len(killed) - at
				for _, r := range killed[at:] {
					if r.status == http.StatusOK {
						answered++
					}
				}
			}
			if after > maxRefetch {
				t.Errorf("kill #%d: the killed process asked for %d pages after its last committed checkpoint (page %d); at most %d (one group plus one fetched ahead)",
					i+1, after, k.pages, maxRefetch)
			}
			// Pages the restart fetched that an earlier process had fetched.
			refetched := 0
			for _, r := range restart {
				if r.status == http.StatusOK && fetched[r.cursor] > 0 {
					refetched++
				}
			}
			if refetched > maxRefetch {
				t.Errorf("restart after kill #%d re-fetched %d pages; at most %d", i+1, refetched, maxRefetch)
			}
			addFetched(restart)
			where := "after a commit, before the next group's first request reached the ERP"
			if last := killed[len(killed)-1]; after > 0 && last.status != http.StatusOK {
				where = "during a fetch"
			} else if after > 0 {
				where = "with fetched pages uncommitted (building, copying or committing a group)"
			}
			t.Logf("kill #%d after %v: checkpoint at page %d; %d pages asked after it (%d answered), %d re-fetched by the restart; %s",
				i+1, k.delay, k.pages, after, answered, refetched, where)
		}
		extraFetches := 0
		for _, n := range fetched {
			extraFetches += n - 1
		}
		if len(fetched) != groupTotalPages {
			t.Errorf("%d distinct pages fetched, want %d", len(fetched), groupTotalPages)
		}
		if extraFetches > len(kills)*maxRefetch {
			t.Errorf("%d pages re-fetched after %d kills; at most %d each", extraFetches, len(kills), maxRefetch)
		}
		t.Logf("kills: %d, pages re-fetched: %d, largest checkpoint step seen: %d pages", len(kills), extraFetches, maxStep)

		// Bookkeeping: every killed run was closed as abandoned by the next
		// start, the final run succeeded and wrote the rest of the same
		// sweep, the sweep is complete.
		runs := readRuns(t, ctx, pool)
		checkKilledRuns(t, runs[:min(len(kills), len(runs))], len(kills), false)
		for i, k := range kills {
			if i < len(runs) && runs[i].id != k.runID {
				t.Errorf("run %d has id %d, want %d (the run of killed process #%d)", i+1, runs[i].id, k.runID, i+1)
			}
		}
		if len(runs) != len(kills)+1 {
			t.Fatalf("%d invoices runs, want %d", len(runs), len(kills)+1)
		}
		fr := runs[len(runs)-1]
		if fr.status != "succeeded" || !fr.ended || fr.errMsg != "" {
			t.Errorf("final run: status %q, finished %v, error %q; want succeeded", fr.status, fr.ended, fr.errMsg)
		}
		var finalSweep *int64
		var finalPages int64
		if err := pool.QueryRow(ctx, `SELECT sweep_id, pages FROM erp.sync_runs WHERE id = $1`, fr.id).Scan(&finalSweep, &finalPages); err != nil {
			t.Fatal(err)
		}
		if finalSweep == nil || *finalSweep != sweepID {
			t.Errorf("final run: sweep_id %v, want %d (the resumed sweep)", deref(finalSweep), sweepID)
		}
		if want := groupTotalPages - kills[len(kills)-1].pages; finalPages != want {
			t.Errorf("final run: %d pages committed, want %d (the pages after the last kill's checkpoint)", finalPages, want)
		}
		cp, ok, err := readGroupCheckpoint(ctx, pool)
		if err != nil || !ok {
			t.Fatalf("final checkpoint: found %v, err %v", ok, err)
		}
		if cp.sweepID != nil || cp.cursor != nil {
			t.Errorf("final checkpoint: sweep_id %v, cursor %v; want both NULL (sweep complete)", deref(cp.sweepID), deref(cp.cursor))
		}
		if cp.lastSweepID == nil || *cp.lastSweepID != sweepID {
			t.Errorf("final checkpoint: last_sweep_id %v, want %d", deref(cp.lastSweepID), sweepID)
		}
		if cp.lastSweepRows == nil || *cp.lastSweepRows != totalInvoices {
			t.Errorf("final checkpoint: last_sweep_rows %v, want %d", deref(cp.lastSweepRows), totalInvoices)
		}
		if t.Failed() {
			t.Logf("final run output:\n%s", final.output())
		}
	})

	// An ERP answering 400 MB on a one-list route fails the run with a
	// message naming the route, the limit and the setting, while the
	// process's peak memory stays far below the 256 MiB of the Kubernetes
	// example.
	t.Run("FailsAHugeAnswerWithBoundedMemory", func(t *testing.T) {
		bin := erpsyncBinary(t)
		// GNU time(1) measures the child's peak memory (-f %M).
		timeBin := testutil.RequireTool(t, "/usr/bin/time", "time")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sim := erpsim.New(erpsim.Options{})
		sim.SetHugeAnswer("/accounts/api/cashboxes/", 400<<20)
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		dbURL := testdb.New(t)
		peakFile := filepath.Join(t.TempDir(), "peak")
		p := startErpsync(t, ctx, timeBin, baseEnv(dbURL, srv.URL), 1, "-f", "%M", "-o", peakFile, bin, "sync", "cashboxes")
		<-p.done
		var exit *exec.ExitError
		if !errors.As(p.err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("erpsync sync cashboxes: %v, want exit status 1\n%s", p.err, p.output())
		}
		for _, want := range []string{"/accounts/api/cashboxes/", "64 MiB", "ERPSYNC_ERP_MAX_RESPONSE"} {
			if !strings.Contains(p.stderr.String(), want) {
				t.Errorf("the failure does not name %q:\n%s", want, p.output())
			}
		}
		out, err := os.ReadFile(peakFile)
		if err != nil {
			t.Fatal(err)
		}
		// time(1) may say first that the command failed: the figure is last.
		fields := strings.Fields(string(out))
		if len(fields) == 0 {
			t.Fatalf("no peak memory from time(1)")
		}
		kb, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
		if err != nil {
			t.Fatalf("peak memory %q: %v", out, err)
		}
		t.Logf("peak RSS %.1f MiB refusing a 400 MB answer", float64(kb)/1024)
		if kb > 100*1024 {
			t.Errorf("peak RSS %d KiB, want well under 128 MiB", kb)
		}
		// The other streams and the next run are not affected.
		sim.SetHugeAnswer("/accounts/api/cashboxes/", 0)
		q := startErpsync(t, ctx, bin, baseEnv(dbURL, srv.URL), 2, "sync", "cashboxes", "currencies")
		<-q.done
		if q.err != nil {
			t.Errorf("the next sync: %v\n%s", q.err, q.output())
		}
	})

	// The first SIGINT or SIGTERM stops `erpsync sync` after the commit in
	// flight and starts no further stream: no lock, no run row, no request
	// for them. It exits as a shell reports a process the signal ended, 130
	// for SIGINT and 143 for SIGTERM, so that `erpsync sync && next-step`
	// stops there.
	t.Run("StartsNoStreamAfterASignalAndExitsWithItsStatus", func(t *testing.T) {
		bin := erpsyncBinary(t)
		for _, c := range []struct {
			name string
			sig  syscall.Signal
			code int
		}{{"SIGINT", syscall.SIGINT, 130}, {"SIGTERM", syscall.SIGTERM, 143}} {
			t.Run(c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				sim := erpsim.New(erpsim.Options{Invoices: 1000, PageSizeCap: pageSize, Latency: 200 * time.Millisecond})
				srv := httptest.NewServer(sim)
				t.Cleanup(srv.Close)
				dbURL := testdb.New(t)
				pool := testdb.ObserverPool(t, dbURL)
				p := startErpsync(t, ctx, bin, baseEnv(dbURL, srv.URL, "ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(pageSize)), 1,
					"sync", "invoices", "currencies", "cashboxes", "--prefetch", "0")
				waitFirstInvoicePage(t, ctx, pool, p)
				stopInterrupted(t, p, "sync", c.sig, c.code)
				var runs string
				if err := pool.QueryRow(ctx, `SELECT string_agg(stream || ' ' || status, ', ' ORDER BY id) FROM erp.sync_runs`).Scan(&runs); err != nil {
					t.Fatal(err)
				}
				if runs != "invoices cancelled" {
					t.Errorf("runs: %s; want only the invoices run, cancelled", runs)
				}
				for _, r := range sim.Requests() {
					if r.Path == "/accounts/api/currencies/" || r.Path == "/accounts/api/cashboxes/" {
						t.Errorf("a stream started after the signal: %s %s", r.Method, r.Path)
					}
				}
				if sim.Revocations() != 1 {
					t.Errorf("revocations %d, want the token revoked", sim.Revocations())
				}
			})
		}
	})
}

const (
	// groupLatency is the simulator's delay before every answer, so the
	// ERP serves at most ceil(1s / groupLatency) = 25 pages a second to
	// one sequential reader.
	groupLatency = 40 * time.Millisecond
	// groupPageSize is the page size erpsync asks for (the simulator's
	// cap stays pageSize = 50). With 50-invoice pages the 3000 invoices
	// are 60 pages, 2.4 s of ERP latency: two or three group commits of
	// about 1 s each, too few for four kills that each follow a commit.
	// 8-invoice pages make it 375 pages, about 15 groups.
	groupPageSize   = 8
	groupTotalPages = totalInvoices / groupPageSize
	// maxGroupAge is internal/sync's bound on how long a bulk-load group
	// keeps taking pages (sweep.go).
	maxGroupAge = time.Second
)

// maxRefetch bounds the pages a killed process fetched after its last
// committed checkpoint (and so the pages a restart re-fetches):
// ceil(maxGroupAge / groupLatency) + 2 = 27.
//
// Why: with --prefetch 1 the fetcher hands pages over an unbuffered
// channel, so it starts fetching page n+1 only once the writer took page
// n, and fetches one page at a time, each taking at least groupLatency.
// A group begins when its first page is taken and starts its 1 s timer
// right then; a page joins the group only if it arrives before the timer
// fires, so a group holds its first page plus at most floor(1s /
// latency) more. While the group is copied and committed the fetcher
// fetches (or holds) exactly one more page and then blocks. So at any
// instant the pages fetched beyond the last commit are at most one group
// plus one: floor(1s/latency) + 2 <= ceil(1s/latency) + 2 (the slack of
// real request overhead on top of the latency covers timer jitter).
//
// It is a real bound: the test kills only after more than maxRefetch
// pages are committed, so a restart from the first page re-fetches more
// than maxRefetch pages (at the latest in the final run, which runs to
// the end) besides asking first for the wrong cursor; a checkpoint never
// written would never let a kill happen at all; and kills landing 1.4 s
// and 1.9 s after a commit catch groups that outlive their second.
var maxRefetch = int((maxGroupAge+groupLatency-1)/groupLatency) + 2

type groupCheckpoint struct {
	sweepID, lastSweepID, lastSweepRows *int64
	cursor                              *string
	pages, rows                         int64
	bulkLoad                            bool
}

func readGroupCheckpoint(ctx context.Context, pool *pgxpool.Pool) (groupCheckpoint, bool, error) {
	var cp groupCheckpoint
	err := pool.QueryRow(ctx, `SELECT sweep_id, cursor, pages, rows, bulk_load, last_sweep_id, last_sweep_rows
FROM erp.sync_checkpoints WHERE source = 'default' AND stream = 'invoices'`).
		Scan(&cp.sweepID, &cp.cursor, &cp.pages, &cp.rows, &cp.bulkLoad, &cp.lastSweepID, &cp.lastSweepRows)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	return cp, err == nil, err
}
