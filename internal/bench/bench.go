// Package bench is the performance reports behind `make bench` and `make
// freshness`. The first: a full invoice sync of N simulated invoices
// measured against the COPY of the very same rows (the ingest limit of
// this machine), an unchanged re-sync, a re-sync comparing every page (a
// login's weekly full comparison), a re-sync after 1% of the rows
// changed (with and without history), a naive row-by-row baseline, and the
// panel report: the finance dashboard's invoice panels as each login reads
// them against the same question on a typed copy of the invoices
// (panels.go). The second: how soon new invoices reach the warehouse while
// the daemon follows the list, and what following costs the ERP
// (freshness.go).
package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/dashboards"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// Options of a report.
type Options struct {
	AdminURL  string // server where the bench creates its databases
	Binary    string // the erpsync binary to run as the measured child
	Invoices  int
	Baseline  int // invoices of the row-by-row baseline
	Runs      int
	PageSize  int
	Prefetch  int
	ExtraArgs []string
	// The panel report, after the first run: the dashboard it reads, the
	// timed executions of each query (after one warm-up), and whether to
	// print EXPLAIN (ANALYZE, BUFFERS) of the queries that miss a goal.
	Panels    bool
	Dashboard string
	PanelRuns int
	Explain   bool
	// DatabasePrefix starts the names of the databases the bench creates
	// and drops (default erpsync_bench_ and a random suffix): two benches
	// on one server never drop each other's.
	DatabasePrefix string
	// GoalInvoices: the goals are stated for this many invoices and more
	// (default 1,000,000); a smaller report prints its figures against
	// them but checks none.
	GoalInvoices int
}

// sample is what one run measured.
type sample struct {
	syncSecs, copySecs, resyncSecs float64
	peakRSS, resyncRSS             int64 // bytes
	// A re-sync comparing every page with the warehouse, nothing changed:
	// a login's full comparison (once a week, and after erpsync reset).
	fullSecs                    float64
	fullWAL                     int64
	syncWAL, copyWAL, resyncWAL int64
	// The tables autovacuum visited during the unchanged re-sync: its WAL
	// counts theirs.
	resyncVacuumed []string
	rows           int64
	// A re-sync after 1% of the invoices changed, keeping history (the
	// default) and not keeping it.
	changedSecs, changedNoHistorySecs float64
	changedWAL, changedNoHistoryWAL   int64
	versions                          int64 // history rows the first one wrote
	// Updates of erp.invoices over the whole run, and of them the HOT
	// ones (no index written): a column an index reads that an update
	// changes makes it a non-HOT one.
	updates, hotUpdates int64
	indexes             int // of erp.invoices, and of the COPY target
	panelMisses         []string
}

// GoalsMissed is a report that missed goals: Run returns it once the
// whole report is printed, and the bench exits non-zero.
type GoalsMissed struct{ Misses []string }

func (g *GoalsMissed) Error() string {
	return fmt.Sprintf("%d goal(s) missed: %s", len(g.Misses), strings.Join(g.Misses, "; "))
}

// The goals of the sync figures, on their medians.
const (
	copyGoal     = 1.20 // first load / COPY, at most
	resyncWALPct = 1.0  // unchanged re-sync's WAL, % of the first load's, at most
	resyncGoal   = 0.50 // unchanged re-sync / first load, at most
	speedupGoal  = 20.0 // first load's rows/s over the row-by-row baseline's, at least
)

// syncMisses are the goals of the sync figures that the medians miss, as
// the report prints them.
func syncMisses(copyRatio, walPct, resyncRatio, speedup float64) []string {
	var out []string
	if over(copyRatio, copyGoal) {
		out = append(out, fmt.Sprintf("sync / COPY %.2f (goal <= %.2f)", copyRatio, copyGoal))
	}
	if rounded(walPct, 3) > resyncWALPct {
		out = append(out, fmt.Sprintf("unchanged re-sync WAL %.3f%% of the first sync (goal <= %.0f%%)", walPct, resyncWALPct))
	}
	if over(resyncRatio, resyncGoal) {
		out = append(out, fmt.Sprintf("re-sync / full sync %.2f (goal <= %.2f)", resyncRatio, resyncGoal))
	}
	if rounded(speedup, 1) < speedupGoal {
		out = append(out, fmt.Sprintf("speed-up over the row-by-row baseline %.1fx (goal >= %.0fx)", speedup, speedupGoal))
	}
	return out
}

// Run prints the report to out.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.DatabasePrefix == "" {
		o.DatabasePrefix = randomPrefix()
	}
	if o.GoalInvoices <= 0 {
		o.GoalInvoices = 1000000
	}
	sim := erpsim.New(erpsim.Options{Invoices: o.Invoices, PageSizeCap: o.PageSize})
	sim.PreEncodeInvoicePages(o.PageSize)
	simCtx, stopSim := context.WithCancel(ctx)
	defer stopSim()
	base, err := serveSim(simCtx, sim)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "erpsync bench: %d invoices, page size %d, prefetch %d, %d runs\n", o.Invoices, o.PageSize, o.Prefetch, o.Runs)
	var samples []sample
	var panels bytes.Buffer // the panel report of the first run, printed last
	for i := 0; i < o.Runs; i++ {
		s, err := o.runOnce(ctx, sim, base, i, &panels)
		if err != nil {
			out.Write(panels.Bytes())
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		fmt.Fprintf(out, "  run %d: first load %.2fs = %.2fx COPY (%.2fs), peak RSS %.1f MiB, re-sync %.2fs, every page compared %.2fs, 1%% changed %.2fs (no history %.2fs)\n",
			i+1, s.syncSecs, s.syncSecs/s.copySecs, s.copySecs, mib(s.peakRSS), s.resyncSecs, s.fullSecs, s.changedSecs, s.changedNoHistorySecs)
		if len(s.resyncVacuumed) > 0 {
			fmt.Fprintf(out, "    (during the unchanged re-sync, a vacuum of %s: its WAL is counted as the re-sync's)\n", strings.Join(s.resyncVacuumed, ", "))
		}
		samples = append(samples, s)
	}
	naive, err := o.naiveBaseline(ctx, false)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	naivePaged, err := o.naiveBaseline(ctx, true)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}

	med := func(f func(sample) float64) float64 {
		v := make([]float64, len(samples))
		for i, s := range samples {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	syncS := med(func(s sample) float64 { return s.syncSecs })
	copyS := med(func(s sample) float64 { return s.copySecs })
	ratio := med(func(s sample) float64 { return s.syncSecs / s.copySecs })
	rss := med(func(s sample) float64 { return float64(s.peakRSS) })
	wal := med(func(s sample) float64 { return float64(s.syncWAL) })
	copyWAL := med(func(s sample) float64 { return float64(s.copyWAL) })
	rwal := med(func(s sample) float64 { return float64(s.resyncWAL) })
	rsecs := med(func(s sample) float64 { return s.resyncSecs })
	rrss := med(func(s sample) float64 { return float64(s.resyncRSS) })
	fullS := med(func(s sample) float64 { return s.fullSecs })
	fullWAL := med(func(s sample) float64 { return float64(s.fullWAL) })
	rowsPerSec := float64(o.Invoices) / syncS
	chS := med(func(s sample) float64 { return s.changedSecs })
	chWAL := med(func(s sample) float64 { return float64(s.changedWAL) })
	chNoS := med(func(s sample) float64 { return s.changedNoHistorySecs })
	chNoWAL := med(func(s sample) float64 { return float64(s.changedNoHistoryWAL) })
	versions := med(func(s sample) float64 { return float64(s.versions) })
	updates := med(func(s sample) float64 { return float64(s.updates) })
	hot := med(func(s sample) float64 { return float64(s.hotUpdates) })

	fmt.Fprintf(out, `
medians of %d runs, N = %d
  first load (full sync) %8.2f s = %.2fx COPY   %10.0f rows/s   peak RSS %6.1f MiB   WAL %8.1f MiB
  COPY of the same rows  %8.2f s   %10.0f rows/s                        WAL %8.1f MiB
                         (into a table LIKE erp.invoices INCLUDING ALL: its primary key and all its %d indexes, as defined on erp.invoices)
  sync / COPY            %8.2f     (target <= %.2f)
  unchanged re-sync      %8.2f s                     peak RSS %6.1f MiB   WAL %8.3f MiB = %.3f%% of the first sync (target <= %.0f%%)
  re-sync / full sync    %8.2f     (target <= %.2f)
  every page compared    %8.2f s                                           WAL %8.3f MiB   (unchanged, after erpsync reset: a login's weekly full comparison)
  1%% changed, history    %8.2f s   %10.0f versions kept                    WAL %8.1f MiB
  1%% changed, no history %8.2f s                                           WAL %8.1f MiB
  updates of erp.invoices %7.0f, of them HOT %.0f (%.0f%%): every write of a run, the re-syncs' included
  row-by-row baseline    %8.2f s   %10.0f rows/s   (N = %d, INSERT ... ON CONFLICT per row, each its own transaction)
  speed-up over baseline %8.1fx    (target >= %.0fx)
  row-by-row, 1 tx/page  %8.2f s   %10.0f rows/s   (N = %d, the same loop with one transaction per page)
  speed-up over that     %8.1fx
`, len(samples), o.Invoices,
		syncS, syncS/copyS, rowsPerSec, mib(int64(rss)), mib(int64(wal)),
		copyS, float64(o.Invoices)/copyS, mib(int64(copyWAL)),
		samples[0].indexes,
		ratio, copyGoal,
		rsecs, mib(int64(rrss)), mib(int64(rwal)), 100*rwal/wal, resyncWALPct,
		rsecs/syncS, resyncGoal,
		fullS, mib(int64(fullWAL)),
		chS, versions, mib(int64(chWAL)),
		chNoS, mib(int64(chNoWAL)),
		updates, hot, 100*hot/max(updates, 1),
		naive.secs, naive.rowsPerSec, o.Baseline,
		rowsPerSec/naive.rowsPerSec, speedupGoal,
		naivePaged.secs, naivePaged.rowsPerSec, o.Baseline,
		rowsPerSec/naivePaged.rowsPerSec)
	if _, err := out.Write(panels.Bytes()); err != nil {
		return err
	}
	return o.conclude(out, append(syncMisses(ratio, 100*rwal/wal, rsecs/syncS, rowsPerSec/naive.rowsPerSec), samples[0].panelMisses...))
}

// conclude ends the report with the goals its figures miss (a
// *GoalsMissed), or says every goal was met. The goals are stated for
// o.GoalInvoices invoices and more: a smaller report lists the figures
// past a goal but checks none, since fixed costs (a run's start, ANALYZE,
// the planner's choices on small tables) weigh differently there, and a
// quick look at 10,000 invoices is no failure.
func (o Options) conclude(out io.Writer, misses []string) error {
	if o.Invoices < o.GoalInvoices {
		fmt.Fprintf(out, "\ngoals not checked: they are stated for %s invoices and more, this report is of %s (--goal-invoices to check them here)\n",
			thousands(o.GoalInvoices), thousands(o.Invoices))
		for _, m := range misses {
			fmt.Fprintf(out, "  past a goal: %s\n", m)
		}
		return nil
	}
	if len(misses) == 0 {
		_, err := fmt.Fprintf(out, "\nevery goal met\n")
		return err
	}
	fmt.Fprintf(out, "\ngoals missed:\n")
	for _, m := range misses {
		fmt.Fprintf(out, "  %s\n", m)
	}
	return &GoalsMissed{Misses: misses}
}

// randomPrefix starts the names of a report's databases when it is given
// no prefix: two reports on one server never drop each other's.
func randomPrefix() string {
	var b [4]byte
	rand.Read(b[:])
	return "erpsync_bench_" + hex.EncodeToString(b[:]) + "_"
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// runOnce measures one run on a fresh database; the first also writes the
// panel report to panels, after every measured step.
func (o Options) runOnce(ctx context.Context, sim *erpsim.Sim, base string, i int, panels io.Writer) (sample, error) {
	var s sample
	name := fmt.Sprintf("%s%d", o.DatabasePrefix, i)
	dbURL, drop, err := freshDB(ctx, o.AdminURL, name)
	if err != nil {
		return s, err
	}
	defer drop()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return s, err
	}
	defer admin.Close(ctx)
	// The schema is the measured binary's own, so that a binary of
	// another release is measured on its schema.
	if err := o.command(ctx, dbURL, base, "migrate"); err != nil {
		return s, err
	}
	admin.Exec(ctx, "CHECKPOINT")

	lsn0 := lsn(ctx, admin)
	s.syncSecs, s.peakRSS, err = o.child(ctx, dbURL, base)
	if err != nil {
		return s, err
	}
	lsn1 := lsn(ctx, admin)
	s.syncWAL = walDiff(ctx, admin, lsn1, lsn0)
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM erp.invoices`).Scan(&s.rows); err != nil {
		return s, err
	}
	if s.rows != int64(o.Invoices) {
		return s, fmt.Errorf("sync wrote %d rows, want %d", s.rows, o.Invoices)
	}

	// The ingest limit: COPY the rows the sync wrote into a table of the
	// same shape (same columns, same primary key and indexes).
	var buf bytes.Buffer
	if _, err := admin.PgConn().CopyTo(ctx, &buf, `COPY erp.invoices TO STDOUT (FORMAT binary)`); err != nil {
		return s, err
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE erp.invoices_copy (LIKE erp.invoices INCLUDING ALL)`); err != nil {
		return s, err
	}
	// Every index of erp.invoices has its like on the COPY target: the
	// same definition but for its name and table.
	var copyIndexes int
	var unmatched []string
	if err := admin.QueryRow(ctx, `WITH defs AS (SELECT i.indrelid, regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '') AS def
		FROM pg_index i WHERE i.indrelid IN ('erp.invoices'::regclass, 'erp.invoices_copy'::regclass))
		SELECT (SELECT count(*) FROM defs WHERE indrelid = 'erp.invoices'::regclass),
		       (SELECT count(*) FROM defs WHERE indrelid = 'erp.invoices_copy'::regclass),
		       coalesce((SELECT array_agg(def) FROM defs d WHERE indrelid = 'erp.invoices'::regclass
		                 AND NOT EXISTS (SELECT 1 FROM defs c WHERE c.indrelid = 'erp.invoices_copy'::regclass AND c.def = d.def)), '{}')`).
		Scan(&s.indexes, &copyIndexes, &unmatched); err != nil {
		return s, err
	}
	if copyIndexes != s.indexes || len(unmatched) > 0 {
		return s, fmt.Errorf("the COPY target has %d indexes, erp.invoices %d (not on the target: %v): the comparison would be unfair", copyIndexes, s.indexes, unmatched)
	}
	admin.Exec(ctx, "CHECKPOINT")
	lsn2 := lsn(ctx, admin)
	start := time.Now()
	if _, err := admin.PgConn().CopyFrom(ctx, &buf, `COPY erp.invoices_copy FROM STDIN (FORMAT binary)`); err != nil {
		return s, err
	}
	s.copySecs = time.Since(start).Seconds()
	s.copyWAL = walDiff(ctx, admin, lsn(ctx, admin), lsn2)
	admin.Exec(ctx, `DROP TABLE erp.invoices_copy`)
	// Autovacuum would visit the freshly loaded table during the re-sync
	// and its WAL would be counted as the re-sync's: vacuum it first.
	admin.Exec(ctx, `VACUUM ANALYZE erp.invoices`)
	admin.Exec(ctx, "CHECKPOINT")

	lsn3 := lsn(ctx, admin)
	vacuumed := vacuums(ctx, admin)
	s.resyncSecs, s.resyncRSS, err = o.child(ctx, dbURL, base)
	if err != nil {
		return s, err
	}
	s.resyncWAL = walDiff(ctx, admin, lsn(ctx, admin), lsn3)
	s.resyncVacuumed = vacuumedSince(ctx, admin, vacuumed)

	// The full comparison: the same re-sync after erpsync reset, which
	// forgets the page digests, so that every page is compared.
	if err := o.command(ctx, dbURL, base, "reset", "invoices", "--yes"); err != nil {
		return s, err
	}
	admin.Exec(ctx, "CHECKPOINT")
	lsn4 := lsn(ctx, admin)
	if s.fullSecs, _, err = o.child(ctx, dbURL, base); err != nil {
		return s, err
	}
	s.fullWAL = walDiff(ctx, admin, lsn(ctx, admin), lsn4)

	// The steady state of a busy installation: 1% of the invoices
	// changed since the last sweep, without history, then with it. The
	// versions are written by the table's trigger, which only the
	// schema's owner can turn off (the configuration cannot): without
	// history is with the trigger disabled. The last re-sync's range on
	// the database's clock is what the panel of invoices changed this
	// week is asked about.
	var changed dashboards.TimeRange
	for _, noHistory := range []bool{true, false} {
		o.changeOnePercent(sim, i, noHistory)
		if noHistory {
			if _, err := admin.Exec(ctx, `ALTER TABLE erp.invoices DISABLE TRIGGER guard_rows`); err != nil {
				return s, err
			}
		}
		admin.Exec(ctx, "CHECKPOINT")
		before := lsn(ctx, admin)
		changed.From = dbClock(ctx, admin).Truncate(time.Millisecond) // Grafana's precision
		secs, _, err := o.child(ctx, dbURL, base)
		if err != nil {
			return s, err
		}
		if noHistory {
			if _, err := admin.Exec(ctx, `ALTER TABLE erp.invoices ENABLE TRIGGER guard_rows`); err != nil {
				return s, err
			}
		}
		changed.To = dbClock(ctx, admin).Truncate(time.Millisecond).Add(time.Millisecond)
		w := walDiff(ctx, admin, lsn(ctx, admin), before)
		if noHistory {
			s.changedNoHistorySecs, s.changedNoHistoryWAL = secs, w
			continue
		}
		s.changedSecs, s.changedWAL = secs, w
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM erp.invoices_history`).Scan(&s.versions); err != nil {
			return s, err
		}
	}
	// The child processes have exited, so their counts are in the
	// statistics.
	if err := admin.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'erp.invoices'::regclass`).
		Scan(&s.updates, &s.hotUpdates); err != nil {
		return s, err
	}
	if i == 0 && o.Panels {
		if s.panelMisses, err = o.panelReport(ctx, dbURL, changed, panels); err != nil {
			return s, fmt.Errorf("panel report: %w", err)
		}
	}
	return s, nil
}

// vacuums are the counts of (auto)vacuums of each table of the database.
func vacuums(ctx context.Context, c *pgx.Conn) map[string]int64 {
	out := map[string]int64{}
	rows, err := c.Query(ctx, `SELECT schemaname || '.' || relname, autovacuum_count + vacuum_count FROM pg_stat_user_tables`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if rows.Scan(&name, &n) == nil {
			out[name] = n
		}
	}
	return out
}

// vacuumedSince are the tables vacuumed since the counts before, sorted. The statistics
// lag a little: what a vacuum still running did not count yet is missed.
func vacuumedSince(ctx context.Context, c *pgx.Conn, before map[string]int64) []string {
	var out []string
	for name, n := range vacuums(ctx, c) {
		if n > before[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func dbClock(ctx context.Context, c *pgx.Conn) time.Time {
	var t time.Time
	c.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t
}

// changeOnePercent changes the total of one invoice in a hundred, a
// different hundredth each time, and encodes the pages again.
func (o Options) changeOnePercent(sim *erpsim.Sim, run int, second bool) {
	offset := 2*run + 1
	if second {
		offset++
	}
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		for j := offset % 100; j < len(inv); j += 100 {
			inv[j].TotalBC = inv[j].TotalBC.Add(decimal.New(1, -2))
		}
		return inv
	})
	sim.PreEncodeInvoicePages(o.PageSize)
}

// child runs `erpsync sync invoices` as a separate process, so its peak
// memory is its own. It runs under /usr/bin/time: the rusage of a child
// that Go starts directly counts the bench's own memory, since the child
// shares it (vfork) until exec.
func (o Options) child(ctx context.Context, dbURL, base string, env ...string) (secs float64, rss int64, err error) {
	timeOut, err := os.CreateTemp("", "erpsync-bench-time")
	if err != nil {
		return 0, 0, err
	}
	timeOut.Close()
	defer os.Remove(timeOut.Name())
	args := []string{"-f", "%M", "-o", timeOut.Name(), o.Binary, "sync", "--prefetch", strconv.Itoa(o.Prefetch)}
	args = append(append(args, o.ExtraArgs...), "invoices")
	cmd := exec.CommandContext(ctx, "/usr/bin/time", args...)
	cmd.Env = erpsyncEnv(dbURL, base, o.PageSize, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("erpsync sync: %v: %s", err, stderr.String())
	}
	secs = time.Since(start).Seconds()
	out, err := os.ReadFile(timeOut.Name())
	if err != nil {
		return 0, 0, err
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("reading /usr/bin/time output %q: %w", out, err)
	}
	return secs, kb * 1024, nil
}

// command runs the measured binary with args (erpsync migrate, erpsync
// reset ...) and waits for it to succeed.
func (o Options) command(ctx context.Context, dbURL, base string, args ...string) error {
	cmd := exec.CommandContext(ctx, o.Binary, args...)
	cmd.Env = erpsyncEnv(dbURL, base, o.PageSize)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("erpsync %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// migrate brings the database at dbURL to the schema of this tree.
func migrate(ctx context.Context, dbURL string) error {
	pool, err := db.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = db.Migrate(ctx, pool, nil)
	return err
}

// freshDB creates the database name on the server at adminURL (dropping
// one left by an earlier report) and returns its URL and what drops it.
func freshDB(ctx context.Context, adminURL, name string) (string, func(), error) {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("bench database server: %w", err)
	}
	defer admin.Close(ctx)
	admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), adminURL)
		if err == nil {
			c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}
	return u.String(), drop, nil
}

func lsn(ctx context.Context, c *pgx.Conn) string {
	var s string
	c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s)
	return s
}

func walDiff(ctx context.Context, c *pgx.Conn, to, from string) int64 {
	var n int64
	c.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, to, from).Scan(&n)
	return n
}

type naiveResult struct{ secs, rowsPerSec float64 }

// naiveBaseline is what erpsync would be without bulk writes: one
// INSERT ... ON CONFLICT per record, each its own transaction, or with
// perPage one transaction per page.
func (o Options) naiveBaseline(ctx context.Context, perPage bool) (naiveResult, error) {
	sim := erpsim.New(erpsim.Options{Invoices: o.Baseline, PageSizeCap: o.PageSize})
	sim.PreEncodeInvoicePages(o.PageSize)
	simCtx, stop := context.WithCancel(ctx)
	defer stop()
	base, err := serveSim(simCtx, sim)
	if err != nil {
		return naiveResult{}, err
	}

	dbURL, drop, err := freshDB(ctx, o.AdminURL, o.DatabasePrefix+"naive")
	if err != nil {
		return naiveResult{}, err
	}
	defer drop()
	if err := migrate(ctx, dbURL); err != nil {
		return naiveResult{}, err
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return naiveResult{}, err
	}
	defer conn.Close(ctx)
	client, err := erp.New(erp.Options{BaseURL: base, Username: "erpsync", Password: "erpsync-demo-password"})
	if err != nil {
		return naiveResult{}, err
	}
	start := time.Now()
	n := 0
	pages := client.List(erp.ListRequest{Path: "/sales/api/invoices/list/", Paging: erp.CursorPaged, PageSize: o.PageSize})
	for !pages.Done() {
		page, err := pages.Next(ctx)
		if err != nil {
			return naiveResult{}, err
		}
		var exec interface {
			Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		} = conn
		var tx pgx.Tx
		if perPage {
			if tx, err = conn.Begin(ctx); err != nil {
				return naiveResult{}, err
			}
			exec = tx
		}
		for _, raw := range page.Records {
			rec, err := erp.ParseRecord(raw)
			if err != nil {
				return naiveResult{}, err
			}
			id, _, _ := rec.Text("id")
			total, _, _ := rec.Money("total_bc")
			if _, err := exec.Exec(ctx, `
INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash)
VALUES ('naive', $1, '1', '1', $2, $3, '\x00')
ON CONFLICT (source, id) DO UPDATE SET total_bc = EXCLUDED.total_bc, payload = EXCLUDED.payload, synced_at = now()
WHERE erp.invoices.payload IS DISTINCT FROM EXCLUDED.payload`, id, db.Numeric(total), []byte(raw)); err != nil {
				return naiveResult{}, err
			}
			n++
		}
		page.Release()
		if perPage {
			if err := tx.Commit(ctx); err != nil {
				return naiveResult{}, err
			}
		}
	}
	secs := time.Since(start).Seconds()
	return naiveResult{secs: secs, rowsPerSec: float64(n) / secs}, nil
}
