// Package daemon is `erpsync run`: a few services started in order and
// stopped in reverse. The endpoints come first, so liveness answers while
// the database is still awaited; the token revoker next, so tokens are
// revoked after every run has ended; then the database connector and the
// pruner of old bookkeeping; the scheduler last, so runs stop before
// anything they use goes away. The whole stop fits the configured
// shutdown timeout: grace, abort, revoke and HTTP phases in turn.
//
// Each service gets what it needs and nothing else: its settings, a
// logger, a clock, and functions for what another service owns (the pools
// are the connector's, the warnings the scheduler's, readiness the
// endpoints'). Start and Stop are each called once by Run; Stop may be
// called again and does nothing then.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/sync"
)

// Daemon holds what `erpsync run` needs. Build it with the fields set,
// then call Run.
type Daemon struct {
	Cfg      config.Config
	Catalog  *sync.Catalog
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	Targets  map[string]sync.Target // by source name
	Prefetch int
	// StartSpread spreads the first runs at start-up over up to this long
	// (at most half a job's interval), so that a replica with hundreds of
	// jobs does not start them all at once. 0 starts them at once.
	StartSpread time.Duration
	// ProgressEvery is how often a long run logs its progress (0:
	// sync.ProgressEvery).
	ProgressEvery time.Duration
	// Clock is the services' clock; nil is the real one.
	Clock Clock
}

// service is one part of the daemon. Start returns once the service runs
// in the background (or failed to start); Stop returns once it stopped.
// Run calls Stop only on services whose Start returned nil.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// Run serves until ctx is cancelled (SIGTERM/SIGINT) or the endpoints
// fail, then stops the services in reverse order: runs let their commit
// in flight finish within the grace period, tokens are revoked, the pool
// closes, the endpoints shut down. ln is the endpoints' listener.
func (d *Daemon) Run(ctx context.Context, ln net.Listener) error {
	clock := d.Clock
	if clock == nil {
		clock = realClock{}
	}
	cfg := d.Cfg
	conn := newConnector(connectorDeps{
		URL: cfg.DatabaseURL.Value(), MigrateURL: cfg.MigrateDatabaseURL.Value(), AutoMigrate: cfg.AutoMigrate,
		Runs:   cfg.MaxConcurrentRuns,
		Limits: db.WithLimits(cfg.Database.LockTimeout, cfg.Database.StatementTimeout, cfg.Database.IdleInTxTimeout),
		Log:    d.Log, Clock: clock,
	})
	var targets []sync.Target
	for _, src := range cfg.Sources {
		targets = append(targets, d.Targets[src.Name])
	}
	sched := newScheduler(schedulerDeps{
		Sources: cfg.Sources, Catalog: d.Catalog, Targets: d.Targets, Pools: conn.Pools,
		MaxRuns: cfg.MaxConcurrentRuns, Prefetch: d.Prefetch, StartSpread: d.StartSpread, ProgressEvery: cmp.Or(d.ProgressEvery, sync.ProgressEvery),
		Grace: cfg.Shutdown.Grace, Abort: cfg.Shutdown.Abort,
		Log: d.Log, Clock: clock, Metrics: d.Metrics, Observer: d.Metrics,
	})
	web := newEndpoints(endpointsDeps{
		Listener: ln, Log: d.Log, Metrics: d.Metrics, Warnings: sched.Warnings, ShutdownTimeout: cfg.Shutdown.HTTP,
		Ready:   func(ctx context.Context) error { return databaseReady(ctx, conn.Pools()) },
		Waiting: conn.Waiting,
	})
	services := []service{
		web,
		newRevoker(revokerDeps{Targets: targets, Timeout: cfg.Shutdown.Revoke, Log: d.Log}),
		conn,
		newPruner(prunerDeps{Pool: func() *db.Pools { return conn.Pools() }, Retention: cfg.Retention, Keep: pruneKeep,
			Every: pruneEvery, First: time.Minute, Log: d.Log, Clock: clock, Metrics: d.Metrics}),
		sched,
	}
	started := 0
	defer func() {
		web.Drain()
		for i := started - 1; i >= 0; i-- {
			services[i].Stop()
		}
		d.Log.Info("erpsync stopped")
	}()
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // asked to stop while starting
			}
			return err
		}
		started++
	}
	web.Serving()
	d.Log.Info("erpsync running", "addr", ln.Addr().String())

	// A failing HTTP server is a failure of the daemon, but it still goes
	// through the whole shutdown: runs stop, tokens are revoked.
	select {
	case <-ctx.Done():
		d.Log.Info("shutting down: no new runs; letting commits in flight finish", "grace", cfg.Shutdown.Grace)
		return nil
	case err := <-web.Failed():
		d.Log.Error("http server failed; shutting down", "err", err)
		return err
	}
}

// Clock is the time a service lives by; tests give services a clock they
// move themselves.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
