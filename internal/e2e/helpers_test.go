package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

const (
	totalInvoices = 3000
	pageSize      = 50
	totalPages    = totalInvoices / pageSize
	bigTotal      = "123456789012345678.123456" // no float64 can hold it
	invoicesPath  = "/sales/api/invoices/list/"
)

// process is one run of the binary.
type process struct {
	n              int
	cmd            *exec.Cmd
	stdout, stderr testutil.Buffer
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

// waitRequest waits until the simulator has been asked for path, failing
// the test if p exits first.
func waitRequest(t *testing.T, ctx context.Context, sim *erpsim.Sim, p *process, path string) {
	t.Helper()
	pollUntil(t, ctx, 30*time.Second, 10*time.Millisecond, "a request for "+path, []*process{p}, func() (bool, error) {
		for _, r := range sim.Requests() {
			if r.Path == path {
				return true, nil
			}
		}
		return false, nil
	})
}

// stopInterrupted stops p, `erpsync command`, with sig and checks that it
// exited with code, the status of a command that signal interrupted, and
// said so.
func stopInterrupted(t *testing.T, p *process, command string, sig syscall.Signal, code int) {
	t.Helper()
	p.stop(t, sig, 20*time.Second)
	name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || exit.ExitCode() != code {
		t.Errorf("erpsync %s after %s: %v, want exit status %d\n%s", command, name, p.err, code, p.output())
	}
	if want := "erpsync " + command + ": interrupted by " + name; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr does not say %q\n%s", want, p.output())
	}
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

func baseEnv(dbURL, erpURL string, extra ...string) []string {
	return append([]string{
		"ERPSYNC_DATABASE_URL=" + dbURL,
		"ERPSYNC_ERP_BASE_URL=" + erpURL,
		"ERPSYNC_ERP_USERNAME=erpsync",
		"ERPSYNC_ERP_PASSWORD=erpsync-demo-password",
		"ERPSYNC_LOG_FORMAT=json",
		"PATH=" + os.Getenv("PATH"),
	}, extra...)
}

// waitFirstInvoicePage waits until p has committed an invoice page.
func waitFirstInvoicePage(t *testing.T, ctx context.Context, pool *pgxpool.Pool, p *process) {
	t.Helper()
	pollUntil(t, ctx, 30*time.Second, 10*time.Millisecond, "the first invoice page to commit", []*process{p}, func() (bool, error) {
		var pages int64
		err := pool.QueryRow(ctx, `SELECT pages FROM erp.sync_checkpoints WHERE stream = 'invoices'`).Scan(&pages)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return pages >= 1, err
	})
}
