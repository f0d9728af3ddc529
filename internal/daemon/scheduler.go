package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	gosync "sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/erpsync/erpsync/internal/backoff"
	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// scheduler runs every (source, stream) on its schedule: one goroutine per
// job, which sleeps until the schedule's next time, takes one of the
// process's run slots, runs the stream, and computes the next time from
// when the run ended. A run therefore never overlaps the previous one of
// its job, and ticks that fall during a run are skipped rather than
// queued. A job waits for a slot at most until its next tick; past that
// the tick is skipped and counted.
//
// The schedule is kept for the whole fleet of replicas, not per process:
// before it runs, a job reads when the stream's data were last complete
// (whichever process completed them) and, if the schedule's next time
// after that has not come, sleeps until it instead of running. Replicas
// therefore share the streams' runs instead of each making all of them.
type scheduler struct {
	d      *Daemon
	runner *sync.Runner
	jobs   []*job
	slots  chan struct{}      // one per run allowed at once
	soft   chan struct{}      // closed: start nothing, let commits in flight finish
	abort  context.CancelFunc // cancels the runs still going after the grace period
	wg     gosync.WaitGroup
}

func (s *scheduler) Start(ctx context.Context) error {
	d := s.d
	s.runner = &sync.Runner{Pool: d.conn.runsPool.Load(), Log: d.Log, Obs: d.Metrics, Prefetch: d.Prefetch}
	s.slots = make(chan struct{}, d.Cfg.MaxConcurrentRuns)
	for _, src := range d.Cfg.Sources {
		for _, sc := range src.Streams {
			st, ok := d.Catalog.Lookup(sc.Name)
			if !ok {
				return fmt.Errorf("source %s: unknown stream %s", src.Name, sc.Name)
			}
			sched, err := config.ParseSchedule(sc.Schedule)
			if err != nil {
				return fmt.Errorf("source %s stream %s: schedule %q: %w", src.Name, sc.Name, sc.Schedule, err)
			}
			j := &job{s: s, stream: st, schedule: sched, target: d.Targets[src.Name],
				log: d.Log.With("source", src.Name, "stream", sc.Name)}
			j.interval = config.Interval(sched, time.Now())
			s.jobs = append(s.jobs, j)
			d.Metrics.Declare(src.Name, sc.Name, j.interval)
		}
	}
	d.Log.Info("scheduled", "jobs", len(s.jobs), "max_concurrent_runs", d.Cfg.MaxConcurrentRuns)
	// The runs outlive ctx (a signal): they end through soft, then abort.
	var runCtx context.Context
	runCtx, s.abort = context.WithCancel(context.WithoutCancel(ctx))
	s.soft = make(chan struct{})
	for _, j := range s.jobs {
		s.wg.Go(func() { j.loop(runCtx) })
	}
	return nil
}

// Stop starts no new run, lets every run commit what it is writing within
// the grace period, then aborts the runs still going.
func (s *scheduler) Stop() {
	close(s.soft)
	drained := make(chan struct{})
	go func() { s.wg.Wait(); close(drained) }()
	sd := s.d.Cfg.Shutdown
	select {
	case <-drained:
	case <-time.After(sd.Grace):
		s.d.Log.Warn("grace period over: aborting runs still in flight")
		s.abort()
		select {
		case <-drained:
		case <-time.After(sd.Abort):
			s.d.Log.Error("runs did not stop after abort")
		}
	}
	s.abort()
}

// job is one (source, stream) of the schedule.
type job struct {
	s        *scheduler
	stream   sync.Stream
	schedule cron.Schedule
	interval time.Duration
	target   sync.Target
	log      *slog.Logger
	failures int  // in a row
	stuck    bool // the lock's holder was last seen holding it too long
}

// failureBackoff: a second failure in a row waits 10 s, then doubling up
// to 15 minutes; refused credentials back off from the first failure.
var failureBackoff = backoff.Policy{Base: 10 * time.Second, Max: 15 * time.Minute}

// loop looks at the stream soon after start-up, so a restarted replica
// does not leave the warehouse stale for a whole period, then on its
// schedule.
func (j *job) loop(ctx context.Context) {
	next := time.Now().Add(rand.N(min(j.interval/2, j.s.d.StartSpread) + 1))
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-j.s.soft:
			t.Stop()
			return
		case <-t.C:
		}
		select {
		case <-j.s.soft: // the stop and the tick came together
			return
		default:
		}
		after := j.schedule.Next(time.Now())
		if !j.acquire(after) {
			select {
			case <-j.s.soft:
				return
			default:
			}
			j.s.d.Metrics.Skipped(j.target.Source, j.stream.Name(), metrics.SkipCapacity)
			j.log.Info("tick skipped: every run slot stayed busy until the next tick", "max_concurrent_runs", cap(j.s.slots))
			next = after
			continue
		}
		if due := j.dueAt(ctx); due.After(time.Now()) {
			// Another process ran the stream since this job's last
			// tick. Whoever wakes first at the next due time runs it;
			// the others find its lock taken or its data fresh. Fresh
			// data also mean that no holder of the lock is stuck.
			<-j.s.slots
			j.s.d.Metrics.LockHeldByOther(j.target.Source, j.stream.Name(), 0)
			j.setStuck("")
			next = due
			continue
		}
		notBefore := j.run(ctx)
		<-j.s.slots
		next = j.schedule.Next(time.Now())
		if next.Before(notBefore) {
			next = j.schedule.Next(notBefore)
		}
	}
}

// dueAt is when the stream is next due by the warehouse's record: the
// schedule's next time after its data were last complete, by any process
// (replicas, `erpsync sync`). Zero, due now, when they never were or the
// record cannot be read (the run then meets and reports the database's
// error). The time is Postgres's and is compared with this host's clock:
// a skew between the two moves the due time by as much, which only
// matters to clocks that NTP does not keep within a fraction of a
// schedule. It is read on the runs pool, whose connection the slot this
// job holds guarantees, so it never waits behind /readyz or delays it.
func (j *job) dueAt(ctx context.Context) time.Time {
	cp, err := db.LoadCheckpoint(ctx, j.s.runner.Pool, j.target.Source, j.stream.Name())
	if err != nil || cp.LastCompleted.IsZero() {
		return time.Time{}
	}
	return j.schedule.Next(cp.LastCompleted)
}

// acquire takes a run slot, waiting until deadline at most (or a stop).
func (j *job) acquire(deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case j.s.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-j.s.soft:
		return false
	}
}

// run runs the stream once and returns the time before which it must not
// run again.
func (j *job) run(ctx context.Context) (notBefore time.Time) {
	defer func() {
		// The runner recovers panics inside streams; this guards the
		// scheduler itself against a bug anywhere else.
		if p := recover(); p != nil {
			j.log.Error("panic in scheduled job", "panic", p)
			notBefore = j.failed(false)
		}
	}()
	res := j.s.runner.Run(ctx, j.s.soft, j.target, j.stream, nil)
	j.checkLock(ctx, errors.Is(res.Err, sync.ErrBusy))
	switch {
	case errors.Is(res.Err, sync.ErrBusy), res.Status == model.StatusSucceeded, res.Status == model.StatusCancelled:
		j.failures = 0
		return time.Time{}
	default:
		var ae *erp.AuthError
		return j.failed(errors.As(res.Err, &ae))
	}
}

// checkLock counts a run skipped because another process holds the
// stream's lock, and reports a holder that has kept it too long: its data
// then go stale without any run failing.
func (j *job) checkLock(ctx context.Context, busy bool) {
	source, stream := j.target.Source, j.stream.Name()
	m := j.s.d.Metrics
	if !busy {
		m.LockHeldByOther(source, stream, 0)
		j.setStuck("")
		return
	}
	m.Skipped(source, stream, metrics.SkipLocked)
	j.log.Debug("sync skipped: another process holds the stream's lock")
	h, running, err := db.RunningRun(ctx, j.s.d.pool(), source, stream)
	if err != nil || !running {
		return
	}
	held := time.Since(h.Since)
	m.LockHeldByOther(source, stream, held)
	if limit := model.OverdueFactor * j.interval; held > limit {
		msg := fmt.Sprintf("%s/%s: lock held by %s (pid %d) for %s, more than %dx its schedule", source, stream, h.Host, h.PID,
			held.Round(time.Second), model.OverdueFactor)
		if !j.stuck {
			j.log.Warn("another process has held the stream's lock too long; its data go stale", "holder", h.Host,
				"pid", h.PID, "held", held.Round(time.Second), "schedule_interval", j.interval)
		}
		j.setStuck(msg)
		return
	}
	j.setStuck("")
}

// setStuck records (or, with "", clears) a lock held too long, for
// /readyz's detail.
func (j *job) setStuck(msg string) {
	j.stuck = msg != ""
	key := j.target.Source + "/" + j.stream.Name()
	if msg == "" {
		j.s.d.stuck.Delete(key)
	} else {
		j.s.d.stuck.Store(key, msg)
	}
}

// failed counts a failure and returns when the job may run again.
func (j *job) failed(auth bool) time.Time {
	j.failures++
	n := j.failures
	if auth {
		n++
	}
	if n < 2 {
		return time.Time{}
	}
	wait := failureBackoff.Delay(n - 1)
	j.log.Warn("stream failing; backing off", "failures", j.failures, "next_try_after", wait.Round(time.Second))
	return time.Now().Add(wait)
}
