package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	gosync "sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/erpsync/erpsync/internal/backoff"
	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erpcost"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// schedulerDeps are what the scheduler needs.
type schedulerDeps struct {
	Sources     []config.Source
	Catalog     *sync.Catalog
	Targets     map[string]sync.Target // by source name
	Pools       func() *db.Pools       // the connector's, ready before Start
	MaxRuns     int                    // runs at once in the process
	Prefetch    int
	StartSpread time.Duration
	// ProgressEvery is how often a long run logs its progress.
	ProgressEvery time.Duration
	// Grace and Abort bound a stop: runs get Grace to commit what they
	// are writing, then are cancelled and get Abort to end.
	Grace, Abort time.Duration
	Log          *slog.Logger
	Clock        Clock
	Metrics      schedulerMetrics
	Observer     sync.Observer
}

// schedulerMetrics is what the scheduler reports.
type schedulerMetrics interface {
	Declare(source, stream string, logins []string, interval time.Duration)
	DeclareFollow(source, stream string, logins []string, interval time.Duration)
	DeclareWindow(source, stream string, logins []string, interval time.Duration)
	Skipped(source, stream, reason string)
	LockHeldByOther(source, stream string, d time.Duration)
	LockHeldByForeign(source, stream string)
	BudgetWait(source string, d time.Duration)
	Budget(source string, expected map[model.RunKind]float64, budget int, stretch float64)
}

// scheduler runs every (source, stream) on its schedule: one goroutine per
// job, which sleeps until the schedule's next time, takes a slot of its
// source and one of the process, runs the stream through the logins that
// are due, and computes the next time from when the run ended. A run
// therefore never overlaps the previous one of its job, and ticks that
// fall during a run are skipped rather than queued. A job waits for its
// slots at most until its next tick; past that the tick is skipped and
// counted.
//
// The slots of a source are its request budget (max_concurrent_requests):
// a run has one request in flight at a time, so the scheduler starts no
// more runs per source than the ERP is to see requests at once, and a run
// waiting for the budget holds no database connection and no lock.
//
// The schedule is kept for the whole fleet of replicas, not per process:
// before it runs, a job reads when each login's data were last complete
// (whichever process completed them) and runs only the logins whose next
// time after that has come. Replicas therefore share the streams' runs
// instead of each making all of them.
type scheduler struct {
	deps      schedulerDeps
	runner    *sync.Runner
	jobs      []*job
	slots     chan struct{}            // one per run allowed at once
	perSource map[string]chan struct{} // one per request a source may have in flight
	costs     map[string]*sourceCost   // by source
	stopper   *sync.Stopper
	wg        gosync.WaitGroup
	stopOnce  gosync.Once

	stuckMu gosync.Mutex
	stuck   map[string]string // by "source/stream": a lock held too long
}

func newScheduler(deps schedulerDeps) *scheduler {
	return &scheduler{deps: deps, perSource: map[string]chan struct{}{}, costs: map[string]*sourceCost{}, stuck: map[string]string{}}
}

// sourceCost is what a source's schedules ask of its ERP, made again as
// its lists grow: after each of its complete sweeps and window runs. Its
// stretcher spaces the source's window runs and complete sweeps out to fit
// its budget of requests an hour (requests_per_hour), never its follow
// runs.
type sourceCost struct {
	src     config.Source
	stretch erpcost.Stretcher
	jobs    []*job // its jobs of window runs and complete sweeps
	mu      gosync.Mutex
	last    erpcost.Estimate
}

func (s *scheduler) Start(ctx context.Context) error {
	d := s.deps
	pools := d.Pools()
	s.runner = &sync.Runner{Pool: pools.Runs, Service: pools.Service, Log: d.Log, Obs: d.Observer, Prefetch: d.Prefetch,
		ProgressEvery: d.ProgressEvery}
	s.slots = make(chan struct{}, d.MaxRuns)
	now := d.Clock.Now()
	for _, src := range d.Sources {
		s.perSource[src.Name] = make(chan struct{}, src.MaxConcurrentRequests)
		s.costs[src.Name] = &sourceCost{src: src}
		target := d.Targets[src.Name]
		var logins []string
		for _, l := range target.Logins {
			logins = append(logins, l.Name)
		}
		for _, sc := range src.Streams {
			st, ok := d.Catalog.Lookup(sc.Name)
			if !ok {
				return fmt.Errorf("source %s: unknown stream %s", src.Name, sc.Name)
			}
			// A stream that follows its list with schedules of its own
			// has up to three jobs: complete sweeps on its sweep schedule,
			// follow runs on its schedule, window runs on its window
			// schedule (when it has one). Otherwise every run is a
			// complete sweep, on its schedule. (An empty sweep schedule
			// is the schedule, as the configuration reads it.)
			sweepSpec := cmp.Or(sc.SweepSchedule, sc.Schedule)
			follows := st.Declared().Follows && sweepSpec != sc.Schedule
			windows := st.Declared().Follows && sc.WindowSchedule != ""
			sweep, err := s.newJob(src.Name, st, target, sweepSpec, model.KindSweep, now)
			if err != nil {
				return err
			}
			d.Metrics.Declare(src.Name, sc.Name, logins, sweep.interval)
			attrs := []any{"source", src.Name, "stream", sc.Name}
			if follows {
				follow, err := s.newJob(src.Name, st, target, sc.Schedule, model.KindFollow, now)
				if err != nil {
					return err
				}
				d.Metrics.DeclareFollow(src.Name, sc.Name, logins, follow.interval)
				attrs = append(attrs, "follow_runs", sc.Schedule, "from", sc.ScheduleFrom)
			}
			if windows {
				window, err := s.newJob(src.Name, st, target, sc.WindowSchedule, model.KindWindow, now)
				if err != nil {
					return err
				}
				d.Metrics.DeclareWindow(src.Name, sc.Name, logins, window.interval)
				attrs = append(attrs, "window_runs", sc.WindowSchedule, "windows_from", sc.WindowFrom)
			}
			if follows || windows {
				attrs = append(attrs, "complete_sweeps", sweepSpec, "sweeps_from", sc.SweepFrom)
			} else {
				attrs = append(attrs, "every_run", "complete sweep", "schedule", sc.Schedule, "from", sc.ScheduleFrom)
			}
			d.Log.Info("scheduled", attrs...)
		}
	}
	for _, src := range d.Sources {
		s.estimate(ctx, src.Name, true)
	}
	d.Log.Info("scheduled", "jobs", len(s.jobs), "max_concurrent_runs", d.MaxRuns)
	// The runs outlive ctx (a signal): they end through the stopper.
	s.stopper = sync.NewStopper(ctx)
	for _, j := range s.jobs {
		s.wg.Go(func() { j.loop(s.stopper.Context()) })
	}
	return nil
}

// newJob makes and keeps a job running one kind of run of a stream on a
// schedule.
func (s *scheduler) newJob(source string, st sync.Stream, target sync.Target, spec string, kind model.RunKind, now time.Time) (*job, error) {
	sched, err := config.ParseSchedule(spec)
	if err != nil {
		return nil, fmt.Errorf("source %s stream %s: schedule %q: %w", source, st.Declared().Name, spec, err)
	}
	log := s.deps.Log.With("source", source, "stream", st.Declared().Name)
	if kind != model.KindSweep {
		log = log.With("kind", kind)
	}
	j := &job{s: s, stream: st, kind: kind, schedule: sched, target: target, backoff: map[string]*loginBackoff{}, log: log}
	if kind != model.KindFollow {
		c := s.costs[source]
		j.schedule = c.stretch.Schedule(sched)
		c.jobs = append(c.jobs, j)
	}
	j.interval = j.every(now)
	s.jobs = append(s.jobs, j)
	return j, nil
}

// estimate makes again what a source's schedules ask of its ERP, from
// what the warehouse last saw of its lists, stretches its window runs and
// complete sweeps to fit its budget, and reports it: in the log at start
// (the expected requests an hour) and whenever the stretch changes, and in
// the metrics, with the stretched intervals. An estimate that cannot be
// read keeps the last.
func (s *scheduler) estimate(ctx context.Context, source string, start bool) {
	c, d := s.costs[source], s.deps
	sizes, err := db.ListSizes(ctx, d.Pools().Service, source)
	if err != nil {
		d.Log.Warn("could not estimate what the schedules ask of the ERP", "source", source, "err", err)
		return
	}
	e := erpcost.Of(c.src, sizes)
	c.mu.Lock()
	was := c.last.Stretch
	c.last = e
	c.mu.Unlock()
	c.stretch.Set(e.Stretch)
	d.Metrics.Budget(source, e.PerKind, e.Budget, e.Stretch)
	attrs := []any{"source", source, "expected", e.String(), "requests_per_hour", math.Round(e.PerKind.Total())}
	switch {
	case start:
		d.Log.Info("ERP requests an hour at these schedules", attrs...)
	case e.Stretch > 1 && math.Abs(e.Stretch-was) > 0.05*was, e.Stretch == 1 && was > 1:
		d.Log.Info("request budget: window runs and complete sweeps spaced out anew", append(attrs, "stretch", e.Stretch)...)
	}
	now := d.Clock.Now()
	for _, j := range c.jobs {
		every := j.every(now)
		if j.kind == model.KindWindow {
			d.Metrics.DeclareWindow(source, j.stream.Declared().Name, nil, every)
		} else {
			d.Metrics.Declare(source, j.stream.Declared().Name, nil, every)
		}
	}
}

// Stop starts no new run, lets every run commit what it is writing within
// the grace period, then aborts the runs still going.
func (s *scheduler) Stop() {
	s.stopOnce.Do(func() {
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		s.stopper.Stop(done, s.deps.Grace, s.deps.Abort, s.deps.Log)
	})
}

// Warnings are the locks other processes have held too long, for /readyz.
func (s *scheduler) Warnings() []string {
	s.stuckMu.Lock()
	defer s.stuckMu.Unlock()
	out := make([]string, 0, len(s.stuck))
	for _, w := range s.stuck {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// draining reports whether a stop began.
func (s *scheduler) draining() bool {
	select {
	case <-s.stopper.Draining():
		return true
	default:
		return false
	}
}

// job is one kind of run of one (source, stream) on its schedule (a
// stream that follows has a job for its follow runs and one for its
// complete sweeps), run through the source's logins that are due.
type job struct {
	s        *scheduler
	stream   sync.Stream
	kind     model.RunKind
	schedule cron.Schedule
	interval time.Duration // as the job began: it spreads the first tick
	target   sync.Target
	log      *slog.Logger
	backoff  map[string]*loginBackoff // by login
	stuck    bool                     // the lock's holder was last seen holding it too long
	sighting lockSighting             // the holder of the lock this job last found taken
}

// every is the time between two of the job's ticks from now (stretched,
// for window runs and complete sweeps, to fit the source's budget).
func (j *job) every(now time.Time) time.Duration { return config.Interval(j.schedule, now) }

// lockSighting is a session this job found holding its lock, and since
// when it has found it so (Postgres tells when a lock was taken to no
// one, and when a session began only to a superuser or a member of its
// role).
type lockSighting struct {
	pid     int32
	role    string
	since   time.Time
	foreign bool // its role is not erpsync's
}

// foreignRecheck is how soon a job looks again at a lock a session that
// is not erpsync's holds: nothing erpsync runs will let go of it, so the
// stream runs as soon as it is free, and meanwhile each look is counted
// (the alert on it keeps firing) and the time held measured.
const foreignRecheck = time.Minute

// loginBackoff is how a login of a job has been failing.
type loginBackoff struct {
	failures  int // in a row
	notBefore time.Time
}

// failureBackoff: a second failure in a row waits 10 s, then doubling up
// to 15 minutes; refused credentials back off from the first failure.
var failureBackoff = backoff.Policy{Base: 10 * time.Second, Max: 15 * time.Minute}

// loop looks at the stream soon after start-up, so a restarted replica
// does not leave the warehouse stale for a whole period, then on its
// schedule.
func (j *job) loop(ctx context.Context) {
	clock := j.s.deps.Clock
	next := clock.Now().Add(rand.N(min(j.interval/2, j.s.deps.StartSpread) + 1))
	for {
		select {
		case <-j.s.stopper.Draining():
			return
		case <-clock.After(next.Sub(clock.Now())):
		}
		if j.s.draining() { // the stop and the tick came together
			return
		}
		after := j.schedule.Next(clock.Now())
		release, skipped := j.acquire(after)
		if skipped != "" {
			if j.s.draining() {
				return
			}
			j.s.deps.Metrics.Skipped(j.target.Source, j.stream.Declared().Name, skipped)
			j.log.Info("tick skipped: no slot came free before the next tick", "waiting_for", skipped)
			next = after
			continue
		}
		due, wake := j.due(ctx)
		if len(due) == 0 {
			// Another process ran the stream since this job's last tick.
			// Whoever wakes first at the next due time runs it; the
			// others find its lock taken or its data fresh. Fresh data
			// also mean that no holder of the lock is stuck.
			release()
			if j.kind == model.KindSweep {
				j.s.deps.Metrics.LockHeldByOther(j.target.Source, j.stream.Declared().Name, 0)
			}
			j.setStuck("")
			next = wake
			continue
		}
		j.run(ctx, due)
		if j.kind != model.KindFollow {
			// The list's size and its window's are known anew.
			j.s.estimate(ctx, j.target.Source, false)
		}
		release()
		next = j.schedule.Next(clock.Now())
		if soon := clock.Now().Add(foreignRecheck); j.sighting.foreign && next.After(soon) {
			next = soon
		}
	}
}

// acquire takes a slot of the job's source, then one of the process,
// waiting until deadline at most (or a stop). It returns the release, or
// why it got none (metrics.SkipBudget, SkipCapacity).
func (j *job) acquire(deadline time.Time) (release func(), skipped string) {
	clock := j.s.deps.Clock
	timeout := clock.After(deadline.Sub(clock.Now()))
	source := j.s.perSource[j.target.Source]
	start := clock.Now()
	select {
	case source <- struct{}{}:
	case <-timeout:
		j.s.deps.Metrics.BudgetWait(j.target.Source, clock.Now().Sub(start))
		return nil, metrics.SkipBudget
	case <-j.s.stopper.Draining():
		return nil, metrics.SkipBudget
	}
	if waited := clock.Now().Sub(start); waited > time.Millisecond {
		j.s.deps.Metrics.BudgetWait(j.target.Source, waited)
	}
	select {
	case j.s.slots <- struct{}{}:
		return func() { <-j.s.slots; <-source }, ""
	case <-timeout:
	case <-j.s.stopper.Draining():
	}
	<-source
	return nil, metrics.SkipCapacity
}

// due lists the logins whose data are due by the warehouse's record: the
// schedule's next time after their data were last complete, by any
// process (replicas, `erpsync sync`), has come, and they are not backing
// off. It also returns when the first of the others is due. A login
// whose record cannot be read is due (the run then meets and reports the
// database's error). The times are Postgres's, compared with this host's
// clock: a skew between the two moves the due time by as much, which only
// matters to clocks that NTP does not keep within a fraction of a
// schedule. The record is read on the runs pool, whose connection the
// slot this job holds guarantees, so it never waits behind /readyz or
// delays it.
func (j *job) due(ctx context.Context) (due []sync.Login, wake time.Time) {
	now := j.s.deps.Clock.Now()
	last := db.LastCompleted
	switch j.kind {
	case model.KindFollow:
		last = db.LastFollowed
	case model.KindWindow:
		last = db.LastWindowed
	}
	completed, err := last(ctx, j.s.runner.Pool, j.target.Source, j.stream.Declared().Name)
	if err != nil {
		completed = nil
	}
	for _, l := range j.target.Logins {
		at := time.Time{}
		if last, ok := completed[l.Name]; ok {
			at = j.schedule.Next(last)
		}
		if b := j.backoff[l.Name]; b != nil && b.notBefore.After(at) {
			at = b.notBefore
		}
		if !at.After(now) {
			due = append(due, l)
		} else if wake.IsZero() || at.Before(wake) {
			wake = at
		}
	}
	return due, wake
}

// run runs the stream once through the due logins and keeps each one's
// backoff.
func (j *job) run(ctx context.Context, due []sync.Login) {
	defer func() {
		// The runner recovers panics inside streams; this guards the
		// scheduler itself against a bug anywhere else.
		if p := recover(); p != nil {
			j.log.Error("panic in scheduled job", "panic", p)
			for _, l := range due {
				j.failed(l.Name, false)
			}
		}
	}()
	t := j.target
	t.Logins = due
	run := j.s.runner.Run
	switch j.kind {
	case model.KindFollow:
		run = j.s.runner.Follow
	case model.KindWindow:
		run = j.s.runner.Window
	}
	results := run(ctx, j.s.stopper.Draining(), t, j.stream, nil)
	var busy error
	if len(results) == 1 && errors.Is(results[0].Err, sync.ErrBusy) {
		busy = results[0].Err
	}
	j.checkLock(ctx, busy)
	if busy != nil {
		return
	}
	for _, res := range results {
		switch {
		case res.Status == model.StatusSucceeded, res.Status == model.StatusCancelled:
			delete(j.backoff, res.Login)
		default:
			var ae *erp.AuthError
			j.failed(res.Login, errors.As(res.Err, &ae))
		}
	}
}

// checkLock counts a run skipped because another session holds the
// stream's lock (busy, naming it), and reports the holder: one whose role
// is not erpsync's (a reader, an administrator: anyone may call a
// session "erpsync", so the role decides) at once, at WARN, counted and
// in /readyz, since nothing erpsync runs would ever let go of it; any
// holder that has kept it too long, since its data then go stale without
// any run failing. How long is what the holder's run row says when it is
// an erpsync run, else since this job first found it holding the lock.
func (j *job) checkLock(ctx context.Context, busy error) {
	source, stream := j.target.Source, j.stream.Declared().Name
	m := j.s.deps.Metrics
	// The lock's gauge is the complete sweeps' (their schedule is the
	// one it is judged against); a follow or window lock held too long
	// shows as new records or recent changes going stale.
	sweeps := j.kind == model.KindSweep
	if busy == nil {
		if sweeps {
			m.LockHeldByOther(source, stream, 0)
		}
		j.sighting = lockSighting{}
		j.setStuck("")
		return
	}
	m.Skipped(source, stream, metrics.SkipLocked)
	var held *db.LockHeldError
	if !errors.As(busy, &held) || held.Holder == nil {
		j.log.Debug("sync skipped: another session holds the stream's lock", "err", busy)
		return
	}
	h, now := *held.Holder, j.s.deps.Clock.Now()
	if j.sighting.pid != h.PID || j.sighting.role != h.Role {
		j.sighting = lockSighting{pid: h.PID, role: h.Role, since: now, foreign: !h.Erpsync}
	}
	since, who := j.sighting.since, fmt.Sprintf("pid %d (role %s, application %q)", h.PID, h.Role, h.Application)
	if h.Erpsync {
		// An erpsync run's row says where it runs and since when.
		if r, running, err := db.RunningRun(ctx, j.s.deps.Pools().Service, source, stream, j.kind); err == nil && running {
			since, who = r.Since, fmt.Sprintf("%s (pid %d)", r.Host, r.PID)
		}
		j.log.Debug("sync skipped: another erpsync process holds the stream's lock", "holder", who)
	} else {
		m.LockHeldByForeign(source, stream)
		j.log.Warn("a session that is not erpsync's holds the stream's lock; the stream does not run while it does",
			"holder_pid", h.PID, "holder_role", h.Role, "holder_application", h.Application, "seen_holding_since", since)
	}
	d := now.Sub(since)
	if sweeps {
		m.LockHeldByOther(source, stream, d)
	}
	what := source + "/" + stream
	if !sweeps {
		what += " (" + string(j.kind) + " runs)"
	}
	switch {
	case !h.Erpsync:
		j.setStuck(fmt.Sprintf("%s: lock held by %s, not an erpsync process, seen holding it since %s", what, who,
			since.UTC().Format(time.RFC3339)))
	case model.Overdue(d, j.every(now)):
		if !j.stuck {
			j.log.Warn("another process has held the stream's lock too long; its data go stale", "holder", who,
				"held", d.Round(time.Second), "schedule_interval", j.every(now))
		}
		j.setStuck(fmt.Sprintf("%s: lock held by %s for %s, more than %dx its schedule", what, who,
			d.Round(time.Second), model.OverdueFactor))
	default:
		j.setStuck("")
	}
}

// setStuck records (or, with "", clears) a lock held too long.
func (j *job) setStuck(msg string) {
	j.stuck = msg != ""
	key := j.target.Source + "/" + j.stream.Declared().Name + "/" + string(j.kind)
	j.s.stuckMu.Lock()
	defer j.s.stuckMu.Unlock()
	if msg == "" {
		delete(j.s.stuck, key)
	} else {
		j.s.stuck[key] = msg
	}
}

// failed counts a failure of a login and sets when it may run again.
func (j *job) failed(login string, auth bool) {
	b := j.backoff[login]
	if b == nil {
		b = &loginBackoff{}
		j.backoff[login] = b
	}
	b.failures++
	n := b.failures
	if auth {
		n++
	}
	if n < 2 {
		return
	}
	wait := failureBackoff.Delay(n - 1)
	b.notBefore = j.s.deps.Clock.Now().Add(wait)
	j.log.Warn("stream failing; backing off", "login", login, "failures", b.failures, "next_try_after", wait.Round(time.Second))
}
