package daemon

import (
	"context"
	"fmt"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// schedRecorder is the scheduler's Metrics, recorded.
type schedRecorder struct {
	mu          gosync.Mutex
	declared    map[string][]string      // by stream: the logins declared
	followed    map[string]time.Duration // by stream: the follow interval declared
	skipped     map[string]int           // by reason
	budgetWaits int
	budgetWait  time.Duration
}

func newSchedRecorder() *schedRecorder {
	return &schedRecorder{declared: map[string][]string{}, followed: map[string]time.Duration{}, skipped: map[string]int{}}
}

func (r *schedRecorder) DeclareFollow(source, stream string, logins []string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.followed[stream] = interval
}

func (r *schedRecorder) Declare(source, stream string, logins []string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.declared[stream] = slices.Clone(logins)
}

func (r *schedRecorder) Skipped(source, stream, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped[reason]++
}

func (r *schedRecorder) LockHeldByOther(source, stream string, d time.Duration) {}

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

// TestSchedulerRequestBudget: a source's max_concurrent_requests bounds
// the runs it has at once, and so the requests its ERP sees at once (a
// run has one in flight at a time). Four streams every second on an ERP
// that takes 300 ms a request: with a budget of 1 the ERP never sees two
// requests at once while every stream keeps succeeding, and the waits
// for the budget are reported; with 3 it does see more than one, which
// is what makes the first case a test.
func TestSchedulerRequestBudget(t *testing.T) {
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
}

// TestSchedulerRunsEveryLogin: a source read through two logins, one per
// branch of an installation whose lists are branch-scoped, runs the
// stream through both: each login has its own run, its own completed
// checkpoint holding its branch's rows, and reads with its own token.
func TestSchedulerRunsEveryLogin(t *testing.T) {
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
}

// TestSchedulerFollowsAndSweeps: a stream that follows its list with a
// sweep schedule of its own has two jobs. Its follow runs come on its
// schedule, the first ones complete sweeps until two sweeps agree on the
// list's order, then follows; its complete sweeps come on the sweep
// schedule (here the run at start-up only); and a stream whose two
// schedules are one keeps today's meaning, every run a complete sweep.
func TestSchedulerFollowsAndSweeps(t *testing.T) {
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
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, "a follow run of invoices that follows, and three journal-entry runs",
		func() (bool, error) {
			var follows, journal int64
			err := st.obs.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM erp.sync_follow WHERE stream = 'invoices' AND last_follow_at IS NOT NULL AND last_follow_swept IS NULL),
				(SELECT count(*) FROM erp.sync_runs WHERE stream = 'journal_entries' AND status = 'succeeded')`).Scan(&follows, &journal)
			return follows > 0 && journal >= 3, err
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
}

// TestSchedulerStopWithoutRuns: a scheduler whose jobs are all waiting
// for their first tick stops at once, twice.
func TestSchedulerStopWithoutRuns(t *testing.T) {
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
}
