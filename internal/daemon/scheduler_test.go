package daemon

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestScheduler documents the scheduler: a job per (source, stream), or two for a
// list that is followed, each on its schedule, within the run slots and the
// source's request budget, backing off failing logins, and stopping runs within
// the grace period. The first rules hold for the service on its own, built from
// its deps as Run builds it; the later ones for a whole daemon.
func TestScheduler(t *testing.T) {
	// A source's max_concurrent_requests bounds the runs it has at once, and so the
	// requests its ERP sees at once (a run has one in flight at a time). Four streams
	// every second on an ERP that takes 300 ms a request: with a budget of 1 the ERP
	// never sees two requests at once while every stream keeps succeeding, and the
	// waits for the budget are reported; with 3 it does see more than one, which is
	// what makes the first case a test.
	t.Run("BoundsASourcesRunsByItsRequestBudget", func(t *testing.T) {
		if testing.Short() {
			t.Skip("scheduler test: skipped with -short")
		}
		streamNames := []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations"}
		for _, tt := range []struct {
			budget int
		}{{1}, {3}} {
			t.Run(fmt.Sprintf("max_concurrent_requests=%d", tt.budget), func(t *testing.T) {
				sim, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50, Latency: 300 * time.Millisecond})
				src := config.Source{Name: "default", BaseURL: simURL, PageSize: 50, MaxConcurrentRequests: tt.budget}
				for _, n := range streamNames {
					src.Streams = append(src.Streams, config.StreamConfig{Name: n, Schedule: "@every 1s"})
				}
				st := startScheduler(t, src, schedTarget(t, "default", simURL, erpsim.User{Username: goodUser, Password: goodPassword}))
				started := time.Now()
				everyStreamTwice := func() (bool, error) {
					for _, s := range streamNames {
						if ok, _, err := st.runCounts("default", s); err != nil || ok < 2 {
							return false, err
						}
					}
					return true, nil
				}
				if tt.budget == 1 {
					testutil.Eventually(t, 90*time.Second, 50*time.Millisecond, "4 s to pass and every stream to succeed twice",
						func() (bool, error) {
							if time.Since(started) < 4*time.Second {
								return false, nil
							}
							return everyStreamTwice()
						})
				} else {
					testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, "the ERP to see more than one request at once",
						func() (bool, error) { return sim.MaxInFlight() > 1, nil })
					testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, "every stream to succeed twice", everyStreamTwice)
				}
				st.stop(t)

				// MaxInFlight is the most since the simulator started: the
				// whole test.
				t.Logf("the ERP saw up to %d requests at once", sim.MaxInFlight())
				if got := sim.MaxInFlight(); got > tt.budget || got < 1 {
					t.Errorf("the ERP saw up to %d requests at once; the budget is %d", got, tt.budget)
				}
				for _, s := range streamNames {
					if _, failed, err := st.runCounts("default", s); err != nil || failed != 0 {
						t.Errorf("%s: %d failed runs (%v); waiting for the budget is not a failure", s, failed, err)
					}
				}
				if tt.budget == 1 {
					st.rec.mu.Lock()
					waits, waited, skipped := st.rec.budgetWaits, st.rec.budgetWait, st.rec.skipped[metrics.SkipBudget]
					st.rec.mu.Unlock()
					t.Logf("budget waits: %d (%s in all), ticks skipped for the budget: %d", waits, waited, skipped)
					if waited <= 0 && skipped == 0 {
						t.Errorf("four streams every second through one slot: no wait for the budget and no skipped tick reported")
					}
					// One slot: the source's runs never overlap, whatever their stream.
					rows, err := st.obs.Query(context.Background(), `SELECT a.stream || '#' || a.id || ' and ' || b.stream || '#' || b.id
					FROM erp.sync_runs a JOIN erp.sync_runs b ON a.id < b.id
					WHERE a.started_at < b.finished_at AND b.started_at < a.finished_at`)
					if err != nil {
						t.Fatal(err)
					}
					overlaps, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil || len(overlaps) > 0 {
						t.Errorf("runs of the source overlap with a budget of one request (%v): %v", err, overlaps)
					}
				}
			})
		}
	})

	// A source read through two logins, one per branch of an installation whose lists
	// are branch-scoped, runs the stream through both: each login has its own run, its
	// own completed checkpoint holding its branch's rows, and reads with its own
	// token.
	t.Run("RunsAStreamThroughEveryLogin", func(t *testing.T) {
		if testing.Short() {
			t.Skip("scheduler test: skipped with -short")
		}
		sim, simURL := newSim(t, erpsim.Options{Invoices: 150, PageSizeCap: 50, Users: branchUsers, ListScope: erpsim.ScopeBranch})
		src := config.Source{Name: "main", BaseURL: simURL, PageSize: 50, MaxConcurrentRequests: 2,
			Streams: []config.StreamConfig{{Name: "invoices", Schedule: "@every 1h"}}}
		st := startScheduler(t, src, schedTarget(t, "main", simURL, branchUsers...))
		ctx := context.Background()
		testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, "both logins' invoice sweeps to complete", func() (bool, error) {
			var n int
			err := st.obs.QueryRow(ctx, `SELECT count(*) FROM erp.sync_checkpoints
			WHERE source = 'main' AND stream = 'invoices' AND last_sweep_completed_at IS NOT NULL`).Scan(&n)
			return n == len(branchUsers), err
		})
		st.stop(t)

		if got, want := st.rec.declared["invoices"], []string{branchUsers[0].Username, branchUsers[1].Username}; !slices.Equal(got, want) {
			t.Errorf("the stream was declared with logins %v, want %v", got, want)
		}
		for _, u := range branchUsers {
			var runs, succeeded int64
			var lastRows *int64
			var sweep *int64
			if err := st.obs.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM erp.sync_runs WHERE source = 'main' AND stream = 'invoices' AND login = $1),
				(SELECT count(*) FROM erp.sync_runs WHERE source = 'main' AND stream = 'invoices' AND login = $1 AND status = 'succeeded'),
				last_sweep_rows, sweep_id
			FROM erp.sync_checkpoints WHERE source = 'main' AND stream = 'invoices' AND login = $1`, u.Username).Scan(&runs, &succeeded, &lastRows, &sweep); err != nil {
				t.Fatalf("%s: %v", u.Username, err)
			}
			// @every 1h: the run at start-up is the only one.
			if runs != 1 || succeeded != 1 {
				t.Errorf("%s: %d runs, %d succeeded; want the one start-up run, succeeded", u.Username, runs, succeeded)
			}
			want := int64(len(sim.InvoicesOfBranch(u.BranchID)))
			if lastRows == nil || *lastRows != want || want == 0 || sweep != nil {
				t.Errorf("%s: checkpoint has a completed sweep of %v rows (sweep in progress %v), want %d: its branch's invoices",
					u.Username, lastRows, sweep, want)
			}
			listed := 0
			for _, r := range sim.Requests() {
				if r.Path == invoicesPath && r.Status == 200 && r.Username == u.Username {
					listed++
				}
			}
			if listed == 0 {
				t.Errorf("%s: no invoice page was read with its token", u.Username)
			}
		}
		if n := count(t, st.obs, `SELECT count(*) FROM erp.invoices WHERE source = 'main'`); n != int64(len(sim.Invoices())) {
			t.Errorf("erp.invoices has %d rows, the ERP %d invoices", n, len(sim.Invoices()))
		}
	})

	// A stream that follows its list with a sweep schedule of its own has two jobs.
	// Its follow runs come on its schedule, the first ones complete sweeps until two
	// sweeps agree on the list's order, then follows; its complete sweeps come on the
	// sweep schedule (here the run at start-up only); and a stream whose two schedules
	// are one keeps today's meaning, every run a complete sweep.
	t.Run("FollowsAndSweepsEachOnItsOwnSchedule", func(t *testing.T) {
		if testing.Short() {
			t.Skip("scheduler test: skipped with -short")
		}
		_, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		src := config.Source{Name: "default", BaseURL: simURL, PageSize: 50, MaxConcurrentRequests: 2,
			Streams: []config.StreamConfig{
				{Name: "invoices", Schedule: "@every 1s", SweepSchedule: "@every 1h"},
				{Name: "journal_entries", Schedule: "@every 1s", SweepSchedule: "@every 1s"},
			}}
		st := startScheduler(t, src, schedTarget(t, "default", simURL, erpsim.User{Username: goodUser, Password: goodPassword}))
		ctx := context.Background()
		// Waiting on the counts asserted below, not on the clock: on a loaded
		// machine a tick of one job may come before the other's.
		testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, "three follow runs of invoices, one that follows, and three journal-entry runs",
			func() (bool, error) {
				var followed, follows, journal int64
				err := st.obs.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM erp.sync_follow WHERE stream = 'invoices' AND last_follow_at IS NOT NULL AND last_follow_swept IS NULL),
				(SELECT count(*) FROM erp.sync_runs WHERE stream = 'invoices' AND kind = 'follow' AND status = 'succeeded'),
				(SELECT count(*) FROM erp.sync_runs WHERE stream = 'journal_entries' AND status = 'succeeded')`).Scan(&followed, &follows, &journal)
				return followed > 0 && follows >= 3 && journal >= 3, err
			})
		st.stop(t)
		st.rec.mu.Lock()
		interval, declared := st.rec.followed["invoices"], st.rec.followed["journal_entries"]
		st.rec.mu.Unlock()
		if interval != time.Second || declared != 0 {
			t.Errorf("follow intervals declared: invoices %s, journal_entries %s; want 1s and none", interval, declared)
		}
		var sweeps, follows, journalFollows int64
		if err := st.obs.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE stream = 'invoices' AND kind = 'sweep'),
			count(*) FILTER (WHERE stream = 'invoices' AND kind = 'follow'),
			count(*) FILTER (WHERE stream = 'journal_entries' AND kind <> 'sweep')
		FROM erp.sync_runs`).Scan(&sweeps, &follows, &journalFollows); err != nil {
			t.Fatal(err)
		}
		if sweeps > 1 || follows < 3 || journalFollows != 0 {
			t.Errorf("invoices: %d scheduled sweeps (want the one at start-up at most) and %d follow runs (want 3 or more); journal_entries: %d runs not sweeps (want none)",
				sweeps, follows, journalFollows)
		}
	})

	// A list with a window schedule has a third job: window runs, each on its own
	// schedule, through the logins whose last window is due; a sweep that holds
	// its lock does not hold them up. A list without one has no window job.
	t.Run("RunsWindowsOnTheirOwnScheduleWhileASweepHoldsItsLock", func(t *testing.T) {
		if testing.Short() {
			t.Skip("scheduler test: skipped with -short")
		}
		_, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		src := config.Source{Name: "default", BaseURL: simURL, PageSize: 50, MaxConcurrentRequests: 2,
			Streams: []config.StreamConfig{
				{Name: "invoices", Schedule: "@every 1h", SweepSchedule: "@every 2h", WindowSchedule: "@every 1s"},
				{Name: "journal_entries", Schedule: "@every 1h", SweepSchedule: "@every 2h"},
			}}
		st := startScheduler(t, src, schedTarget(t, "default", simURL, erpsim.User{Username: goodUser, Password: goodPassword}))
		ctx := context.Background()
		windows := func() (int64, error) {
			var n int64
			err := st.obs.QueryRow(ctx, `SELECT count(*) FROM erp.sync_runs WHERE stream = 'invoices' AND kind = 'window' AND status = 'succeeded'`).Scan(&n)
			return n, err
		}
		testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, "a window run of invoices that read its window", func() (bool, error) {
			var at *time.Time
			err := st.obs.QueryRow(ctx, `SELECT max(last_window_at) FROM erp.sync_window WHERE stream = 'invoices'`).Scan(&at)
			return at != nil, err
		})
		conn, err := st.obs.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		release, err := db.LockStream(ctx, conn.Conn(), "default", "invoices", model.KindSweep)
		if err != nil || release == nil {
			t.Fatalf("taking the sweep's lock: %v", err)
		}
		defer release()
		before, err := windows()
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, "two more window runs while the sweep's lock is held", func() (bool, error) {
			n, err := windows()
			return n >= before+2, err
		})
		st.stop(t)
		st.rec.mu.Lock()
		interval, declared := st.rec.windowed["invoices"], st.rec.windowed["journal_entries"]
		st.rec.mu.Unlock()
		if interval != time.Second || declared != 0 {
			t.Errorf("window intervals declared: invoices %s, journal_entries %s; want 1s and none", interval, declared)
		}
		if n := count(t, st.obs, `SELECT count(*) FROM erp.sync_runs WHERE stream = 'journal_entries' AND kind = 'window'`); n != 0 {
			t.Errorf("journal_entries, which has no window schedule, had %d window runs", n)
		}
	})

	// A source whose schedules would ask more of its ERP an hour than its
	// requests_per_hour has its window runs and complete sweeps spaced out to fit
	// it, its follow runs not: at 100,000 invoices 100 a page, follow runs ask 120
	// an hour, an untaught window of 20 pages every 10 minutes 120, a daily sweep
	// 1,000 pages (42 an hour); a budget of 200 leaves 80 to the last two, which
	// are stretched 2.02x. The start-up line says what the schedules ask, and the
	// metrics the budget, the stretch and the stretched intervals.
	t.Run("StretchesWindowsAndSweepsButNotFollowRunsToFitTheBudget", func(t *testing.T) {
		ctx := context.Background()
		_, simURL := newSim(t, erpsim.Options{Invoices: 10})
		src := config.Source{Name: "default", BaseURL: simURL, PageSize: 100, MaxConcurrentRequests: 1, RequestsPerHour: 200,
			Logins:  []config.Login{{Username: goodUser}},
			Streams: []config.StreamConfig{{Name: "invoices", Schedule: "@every 30s", WindowSchedule: "@every 10m", SweepSchedule: "@every 24h"}}}
		dbURL := testdb.New(t)
		obs := testdb.ObserverPool(t, dbURL)
		if _, err := obs.Exec(ctx, `INSERT INTO erp.sync_checkpoints (source, stream, login, last_sweep_rows, last_sweep_completed_at)
			VALUES ('default', 'invoices', $1, 100000, now())`, goodUser); err != nil {
			t.Fatal(err)
		}
		pools, err := db.OpenPools(ctx, dbURL, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer pools.Close()
		log, logs := testLog()
		rec := newSchedRecorder()
		tgt := schedTarget(t, "default", simURL, erpsim.User{Username: goodUser, Password: goodPassword})
		s := newScheduler(schedulerDeps{Sources: []config.Source{src}, Catalog: streams.MustDefault(),
			Targets: map[string]sync.Target{"default": tgt}, Pools: func() *db.Pools { return pools },
			MaxRuns: 1, Grace: time.Minute, Abort: time.Minute, Log: log, Clock: newFakeClock(), Metrics: rec})
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		const stretch = (120 + 1000.0/24) / 80
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if math.Abs(rec.stretch-stretch) > 0.01 || rec.budget != 200 || math.Abs(rec.expected[model.KindFollow]-120) > 0.01 {
			t.Errorf("stretch %.3f, budget %d, follow runs %.1f an hour; want %.3f, 200, 120", rec.stretch, rec.budget, rec.expected[model.KindFollow], stretch)
		}
		var total float64
		for _, n := range rec.expected {
			total += n
		}
		if math.Abs(total-200) > 0.01 {
			t.Errorf("%.1f requests an hour expected once stretched, want the budget's 200 (%v)", total, rec.expected)
		}
		for kind, want := range map[string]time.Duration{"sweep": time.Duration(stretch * float64(24*time.Hour)),
			"window": time.Duration(stretch * float64(10*time.Minute)), "follow": 30 * time.Second} {
			if got := rec.intervals["invoices/"+kind]; (got - want).Abs() > time.Second {
				t.Errorf("%s interval %s, want %s", kind, got, want)
			}
		}
		if !strings.Contains(logs.String(), "ERP requests an hour at these schedules") || !strings.Contains(logs.String(), "requests_per_hour 200") {
			t.Errorf("no start-up line of what the schedules ask:\n%s", logs.String())
		}
	})

	// A scheduler whose jobs are all waiting for their first tick stops at once,
	// twice.
	t.Run("StopsAtOnceWhileEveryJobWaitsForItsFirstTick", func(t *testing.T) {
		_, simURL := newSim(t, erpsim.Options{Invoices: 10})
		src := config.Source{Name: "default", BaseURL: simURL, PageSize: 50, MaxConcurrentRequests: 1,
			Streams: []config.StreamConfig{{Name: "currencies", Schedule: "@every 1h"}}}
		clock := newFakeClock()
		dbURL := testdb.New(t)
		pools, err := db.OpenPools(context.Background(), dbURL, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer pools.Close()
		log, _ := testLog()
		// A fake clock that never moves: the first tick (StartSpread 1h, so
		// up to 30 min away) never comes.
		tgt := schedTarget(t, "default", simURL, erpsim.User{Username: goodUser, Password: goodPassword})
		s := newScheduler(schedulerDeps{Sources: []config.Source{src}, Catalog: streams.MustDefault(),
			Targets: map[string]sync.Target{"default": tgt}, Pools: func() *db.Pools { return pools },
			MaxRuns: 1, StartSpread: time.Hour, Grace: time.Minute, Abort: time.Minute,
			Log: log, Clock: clock, Metrics: newSchedRecorder()})
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		clock.waitForWaiters(t, 1, "the job to wait for its first tick")
		// The grace period is a minute: a Stop that waited for it would fail here.
		returnsWithin(t, 10*time.Second, "scheduler Stop", s.Stop)
		returnsWithin(t, time.Second, "a second scheduler Stop", s.Stop)
		if n := count(t, testdb.ObserverPool(t, dbURL), `SELECT count(*) FROM erp.sync_runs`); n != 0 {
			t.Errorf("%d runs recorded; the first tick never came", n)
		}
	})

	// A source whose credentials are refused fails and backs off without hammering its
	// ERP, while another source of the same daemon keeps syncing.
	t.Run("BacksOffASourceWhoseCredentialsAreRefusedWhileOthersSync", func(t *testing.T) {
		if testing.Short() {
			t.Skip("daemon test: skipped with -short")
		}
		h := newHarness(t)
		_, goodURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		badSim, badURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		core := streams.MustDefault().Core()
		started := time.Now()
		h.start("", 10*time.Second,
			source{name: "good", baseURL: goodURL, streams: core},
			source{name: "bad", baseURL: badURL, password: "not-the-password", streams: core})

		// ~5 s of 1-second ticks: long enough for a source that does not back
		// off to log in again and again.
		h.waitFor(45*time.Second, "5 s to pass and every stream of the good source to succeed 3 times", func() (bool, error) {
			if time.Since(started) < 5*time.Second {
				return false, nil
			}
			for _, s := range core {
				rs, err := h.queryRuns("good", s)
				if err != nil || countStatus(rs, model.StatusSucceeded) < 3 {
					return false, err
				}
			}
			return true, nil
		})

		for _, s := range core {
			for _, r := range h.runs("good", s) {
				if r.status != model.StatusSucceeded && r.status != model.StatusRunning {
					t.Errorf("good source: run %v; the other source's failures must not affect it", r)
				}
			}
			bad := h.runs("bad", s)
			if len(bad) == 0 {
				t.Errorf("bad source, stream %s: no run recorded; a refused login must be a failed run", s)
			}
			if len(bad) > 2 {
				t.Errorf("bad source, stream %s: %d runs in ~5 s of 1 s ticks; refused credentials must back off: %v", s, len(bad), bad)
			}
			for _, r := range bad {
				if r.status != model.StatusFailed || !strings.Contains(r.errText, "credentials were refused") {
					t.Errorf("bad source: run %v; want failed with \"credentials were refused\"", r)
				}
				if strings.Contains(r.errText, "not-the-password") {
					t.Errorf("bad source: the run's error shows the password: %q", r.errText)
				}
			}
		}
		logins, other := 0, 0
		for _, r := range badSim.Requests() {
			if r.Method == http.MethodPost && r.Path == "/api/auth/token/" {
				logins++
			} else {
				other++
			}
		}
		if logins < 1 || logins > 3 {
			t.Errorf("the bad source's ERP saw %d login attempts in ~5 s; want 1 to 3 (refusals remembered, runs backing off)", logins)
		}
		if other != 0 {
			t.Errorf("the bad source's ERP saw %d requests other than logins; without a token there is nothing to ask", other)
		}

		fams, body := h.scrape()
		for _, s := range core {
			if v := h.metric(fams, "erpsync_last_run_failed", map[string]string{"source": "bad", "stream": s}); v != 1 {
				t.Errorf("erpsync_last_run_failed{source=bad,stream=%s} = %v, want 1", s, v)
			}
			if v, ok := metricValue(fams, "erpsync_last_run_failed", map[string]string{"source": "good", "stream": s}); ok && v != 0 {
				t.Errorf("erpsync_last_run_failed{source=good,stream=%s} = %v, want 0", s, v)
			}
			if v := h.metric(fams, "erpsync_runs_total", map[string]string{"source": "bad", "stream": s, "status": "failed"}); v < 1 {
				t.Errorf("erpsync_runs_total{source=bad,stream=%s,status=failed} = %v, want >= 1", s, v)
			}
			if v := h.metric(fams, "erpsync_last_success_timestamp_seconds", map[string]string{"source": "good", "stream": s}); v <= 0 {
				t.Errorf("erpsync_last_success_timestamp_seconds{source=good,stream=%s} = %v, want > 0", s, v)
			}
		}
		if strings.Contains(body, "not-the-password") || strings.Contains(body, goodPassword) {
			t.Errorf("/metrics shows a password")
		}
		if code, _, err := h.get("/readyz"); code != http.StatusOK {
			t.Errorf("/readyz = %d (%v); a source with bad credentials does not make the daemon unready", code, err)
		}
		if !strings.Contains(h.logs.String(), "backing off") {
			t.Errorf("the daemon's log does not say it backs off")
		}
		h.stop(30 * time.Second)
		if h.runErr != nil {
			t.Errorf("Run returned %v, want nil", h.runErr)
		}
	})

	// With more streams than run slots (and so than run connections) and a
	// slow ERP, /readyz stays 200 all along: runs never take the connections
	// it uses. Runs never exceed the slots, and the ticks that found none free
	// are counted.
	t.Run("RunsNoMoreThanItsSlotsAndLeavesReadyzItsConnections", func(t *testing.T) {
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
	})

	// A stream whose lock another process holds is skipped and counted, and
	// a holder that has kept it more than three intervals is reported in
	// /readyz's detail (which stays 200) and in the metric of how long.
	t.Run("SkipsAStreamWhoseLockIsHeldElsewhereAndReportsALongHold", func(t *testing.T) {
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
	})

	// A session whose role is not erpsync's (here a login granted the lock
	// functions, calling itself erpsync) holds a stream's lock: each look
	// at the lock warns naming its pid, role and application, counts it,
	// shows it in /readyz, and measures how long it has been seen holding
	// it; the job looks again every minute, not at its hourly schedule, and
	// runs the stream at the first look that finds the lock free.
	t.Run("WarnsOfCountsAndLooksAgainSoonAtALockHeldByASessionThatIsNotErpsyncs", func(t *testing.T) {
		ctx := context.Background()
		_, simURL := newSim(t, erpsim.Options{Invoices: 10})
		src := config.Source{Name: "default", BaseURL: simURL, PageSize: 50, MaxConcurrentRequests: 1,
			Streams: []config.StreamConfig{{Name: "currencies", Schedule: "@every 1h"}}}
		clock := newFakeClock()
		dbURL := testdb.New(t)
		obs := testdb.ObserverPool(t, dbURL)
		alice := testdb.LockTaker(t, dbURL)
		pid, release := testdb.HoldStreamLock(t, dbURL, alice, "erpsync", "default", "currencies", model.KindSweep)

		pools, err := db.OpenPools(ctx, dbURL, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer pools.Close()
		log, logs := testLog()
		rec := newSchedRecorder()
		tgt := schedTarget(t, "default", simURL, erpsim.User{Username: goodUser, Password: goodPassword})
		s := newScheduler(schedulerDeps{Sources: []config.Source{src}, Catalog: streams.MustDefault(),
			Targets: map[string]sync.Target{"default": tgt}, Pools: func() *db.Pools { return pools },
			MaxRuns: 1, Grace: time.Minute, Abort: time.Minute, Log: log, Clock: clock, Metrics: rec})
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer returnsWithin(t, 30*time.Second, "scheduler Stop", s.Stop)

		// The job asks the clock for its first tick, then at each look for
		// the deadline of its slots and, after the run, for its next tick:
		// waitLook waits for the n-th look to end and returns that wait.
		waitLook := func(n int, what string) time.Duration {
			t.Helper()
			var asked []time.Duration
			testutil.Eventually(t, 20*time.Second, time.Millisecond, what, func() (bool, error) {
				asked = clock.Asked()
				return len(asked) >= 2*n+1, nil
			})
			return asked[2*n]
		}
		// The first look, at once (no start spread).
		if next := waitLook(1, "the first look"); next != time.Minute {
			t.Errorf("the job looks again in %s, want a minute", next)
		}
		if held, n := rec.lock(); n != 1 || held != 0 {
			t.Errorf("after the first look: %d foreign looks counted, held %s; want 1, 0 s", n, held)
		}
		warning := fmt.Sprintf(`default/currencies: lock held by pid %d (role %s, application "erpsync"), not an erpsync process, seen holding it since 2026-03-01T09:00:00Z`, pid, alice)
		if w := s.Warnings(); !slices.Equal(w, []string{warning}) {
			t.Errorf("warnings %q, want %q", w, warning)
		}
		line := fmt.Sprintf(`level=WARN msg="a session that is not erpsync's holds the stream's lock; the stream does not run while it does" source=default stream=currencies holder_pid=%d holder_role=%s holder_application=erpsync seen_holding_since=2026-03-01T09:00:00.000Z`,
			pid, alice)
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no warning %s", line)
		}

		// A minute on: the same holder, seen for a minute.
		clock.Advance(time.Minute)
		waitLook(2, "the second look")
		if held, n := rec.lock(); n != 2 || held != time.Minute {
			t.Errorf("at the second look: %d foreign looks counted, held %s; want 2, a minute", n, held)
		}
		if n := count(t, obs, `SELECT count(*) FROM erp.sync_runs`); n != 0 {
			t.Errorf("%d runs recorded while the lock was held", n)
		}

		// It lets go: the next look runs the stream, and the job is back on
		// its schedule.
		release()
		clock.Advance(time.Minute)
		if next := waitLook(3, "the run once the lock is free"); next != time.Hour {
			t.Errorf("after the run the job looks again in %s, want its hour", next)
		}
		if n := count(t, obs, `SELECT count(*) FROM erp.sync_runs WHERE status = 'succeeded'`); n != 1 {
			t.Errorf("%d succeeded runs once the lock was free, want 1", n)
		}
		if held, n := rec.lock(); n != 2 || held != 0 {
			t.Errorf("after the run: %d foreign looks, held %s; want 2, 0 s", n, held)
		}
		if w := s.Warnings(); len(w) != 0 {
			t.Errorf("warnings after the run: %q", w)
		}
	})
}

// schedRecorder is the scheduler's Metrics, recorded.
type schedRecorder struct {
	mu          gosync.Mutex
	declared    map[string][]string      // by stream: the logins declared
	followed    map[string]time.Duration // by stream: the follow interval declared
	windowed    map[string]time.Duration // by stream: the window interval declared
	intervals   map[string]time.Duration // by "stream/kind": the interval last declared
	expected    map[model.RunKind]float64
	budget      int
	stretch     float64
	skipped     map[string]int // by reason
	budgetWaits int
	budgetWait  time.Duration
	heldByOther time.Duration
	foreign     int
}

func newSchedRecorder() *schedRecorder {
	return &schedRecorder{declared: map[string][]string{}, followed: map[string]time.Duration{}, windowed: map[string]time.Duration{},
		intervals: map[string]time.Duration{}, skipped: map[string]int{}}
}

func (r *schedRecorder) DeclareWindow(source, stream string, logins []string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windowed[stream] = interval
	r.intervals[stream+"/window"] = interval
}

func (r *schedRecorder) Budget(source string, expected map[model.RunKind]float64, budget int, stretch float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expected, r.budget, r.stretch = maps.Clone(expected), budget, stretch
}

func (r *schedRecorder) DeclareFollow(source, stream string, logins []string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.followed[stream] = interval
	r.intervals[stream+"/follow"] = interval
}

func (r *schedRecorder) Declare(source, stream string, logins []string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if logins != nil {
		r.declared[stream] = slices.Clone(logins)
	}
	r.intervals[stream+"/sweep"] = interval
}

func (r *schedRecorder) Skipped(source, stream, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped[reason]++
}

func (r *schedRecorder) LockHeldByOther(source, stream string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heldByOther = d
}

func (r *schedRecorder) LockHeldByForeign(source, stream string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foreign++
}

// lock is what the recorder last heard of the lock: how long another
// session held it, and how many looks found a foreign session holding it.
func (r *schedRecorder) lock() (time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heldByOther, r.foreign
}

func (r *schedRecorder) BudgetWait(source string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budgetWaits++
	r.budgetWait += d
}

// schedTest is a scheduler built from its deps on a fresh database.
type schedTest struct {
	obs   *pgxpool.Pool
	rec   *schedRecorder
	sched *scheduler
}

// startScheduler starts a scheduler of one source on a fresh database
// (migrated, as the connector leaves it) with the real clock: the ERP's
// latency is real time.
func startScheduler(t *testing.T, src config.Source, tgt sync.Target) *schedTest {
	t.Helper()
	ctx := context.Background()
	dbURL := testdb.New(t)
	obs := testdb.ObserverPool(t, dbURL)
	const maxRuns = 8
	pools, err := db.OpenPools(ctx, dbURL, maxRuns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)
	log, logs := testLog()
	rec := newSchedRecorder()
	s := newScheduler(schedulerDeps{Sources: []config.Source{src}, Catalog: streams.MustDefault(),
		Targets: map[string]sync.Target{src.Name: tgt}, Pools: func() *db.Pools { return pools },
		MaxRuns: maxRuns, Prefetch: 1, Grace: 10 * time.Second, Abort: 5 * time.Second,
		Log: log, Clock: realClock{}, Metrics: rec})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Before the pools close (cleanups run last first).
	t.Cleanup(s.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler log:\n%s", logs.String())
		}
	})
	return &schedTest{obs: obs, rec: rec, sched: s}
}

// schedTarget is a source read through a login per user. The clients
// have no erp.Budget of their own (`erpsync run` gives them one of the
// same size): the scheduler's slots are what these tests measure.
func schedTarget(t *testing.T, source, baseURL string, users ...erpsim.User) sync.Target {
	t.Helper()
	tgt := sync.Target{Source: source, PageSize: 50, Prefixes: map[string]string{"messaging": "/messaging"}}
	for _, u := range users {
		c, err := erp.New(erp.Options{BaseURL: baseURL, Username: u.Username, Password: u.Password, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tgt.Logins = append(tgt.Logins, sync.Login{Name: u.Username, Client: c})
	}
	return tgt
}

// runCounts counts a stream's runs by status.
func (st *schedTest) runCounts(source, stream string) (succeeded, failed int64, err error) {
	err = st.obs.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed')
		FROM erp.sync_runs WHERE source = $1 AND stream = $2`, source, stream).Scan(&succeeded, &failed)
	return succeeded, failed, err
}

func (st *schedTest) stop(t *testing.T) {
	t.Helper()
	returnsWithin(t, 30*time.Second, "scheduler Stop", st.sched.Stop)
	returnsWithin(t, time.Second, "a second scheduler Stop", st.sched.Stop)
}

func getStatusCode(c *http.Client, u string) int {
	resp, err := c.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
