package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/erpsync/erpsync/internal/backoff"
	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/ingest"
	"github.com/erpsync/erpsync/internal/model"
)

// scheduler runs every (source, stream) on its schedule: one goroutine per
// job, which sleeps until the schedule's next time, runs the stream, and
// computes the next time from when the run ended. A run therefore never
// overlaps the previous one of its job, and ticks that fall during a run
// are skipped rather than queued.
type scheduler struct {
	d      *Daemon
	runner *ingest.Runner
	jobs   []*job
	soft   chan struct{}      // closed: start nothing, let commits in flight finish
	abort  context.CancelFunc // cancels the runs still going after the grace period
	wg     gosync.WaitGroup
}

func (s *scheduler) Start(ctx context.Context) error {
	d := s.d
	s.runner = &ingest.Runner{Pool: d.pool(), Log: d.Log, Obs: d.Metrics, Prefetch: d.Prefetch}
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
			s.jobs = append(s.jobs, &job{s: s, stream: st, schedule: sched,
				target: ingest.Target{Source: src.Name, Client: d.Clients[src.Name], PageSize: src.PageSize},
				log:    d.Log.With("source", src.Name, "stream", sc.Name)})
			d.Metrics.Declare(src.Name, sc.Name)
			d.Log.Info("scheduled", "source", src.Name, "stream", sc.Name, "schedule", sc.Schedule)
		}
	}
	// The runs outlive ctx (a signal): they end through soft, then abort.
	var runCtx context.Context
	runCtx, s.abort = context.WithCancel(context.WithoutCancel(ctx))
	s.soft = make(chan struct{})
	for _, j := range s.jobs {
		s.wg.Go(func() { j.loop(runCtx) })
	}
	return nil
}

// abortWait is how long runs get to end once aborted.
const abortWait = 10 * time.Second

// Stop starts no new run, lets every run commit what it is writing within
// the grace period, then aborts the runs still going.
func (s *scheduler) Stop() {
	close(s.soft)
	drained := make(chan struct{})
	go func() { s.wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.d.Cfg.ShutdownGrace):
		s.d.Log.Warn("grace period over: aborting runs still in flight")
		s.abort()
		select {
		case <-drained:
		case <-time.After(abortWait):
			s.d.Log.Error("runs did not stop after abort")
		}
	}
	s.abort()
}

// job is one (source, stream) of the schedule.
type job struct {
	s        *scheduler
	stream   ingest.Stream
	schedule cron.Schedule
	target   ingest.Target
	log      *slog.Logger
	failures int // in a row
}

// failureBackoff: a second failure in a row waits 10 s, then doubling up
// to 15 minutes; refused credentials back off from the first failure.
var failureBackoff = backoff.Policy{Base: 10 * time.Second, Max: 15 * time.Minute}

// loop runs the stream once at once, so a restarted replica does not
// leave the warehouse stale for a whole period, then on its schedule.
func (j *job) loop(ctx context.Context) {
	next := time.Now()
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
		notBefore := j.run(ctx)
		next = j.schedule.Next(time.Now())
		if next.Before(notBefore) {
			next = j.schedule.Next(notBefore)
		}
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
	switch {
	case errors.Is(res.Err, ingest.ErrBusy), res.Status == model.StatusSucceeded, res.Status == model.StatusCancelled:
		j.failures = 0
		return time.Time{}
	default:
		var ae *erp.AuthError
		return j.failed(errors.As(res.Err, &ae))
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
