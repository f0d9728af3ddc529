package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// An ERP answering 400 MB on a one-list route fails the run with a
// message naming the route, the limit and the setting, while the
// process's peak memory stays far below the 256 MiB of the Kubernetes
// example.
func TestHugeAnswerFailsWithBoundedMemory(t *testing.T) {
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
}

// The first SIGINT stops `erpsync sync` after the commit in flight and
// starts no further stream: no lock, no run row, no request for them.
func TestSyncStartsNoStreamAfterSignal(t *testing.T) {
	bin := erpsyncBinary(t)
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
	p.stop(t, syscall.SIGINT, 20*time.Second)
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
}

// SIGTERM in the worst case (a commit blocked on a lock another session
// holds, an ERP that does not answer the revoke) still ends the daemon
// within ERPSYNC_SHUTDOWN_TIMEOUT: grace, abort, revoke and HTTP phases in
// turn.
func TestSIGTERMWorstCaseFitsShutdownTimeout(t *testing.T) {
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
