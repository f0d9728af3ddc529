// Package daemon is `erpsync run`: it schedules every (source, stream),
// serves /healthz, /readyz and /metrics, and shuts down gracefully.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/sync"
)

// Daemon holds what `erpsync run` needs. Build it with the fields set,
// then call Run.
type Daemon struct {
	Cfg      config.Config
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	Clients  map[string]*erp.Client // by source name
	Prefetch int

	pool     atomic.Pointer[pgxpool.Pool] // nil until the database is reached
	migrator *db.Migrator
	runner   *sync.Runner
	stopping atomic.Bool
	mu       gosync.Mutex // guards wg.Add against shutdown's wg.Wait
	wg       gosync.WaitGroup
	stop     chan struct{}
	runCtx   context.Context
}

// Run serves until ctx is cancelled (SIGTERM/SIGINT), then stops
// scheduling, lets the page in flight commit within the grace period,
// revokes tokens and returns. ln is the listener of the HTTP endpoints.
func (d *Daemon) Run(ctx context.Context, ln net.Listener) error {
	d.stop = make(chan struct{})
	runCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	d.runCtx = runCtx

	// The endpoints come up first: liveness must answer while the
	// database is still being waited for.
	srv := &http.Server{Handler: d.routes(), ReadHeaderTimeout: 5 * time.Second}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ln) }()
	defer func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
	}()

	pool, err := d.connect(ctx)
	if err != nil || pool == nil {
		return err // nil: asked to stop while waiting for the database
	}
	defer pool.Close()
	if d.migrator, err = db.NewMigrator(pool, nil); err != nil {
		return err
	}
	defer d.migrator.Close()
	if err := d.prepareSchema(ctx); err != nil {
		return err
	}
	d.runner = &sync.Runner{Pool: pool, Log: d.Log, Obs: d.Metrics, Prefetch: d.Prefetch}
	d.pool.Store(pool)

	c := cron.New(cron.WithLogger(cronLogger{d.Log}))
	var jobs []*job
	for _, src := range d.Cfg.Sources {
		for _, sc := range src.Streams {
			s, ok := sync.Lookup(sc.Name)
			if !ok {
				return fmt.Errorf("source %s: unknown stream %s", src.Name, sc.Name)
			}
			sched, err := config.ParseSchedule(sc.Schedule)
			if err != nil {
				return fmt.Errorf("source %s stream %s: schedule %q: %w", src.Name, sc.Name, sc.Schedule, err)
			}
			j := &job{d: d, stream: s, target: sync.Target{Source: src.Name, Client: d.Clients[src.Name], PageSize: src.PageSize},
				log: d.Log.With("source", src.Name, "stream", s.Name)}
			d.Metrics.Declare(src.Name, s.Name)
			c.Schedule(sched, j)
			jobs = append(jobs, j)
			d.Log.Info("scheduled", "source", src.Name, "stream", s.Name, "schedule", sc.Schedule)
		}
	}
	c.Start()
	// Sync once at start rather than waiting for the first tick: a
	// restarted replica should not leave the warehouse stale for a period.
	for _, j := range jobs {
		go j.Run()
	}
	d.Metrics.SetReady(true)
	d.Log.Info("erpsync running", "addr", ln.Addr().String(), "streams", len(jobs))

	// A failing HTTP server is a failure of the daemon, but it still goes
	// through the whole shutdown: runs stop, tokens are revoked.
	var srvErr error
	select {
	case <-ctx.Done():
	case err := <-srvDone:
		srvErr = fmt.Errorf("http server: %w", err)
		d.Log.Error("http server failed; shutting down", "err", err)
	}

	grace := d.Cfg.ShutdownGrace
	d.Log.Info("shutting down: no new runs; letting pages in flight commit", "grace", grace)
	d.setStopping()
	// Stop's context ends only when the jobs cron started have returned,
	// so it is waited for after the runs were told to stop, not before.
	cronStopped := c.Stop()
	close(d.stop)

	drained := make(chan struct{})
	go func() { d.wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(grace):
		d.Log.Warn("grace period over: aborting runs still in flight")
		abort()
		select {
		case <-drained:
		case <-time.After(10 * time.Second):
			d.Log.Error("runs did not stop after abort")
		}
	}
	<-cronStopped.Done()

	revokeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, client := range d.Clients {
		if err := client.Close(revokeCtx); err != nil {
			d.Log.Warn("could not revoke the ERP token", "source", name, "err", err)
		}
	}
	d.Log.Info("erpsync stopped")
	return srvErr
}

// setStopping marks shutdown: no run begins and /readyz says no.
func (d *Daemon) setStopping() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopping.Store(true)
	d.Metrics.SetReady(false)
}

// connect opens the pool, retrying while the database is unreachable (a
// Postgres restart or a replica that starts first must not crash-loop).
// It returns a nil pool when ctx ends first.
func (d *Daemon) connect(ctx context.Context) (*pgxpool.Pool, error) {
	wait := time.Second
	for {
		pool, err := db.Open(ctx, d.Cfg.DatabaseURL.Value())
		if err == nil {
			return pool, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, db.ErrBadURL) {
			return nil, err
		}
		d.Log.Error("database unreachable; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// prepareSchema applies pending migrations (goose's session lock lets
// replicas start together) or, with auto-migrate off, refuses a schema
// that is behind.
func (d *Daemon) prepareSchema(ctx context.Context) error {
	if d.Cfg.AutoMigrate {
		applied, err := d.migrator.Up(ctx)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			d.Log.Info("schema migrated", "versions", applied)
		}
		return nil
	}
	cur, target, err := d.migrator.Versions(ctx)
	if err != nil {
		return err
	}
	if cur < target {
		return fmt.Errorf("schema is at version %d, this binary needs %d: run `erpsync migrate`, or start without --no-migrate", cur, target)
	}
	return nil
}

// begin registers a run unless shutdown has begun.
func (d *Daemon) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping.Load() {
		return false
	}
	d.wg.Add(1)
	return true
}

// job is one (source, stream) schedule entry.
type job struct {
	d      *Daemon
	stream *sync.Stream
	target sync.Target
	log    *slog.Logger

	// running makes ticks that arrive during a run skip instead of
	// queueing or overlapping. robfig/cron's SkipIfStillRunning is not
	// used: wrapped inside Recover (v3.0.1), one panic leaves it locked
	// for good.
	running atomic.Bool
	// failures and notBefore are touched only by the goroutine that won
	// running, so they need no lock.
	failures  int
	notBefore time.Time
}

func (j *job) Run() {
	if !j.running.CompareAndSwap(false, true) {
		j.log.Debug("previous run still going; tick skipped")
		return
	}
	defer j.running.Store(false)
	if time.Now().Before(j.notBefore) {
		j.log.Debug("backing off after failures", "until", j.notBefore.Format(time.RFC3339), "failures", j.failures)
		return
	}
	if !j.d.begin() {
		return
	}
	defer j.d.wg.Done()
	defer func() {
		// The runner recovers panics inside streams; this guards the
		// scheduler itself against a bug anywhere else.
		if p := recover(); p != nil {
			j.log.Error("panic in scheduled job", "panic", p)
			j.failed(false)
		}
	}()
	res := j.d.runner.Run(j.d.runCtx, j.d.stop, j.target, j.stream, nil)
	switch {
	case errors.Is(res.Err, sync.ErrBusy), res.Status == sync.StatusSucceeded, res.Status == sync.StatusCancelled:
		j.failures = 0
		j.notBefore = time.Time{}
	default:
		var ae *erp.AuthError
		j.failed(errors.As(res.Err, &ae))
	}
}

// failed backs off: a second failure in a row waits 10s, then doubling up
// to 15 minutes; refused credentials back off from the first failure.
func (j *job) failed(auth bool) {
	j.failures++
	n := j.failures
	if auth {
		n++
	}
	if n < 2 {
		return
	}
	wait := min(10*time.Second<<min(n-2, 10), 15*time.Minute)
	j.notBefore = time.Now().Add(wait)
	j.log.Warn("stream failing; backing off", "failures", j.failures, "next_try_after", wait)
}

// cronLogger sends robfig/cron's messages to slog at debug level.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }
func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}
