package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// fleetSize is one configuration of TestRun's fleet report.
type fleetSize struct {
	sources, invoices int
	// steady is how long the fleet runs once every source is synced: the
	// window in which staleness, fairness and overlaps are judged.
	steady                  time.Duration
	invoiceEvery, listEvery time.Duration // the schedules (@every)
	latency                 time.Duration // the ERP's, before every answer
	poll                    time.Duration // /readyz and the warehouse's sessions sampled this often
}

// The product's defaults: page size, and run slots per replica
// (ERPSYNC_MAX_CONCURRENT_RUNS, which the test leaves unset).
const (
	fleetPageSize = 500
	fleetRunSlots = 8
)

// fleetSizeFromEnv: small by default, so that CI stays fast; the full
// fleet with ERPSYNC_FLEET=full; sizes overridable one by one.
func fleetSizeFromEnv(t *testing.T) fleetSize {
	t.Helper()
	s := fleetSize{sources: 12, invoices: 300, steady: 20 * time.Second,
		invoiceEvery: 4 * time.Second, listEvery: 8 * time.Second, latency: 5 * time.Millisecond, poll: 100 * time.Millisecond}
	if os.Getenv("ERPSYNC_FLEET") == "full" {
		// The product's schedules (5m, 30m) divided by five and fifteen,
		// so that a few minutes hold several runs of every stream.
		s = fleetSize{sources: 200, invoices: 3000, steady: 4 * time.Minute,
			invoiceEvery: time.Minute, listEvery: 2 * time.Minute, latency: 50 * time.Millisecond, poll: 250 * time.Millisecond}
	}
	for key, p := range map[string]*int{"ERPSYNC_FLEET_SOURCES": &s.sources, "ERPSYNC_FLEET_INVOICES": &s.invoices} {
		if v := os.Getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", key, v)
			}
			*p = n
		}
	}
	for key, p := range map[string]*time.Duration{"ERPSYNC_FLEET_DURATION": &s.steady, "ERPSYNC_FLEET_LATENCY": &s.latency} {
		if v := os.Getenv(key); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				t.Fatalf("%s=%q: want a duration", key, v)
			}
			*p = d
		}
	}
	return s
}

func (s fleetSize) every(stream string) time.Duration {
	if stream == "invoices" {
		return s.invoiceEvery
	}
	return s.listEvery
}

// fleetPassword is the variable the config file names for every source's
// password.
const fleetPassword = "FLEET_ERP_PASSWORD"

// writeFleetConfig writes the YAML file of the fleet: one source per
// tenant, the core streams with the fleet's schedules.
func writeFleetConfig(t *testing.T, erpURL string, names []string, s fleetSize) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("sources:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  - name: %s\n    base_url: %s/t/%s\n    username: erpsync\n    password_env: %s\n    page_size: %d\n    streams:\n",
			name, erpURL, name, fleetPassword, fleetPageSize)
		for _, st := range coreStreams {
			fmt.Fprintf(&b, "      %s: { schedule: %q }\n", st, fmt.Sprintf("@every %s", s.every(st)))
		}
	}
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// replica is one `erpsync run` of the fleet and what the test saw of it.
type replica struct {
	p        *process
	addr     string
	app      string // its sessions' application_name
	pid      int
	hwmKiB   int64  // peak RSS (VmHWM) just before the stop
	metrics  string // /metrics just before the stop
	readyz   readyzTally
	peakConn int
	// Sessions seen (backend pids), and runs going (sessions holding a
	// stream lock) per sample.
	backends                   map[int32]bool
	peakRuns, sumRuns, samples int
	peakWorkers                int // Postgres parallel workers of its queries
}

type readyzTally struct {
	polls, unavailable, other int // other: no answer, or neither 200 nor 503
	slowest                   time.Duration
	lastBad                   string
}

// fleetMonitor polls both replicas' /readyz and samples the warehouse's
// sessions until stop is closed.
type fleetMonitor struct {
	mu        gosync.Mutex
	replicas  []*replica
	peakTotal int // connections to the test database, the test's own included
	stop      chan struct{}
	wg        gosync.WaitGroup
}

func startFleetMonitor(ctx context.Context, pool *pgxpool.Pool, replicas []*replica, every time.Duration) *fleetMonitor {
	m := &fleetMonitor{replicas: replicas, stop: make(chan struct{})}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := func(f func()) {
		defer m.wg.Done()
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(every):
			}
			f()
		}
	}
	for _, r := range replicas {
		m.wg.Add(1)
		go tick(func() {
			start := time.Now()
			code, body := getWithBody(hc, "http://"+r.addr+"/readyz")
			took := time.Since(start)
			m.mu.Lock()
			defer m.mu.Unlock()
			r.readyz.polls++
			r.readyz.slowest = max(r.readyz.slowest, took)
			switch code {
			case http.StatusOK:
			case http.StatusServiceUnavailable:
				r.readyz.unavailable++
				r.readyz.lastBad = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
			default:
				r.readyz.other++
				r.readyz.lastBad = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
			}
		})
	}
	m.wg.Add(1)
	go tick(func() {
		// A run holds its stream's lock, erpsync's two-key advisory lock
		// with first key "ERPS", on its session.
		// Parallel query workers carry their leader's application_name
		// but are no connections (they count against
		// max_worker_processes): they are counted apart.
		rows, err := pool.Query(ctx, `
SELECT coalesce(a.application_name, ''), a.pid, a.backend_type = 'parallel worker', EXISTS (SELECT 1 FROM pg_locks l
    WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.classid = x'45525053'::int AND l.objsubid = 2 AND l.granted)
FROM pg_stat_activity a WHERE a.datname = current_database()`)
		if err != nil {
			return
		}
		type sample struct {
			pids          []int32 // client backends
			workers, runs int
		}
		byApp := map[string]*sample{}
		total := 0
		for rows.Next() {
			var app string
			var pid int32
			var worker, running bool
			if rows.Scan(&app, &pid, &worker, &running) != nil {
				continue
			}
			if byApp[app] == nil {
				byApp[app] = &sample{}
			}
			x := byApp[app]
			switch {
			case worker:
				x.workers++
			default:
				x.pids = append(x.pids, pid)
				total++
			}
			if running {
				x.runs++
			}
		}
		rows.Close()
		m.mu.Lock()
		defer m.mu.Unlock()
		m.peakTotal = max(m.peakTotal, total)
		for _, r := range m.replicas {
			x := byApp[r.app]
			if x == nil {
				x = &sample{}
			}
			r.peakConn = max(r.peakConn, len(x.pids))
			r.peakWorkers = max(r.peakWorkers, x.workers)
			for _, pid := range x.pids {
				r.backends[pid] = true
			}
			r.peakRuns = max(r.peakRuns, x.runs)
			r.sumRuns += x.runs
			r.samples++
		}
	})
	return m
}

func (m *fleetMonitor) Stop() {
	close(m.stop)
	m.wg.Wait()
}

func getWithBody(c *http.Client, u string) (int, string) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// procStatusKiB reads a field (VmHWM, VmRSS) of /proc/PID/status; -1
// where there is no /proc.
func procStatusKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// metricTotal sums the samples of name in Prometheus text whose labels
// include every one of labels (written as in the text: reason="locked").
func metricTotal(body, name string, labels ...string) int64 {
	var sum int64
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		lbls, value, ok := strings.Cut(rest, "} ")
		if !ok || !allIn(lbls, labels) {
			continue
		}
		// Counters of events: whole numbers, written as such.
		if n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
			sum += n
		}
	}
	return sum
}

func allIn(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// burstWindow is the width of the windows in which run starts are counted.
const burstWindow = 5 * time.Second

// staleness is the largest time a stream of some source went without a
// completed sweep, once it had one.
type staleness struct {
	worst time.Duration
	job   string // source/stream where it happened
}

// fleetReport is what the fleet report measured.
type fleetReport struct {
	sources                 int
	started, synced, stopAt time.Time
	byStatus                map[string]int
	byPid                   map[int]int
	overlaps                int
	stale                   map[string]staleness // by stream
	staleLate               map[string]staleness // the same, in the second half of the steady window
	// Run starts per burstWindow of the steady window: the busiest
	// window and the mean, to tell bursts of due runs from an even load.
	burstPeak int
	burstMean decimal.Decimal
	// early counts the runs started before their stream was due again.
	early int
	// perInterval is, by stream, the runs started in the steady window
	// per (source, stream) and schedule interval: 1 means each stream ran
	// once per tick of its schedule across the replicas.
	perInterval map[string]decimal.Decimal
	// durations are the succeeded runs' of the steady window, by stream;
	// firstSweeps the invoice runs' before the fleet was first synced.
	durations     map[string][]time.Duration
	firstSweeps   []time.Duration
	peakConnTotal int
	// machineBusy is the share of the machine's CPU time (every process,
	// Postgres and the simulator included) spent busy in the steady window.
	machineBusy decimal.Decimal
}

// cpuTimes is the aggregate line of /proc/stat: busy and all jiffies.
type cpuTimes struct{ busy, total int64 }

// machineCPU reads /proc/stat; zero where there is none.
func machineCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var c cpuTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

// busySince is the busy share, in percent, since an earlier reading.
func (c cpuTimes) busySince(earlier cpuTimes) decimal.Decimal {
	total := c.total - earlier.total
	if total <= 0 {
		return decimal.Zero
	}
	return decimal.NewFromInt(100 * (c.busy - earlier.busy)).Div(decimal.NewFromInt(total))
}

// percentile of durations (sorted here), p in percent.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)*p/100]
}

// analyseFleet checks the runs (no overlap, nothing failed, every run by
// one of the replicas, each replica a fair share, no stream overdue) and
// measures them.
func analyseFleet(t *testing.T, rep *fleetReport, s fleetSize, replicas []*replica, runs []syncRun) {
	t.Helper()
	synced, stopAt := rep.synced, rep.stopAt
	rep.byStatus, rep.byPid, rep.stale, rep.staleLate = map[string]int{}, map[int]int{}, map[string]staleness{}, map[string]staleness{}
	rep.perInterval, rep.durations = map[string]decimal.Decimal{}, map[string][]time.Duration{}
	lateFrom := synced.Add(stopAt.Sub(synced) / 2)
	starts := map[time.Duration]int{} // run starts of the steady window per burstWindow
	ours := map[int]bool{}
	for _, r := range replicas {
		ours[r.pid] = true
	}
	byJob := map[string][]syncRun{}
	steadyRuns := map[string]int{}
	failed := 0
	for _, r := range runs {
		key := r.source + "/" + r.stream
		byJob[key] = append(byJob[key], r)
		rep.byStatus[r.status]++
		rep.byPid[r.pid]++
		if !ours[r.pid] {
			t.Errorf("run %v has a pid of neither replica", r)
		}
		if r.finished == nil || r.status == string(model.StatusRunning) {
			t.Errorf("run %v is still open after both replicas stopped", r)
		}
		if r.status == string(model.StatusFailed) {
			if failed++; failed <= 10 {
				t.Errorf("failed run %v: nothing should fail", r)
			}
		}
		if r.started.Before(synced) && r.stream == "invoices" && r.status == string(model.StatusSucceeded) {
			rep.firstSweeps = append(rep.firstSweeps, r.finished.Sub(r.started))
		}
		if !r.started.Before(synced) {
			steadyRuns[r.stream]++
			starts[r.started.Sub(synced)/burstWindow]++
			if r.status == string(model.StatusSucceeded) {
				rep.durations[r.stream] = append(rep.durations[r.stream], r.finished.Sub(r.started))
			}
		}
	}
	// Runs of one (source, stream) never overlap: sorted by start, each
	// finishes before the next starts (see TestRun's
	// TakesTurnsWithAReplicaAndResumesWhatAKilledOneLeft for why that is
	// the lock's guarantee).
	for key, rs := range byJob {
		for i := 1; i < len(rs); i++ {
			prev, next := rs[i-1], rs[i]
			if prev.finished == nil || prev.finished.After(next.started) {
				if rep.overlaps++; rep.overlaps <= 10 {
					t.Errorf("%s: runs overlap: %v and %v", key, prev, next)
				}
			}
		}
		// Staleness: the longest wait between two completed sweeps, or
		// from the last one to the stop; apart, the waits that ended in
		// the second half of the steady window, after the start-up.
		st := rs[0].stream
		gap := func(from, to time.Time) {
			d := to.Sub(from)
			if d > rep.stale[st].worst {
				rep.stale[st] = staleness{worst: d, job: key}
			}
			if to.After(lateFrom) && d > rep.staleLate[st].worst {
				rep.staleLate[st] = staleness{worst: d, job: key}
			}
		}
		var last *time.Time       // the last succeeded run's end
		var lastStarted time.Time // and start
		for _, r := range rs {
			// A run that starts while the data are fresh by the schedule
			// repeats another's work. The sweep's completion is stamped
			// inside its run (at the start of its last transaction,
			// seconds before the run's end when a bulk load groups many
			// pages), and @every's next time after t is t + interval
			// with t's fraction of a second dropped: so no run is due
			// before the last one's start, so truncated, plus the
			// interval.
			if last != nil && r.started.Before(lastStarted.Truncate(time.Second).Add(s.every(st))) {
				if rep.early++; rep.early <= 5 {
					t.Logf("%s: run %v started %s after the previous one started", key, r, r.started.Sub(lastStarted).Round(time.Millisecond))
				}
			}
			if r.status != string(model.StatusSucceeded) {
				continue
			}
			if last != nil {
				gap(*last, *r.finished)
			}
			last, lastStarted = r.finished, r.started
		}
		if last != nil {
			gap(*last, stopAt)
		}
	}
	for _, st := range coreStreams {
		limit := model.OverdueFactor * s.every(st)
		if w := rep.stale[st]; w.worst > limit {
			t.Errorf("stream %s: %s went %s without a completed sweep, more than %dx its schedule (%s): overdue",
				st, w.job, w.worst.Round(time.Millisecond), model.OverdueFactor, s.every(st))
		}
		ticks := decimal.NewFromInt(int64(stopAt.Sub(synced))).Div(decimal.NewFromInt(int64(s.every(st))))
		if jobs := decimal.NewFromInt(int64(len(byJob) / len(coreStreams))); ticks.IsPositive() && jobs.IsPositive() {
			rep.perInterval[st] = decimal.NewFromInt(int64(steadyRuns[st])).Div(jobs).Div(ticks)
		}
	}
	windows := int64(stopAt.Sub(synced)/burstWindow) + 1
	total := 0
	for _, n := range starts {
		rep.burstPeak = max(rep.burstPeak, n)
		total += n
	}
	rep.burstMean = decimal.NewFromInt(int64(total)).Div(decimal.NewFromInt(windows))
	// Replicas share the schedule: at most a few runs (two replicas'
	// ticks racing past the freshness check) repeat another's work.
	if rep.early*20 > len(runs) {
		t.Errorf("%d of %d runs started before their stream was due again: the replicas repeat each other's work", rep.early, len(runs))
	}
	// A fair share: each replica ran at least a quarter of the runs. With
	// two replicas an even split is a half; one doing (nearly) everything
	// fails this whatever the timing.
	for _, r := range replicas {
		if n := rep.byPid[r.pid]; n*4 < len(runs) {
			t.Errorf("replica #%d ran %d of %d runs, less than a quarter: the replicas do not share the work", r.p.n, n, len(runs))
		}
		if r.readyz.unavailable > 0 || r.readyz.other > 0 {
			t.Errorf("replica #%d: /readyz answered 503 %d times and failed otherwise %d times in %d polls while the database was up; last: %s",
				r.p.n, r.readyz.unavailable, r.readyz.other, r.readyz.polls, r.readyz.lastBad)
		}
		// The product's bound (deploy/kubernetes): a connection per run
		// slot and three for the service pool.
		if r.peakConn > fleetRunSlots+3 {
			t.Errorf("replica #%d held %d connections at once, more than its %d run slots + 3", r.p.n, r.peakConn, fleetRunSlots)
		}
		if r.readyz.polls == 0 {
			t.Errorf("replica #%d: /readyz was never polled", r.p.n)
		}
	}
}

// checkFleetData: every source holds exactly its tenant's invoices (count
// and exact sum), and a completed sweep of every core stream.
func checkFleetData(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fleet *erpsim.Fleet) {
	t.Helper()
	type inv struct {
		rows, distinct, live int
		sum                  decimal.Decimal
	}
	rows, err := pool.Query(ctx, `SELECT source, count(*), count(DISTINCT id), count(*) FILTER (WHERE deleted_at IS NULL),
coalesce(sum(total_bc) FILTER (WHERE deleted_at IS NULL), 0)::text FROM erp.invoices GROUP BY source`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]inv{}
	for rows.Next() {
		var src, sum string
		var x inv
		if err := rows.Scan(&src, &x.rows, &x.distinct, &x.live, &sum); err != nil {
			t.Fatal(err)
		}
		if x.sum, err = decimal.NewFromString(sum); err != nil {
			t.Fatalf("source %s: sum(total_bc) %q: %v", src, sum, err)
		}
		got[src] = x
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	names := fleet.Names()
	if len(got) != len(names) {
		t.Errorf("erp.invoices holds %d sources, want %d", len(got), len(names))
	}
	wrong := 0
	for _, name := range names {
		sim := fleet.Tenant(name)
		want := len(sim.Invoices())
		x := got[name]
		if x.rows != want || x.distinct != want || x.live != want || !x.sum.Equal(sim.InvoiceTotal()) {
			if wrong++; wrong <= 10 {
				t.Errorf("source %s: %d invoices, %d distinct, %d not deleted, sum(total_bc) %s; want %d each and exactly %s",
					name, x.rows, x.distinct, x.live, x.sum, want, sim.InvoiceTotal())
			}
		}
	}
	// A sweep in progress at the stop (cancelled) leaves sweep_id set;
	// the last completed one still counts.
	var complete int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM erp.sync_checkpoints
WHERE stream = ANY($1) AND last_sweep_completed_at IS NOT NULL`, coreStreams).Scan(&complete); err != nil {
		t.Fatal(err)
	}
	if want := len(names) * len(coreStreams); complete != want {
		t.Errorf("%d (source, stream) have a completed sweep, want %d", complete, want)
	}
}

func (rep *fleetReport) markdown(s fleetSize, replicas []*replica) string {
	var b strings.Builder
	mib := func(kib int64) string {
		if kib < 0 {
			return "n/a"
		}
		return decimal.NewFromInt(kib).Div(decimal.NewFromInt(1024)).StringFixed(1) + " MiB"
	}
	total := 0
	for _, n := range rep.byPid {
		total += n
	}
	steady := rep.stopAt.Sub(rep.synced)
	fmt.Fprintf(&b, "| fleet | |\n|---|---|\n")
	fmt.Fprintf(&b, "| sources x streams | %d x %d (%s) = %d jobs |\n", rep.sources, len(coreStreams),
		strings.Join(coreStreams, ", "), rep.sources*len(coreStreams))
	fmt.Fprintf(&b, "| invoices | %d per source, %d in all; page size %d; ERP latency %s per answer |\n",
		s.invoices, s.invoices*rep.sources, fleetPageSize, s.latency)
	fmt.Fprintf(&b, "| schedules | invoices @every %s, the other three @every %s |\n", s.invoiceEvery, s.listEvery)
	fmt.Fprintf(&b, "| replicas | 2 x `erpsync run`, default settings (%d run slots each) |\n", fleetRunSlots)
	fmt.Fprintf(&b, "| first full sync | %s after the start; invoice runs until then: median %s, p95 %s, max %s over %d runs |\n",
		rep.synced.Sub(rep.started).Round(time.Second), percentile(rep.firstSweeps, 50).Round(time.Millisecond),
		percentile(rep.firstSweeps, 95).Round(time.Millisecond), percentile(rep.firstSweeps, 100).Round(time.Millisecond), len(rep.firstSweeps))
	fmt.Fprintf(&b, "| steady state measured | %s (total run %s) |\n", steady.Round(time.Second), rep.stopAt.Sub(rep.started).Round(time.Second))
	statuses := []string{}
	for _, st := range []model.RunStatus{model.StatusSucceeded, model.StatusFailed, model.StatusCancelled} {
		statuses = append(statuses, fmt.Sprintf("%d %s", rep.byStatus[string(st)], st))
	}
	fmt.Fprintf(&b, "| runs | %d: %s |\n", total, strings.Join(statuses, ", "))
	for _, r := range replicas {
		share := "0"
		if total > 0 {
			share = decimal.NewFromInt(int64(rep.byPid[r.pid] * 100)).Div(decimal.NewFromInt(int64(total))).StringFixed(1)
		}
		fmt.Fprintf(&b, "| replica #%d | %d runs (%s %%); ticks skipped: %d lock held by the other, %d no run slot free |\n",
			r.p.n, rep.byPid[r.pid], share,
			metricTotal(r.metrics, "erpsync_runs_skipped_total", `reason="locked"`),
			metricTotal(r.metrics, "erpsync_runs_skipped_total", `reason="capacity"`))
	}
	fmt.Fprintf(&b, "| overlapping runs of one (source, stream) | %d |\n", rep.overlaps)
	fmt.Fprintf(&b, "| runs started before their stream was due again (repeated work) | %d |\n", rep.early)
	for _, st := range coreStreams {
		ds := rep.durations[st]
		fmt.Fprintf(&b, "| run duration, %s (steady state, succeeded) | median %s, p95 %s, max %s over %d runs |\n", st,
			percentile(ds, 50).Round(time.Millisecond), percentile(ds, 95).Round(time.Millisecond), percentile(ds, 100).Round(time.Millisecond), len(ds))
	}
	fmt.Fprintf(&b, "| run starts per %s (steady state) | mean %s, busiest %d |\n", burstWindow, rep.burstMean.StringFixed(1), rep.burstPeak)
	for _, st := range coreStreams {
		every := s.every(st)
		ratio := func(d time.Duration) string {
			return decimal.NewFromInt(int64(d)).Div(decimal.NewFromInt(int64(every))).StringFixed(2)
		}
		w, late := rep.stale[st], rep.staleLate[st]
		fmt.Fprintf(&b, "| largest staleness, %s (schedule %s) | %s = %sx, at %s; in the second half: %s = %sx; runs per (source, stream) per interval: %s |\n",
			st, every, w.worst.Round(100*time.Millisecond), ratio(w.worst), w.job,
			late.worst.Round(100*time.Millisecond), ratio(late.worst), rep.perInterval[st].StringFixed(2))
	}
	for _, r := range replicas {
		cpu := "n/a"
		if ps := r.p.cmd.ProcessState; ps != nil {
			cpu = (ps.UserTime() + ps.SystemTime()).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| replica #%d | peak RSS (VmHWM) %s; CPU %s over the whole run; %d ERP requests |\n",
			r.p.n, mib(r.hwmKiB), cpu, metricTotal(r.metrics, "erpsync_erp_requests_total"))
	}
	fmt.Fprintf(&b, "| machine CPU busy in the steady state | %s %% of %d cores (Postgres, the simulator and the replicas; other work on the machine included) |\n",
		rep.machineBusy.StringFixed(1), runtime.NumCPU())
	conns := []string{}
	for _, r := range replicas {
		conns = append(conns, fmt.Sprintf("replica #%d %d", r.p.n, r.peakConn))
	}
	fmt.Fprintf(&b, "| peak Postgres connections | %s; the test database in all %d (the test's own included) |\n",
		strings.Join(conns, ", "), rep.peakConnTotal)
	for _, r := range replicas {
		mean := decimal.Zero
		if r.samples > 0 {
			mean = decimal.NewFromInt(int64(r.sumRuns)).Div(decimal.NewFromInt(int64(r.samples)))
		}
		fmt.Fprintf(&b, "| replica #%d run slots | %s in use on average, %d at peak, of %d; %d connections opened in all; at most %d parallel workers at once |\n",
			r.p.n, mean.StringFixed(1), r.peakRuns, fleetRunSlots, len(r.backends), r.peakWorkers)
	}
	for _, r := range replicas {
		fmt.Fprintf(&b, "| replica #%d /readyz | %d polls, %d x 503, %d other failures, slowest answer %s |\n",
			r.p.n, r.readyz.polls, r.readyz.unavailable, r.readyz.other, r.readyz.slowest.Round(time.Millisecond))
	}
	return b.String()
}
