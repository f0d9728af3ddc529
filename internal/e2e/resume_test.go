package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

const (
	totalInvoices = 3000
	pageSize      = 50
	totalPages    = totalInvoices / pageSize
	bigTotal      = "123456789012345678.123456" // no float64 can hold it
	invoicesPath  = "/sales/api/invoices/list/"
)

// syncBuffer collects a child's output; it may be read (for a failure
// message) while the child still writes.
type syncBuffer struct {
	mu gosync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is one run of the binary.
type process struct {
	n              int
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error // valid once done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the process to exit, failing t if it has
// not within; it returns how long the exit took.
func (p *process) stop(t *testing.T, sig os.Signal, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("erpsync #%d did not exit within %s of %s", p.n, within, sig)
	}
	return time.Since(start)
}

func (p *process) output() string {
	return fmt.Sprintf("--- erpsync run #%d stdout ---\n%s\n--- stderr ---\n%s", p.n, p.stdout.String(), p.stderr.String())
}

// startSync starts `erpsync sync invoices --prefetch 0`: no page fetched
// ahead, so a kill can cost at most the page in flight.
func startSync(t *testing.T, ctx context.Context, bin string, env []string, n int) *process {
	t.Helper()
	return startErpsync(t, ctx, bin, env, n, "sync", "invoices", "--prefetch", "0")
}

// startErpsync starts the binary with args; the test's cleanup kills it
// if it still runs and, when the test failed, logs what it printed.
func startErpsync(t *testing.T, ctx context.Context, bin string, env []string, n int, args ...string) *process {
	t.Helper()
	p := &process{n: n, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting erpsync %v: %v", args, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s", p.output())
		}
	})
	return p
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test after timeout (or when ctx ends).
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	pollUntil(t, ctx, timeout, 2*time.Millisecond, what, nil, cond)
}

type checkpoint struct {
	sweepID       *int64
	cursor        *string
	pages         int64
	lastSweepRows *int64
}

func readCheckpoint(ctx context.Context, pool *pgxpool.Pool) (checkpoint, bool, error) {
	var cp checkpoint
	err := pool.QueryRow(ctx, `SELECT sweep_id, cursor, pages, last_sweep_rows FROM erp.sync_checkpoints
WHERE source = 'default' AND stream = 'invoices'`).Scan(&cp.sweepID, &cp.cursor, &cp.pages, &cp.lastSweepRows)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	return cp, err == nil, err
}

type runRow struct {
	id     int64
	status string
	errMsg string
	ended  bool
}

func readRuns(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []runRow {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT id, status, coalesce(error, ''), finished_at IS NOT NULL FROM erp.sync_runs
WHERE source = 'default' AND stream = 'invoices' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (runRow, error) {
		var x runRow
		err := r.Scan(&x.id, &x.status, &x.errMsg, &x.ended)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkKilledRuns: runs [0, live) were killed and must have been closed
// as failed/abandoned by a later start; run live (if any) is the one
// whose process was just killed and must still say running.
func checkKilledRuns(t *testing.T, runs []runRow, closed int, stillRunning bool) {
	t.Helper()
	want := closed
	if stillRunning {
		want++
	}
	if len(runs) != want {
		t.Fatalf("erp.sync_runs has %d invoices runs, want %d: %+v", len(runs), want, runs)
	}
	for i := range closed {
		r := runs[i]
		if r.status != "failed" || !strings.Contains(r.errMsg, "abandoned") || !r.ended {
			t.Errorf("killed run %d (id %d): status %q, finished %v, error %q; want failed, finished, error mentioning abandoned",
				i+1, r.id, r.status, r.ended, r.errMsg)
		}
	}
	if stillRunning {
		if r := runs[closed]; r.status != "running" || r.ended {
			t.Errorf("run %d (id %d), whose process was just killed: status %q, finished %v; want running until the next start",
				closed+1, r.id, r.status, r.ended)
		}
	}
}

// TestResumeAfterKill kills `erpsync sync invoices` with SIGKILL several
// times mid-sweep, then lets it finish, and proves what "safe to stop" promises: no
// duplicate, no gap, exact money, at most one page re-fetched per
// restart, and bookkeeping that tells what happened.
func TestResumeAfterKill(t *testing.T) {
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

	env := []string{
		"ERPSYNC_DATABASE_URL=" + dbURL,
		"ERPSYNC_ERP_BASE_URL=" + srv.URL,
		"ERPSYNC_ERP_USERNAME=erpsync",
		"ERPSYNC_ERP_PASSWORD=erpsync-demo-password",
		"ERPSYNC_ERP_PAGE_SIZE=" + strconv.Itoa(pageSize),
		"ERPSYNC_LOG_FORMAT=json",
	}

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
}

func head(s []string) []string { return s[:min(len(s), 10)] }

func deref[T any](p *T) any {
	if p == nil {
		return "NULL"
	}
	return *p
}

// checkWarehouseExact proves every invoice of the simulator is in the
// warehouse exactly once, none marked deleted, with exact money.
func checkWarehouseExact(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sim *erpsim.Sim, bigID string) {
	t.Helper()
	// Every invoice exactly once: the key rules out duplicates; count,
	// distinct count and the id sets rule out gaps.
	var count, distinct, deleted int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE deleted_at IS NOT NULL) FROM erp.invoices`).
		Scan(&count, &distinct, &deleted); err != nil {
		t.Fatal(err)
	}
	if count != totalInvoices || distinct != totalInvoices {
		t.Errorf("erp.invoices: count %d, distinct ids %d; want %d and %d", count, distinct, totalInvoices, totalInvoices)
	}
	if deleted != 0 {
		t.Errorf("%d invoices are marked deleted; the ERP deleted none", deleted)
	}
	rows, err := pool.Query(ctx, `SELECT id FROM erp.invoices WHERE source = 'default'`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	gotSet := make(map[string]bool, len(got))
	for _, id := range got {
		gotSet[id] = true
	}
	simSet := map[string]bool{}
	var missing []string
	for _, inv := range sim.Invoices() {
		id := strconv.FormatInt(inv.ID, 10)
		simSet[id] = true
		if !gotSet[id] {
			missing = append(missing, id)
		}
	}
	var extra []string
	for id := range gotSet {
		if !simSet[id] {
			extra = append(extra, id)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		t.Errorf("ids differ from the ERP's: %d missing %v, %d extra %v", len(missing), head(missing), len(extra), head(extra))
	}

	// Exact money: the SQL sum carries 6 fractional digits (the big
	// invoice's) ending in a non-zero digit, so it has the same text as
	// decimal's String.
	var sum, big, bigPayload string
	if err := pool.QueryRow(ctx, `SELECT sum(total_bc)::text FROM erp.invoices`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if want := sim.InvoiceTotal().String(); sum != want {
		t.Errorf("sum(total_bc) = %s, want exactly %s", sum, want)
	}
	if err := pool.QueryRow(ctx, `SELECT total_bc::text, (payload->'total_bc')::text FROM erp.invoices WHERE id = $1`, bigID).
		Scan(&big, &bigPayload); err != nil {
		t.Fatalf("invoice %s: %v", bigID, err)
	}
	if big != bigTotal || bigPayload != bigTotal {
		t.Errorf("invoice %s: total_bc %s, payload total_bc %s; want %s in both", bigID, big, bigPayload, bigTotal)
	}
}

// waitSessionsGone waits until no Postgres session but the test's own is
// left on the database. Postgres finishes (or rolls back) what a killed
// client sent and then drops its session, releasing the stream lock: only
// then is the checkpoint final and the next start able to take the lock.
func waitSessionsGone(t *testing.T, ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	waitFor(t, ctx, timeout, "the killed process's Postgres sessions to end", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> $1`, testdb.AppName).Scan(&n)
		return n == 0, err
	})
}
