// Package daemon is `erpsync run`: a few services started in order and
// stopped in reverse. The endpoints come first, so liveness answers while
// the database is still awaited; the token revoker next, so tokens are
// revoked after every run has ended; then the database connector and the
// pruner of old bookkeeping; the scheduler last, so runs stop before
// anything they use goes away. The whole stop fits the configured
// shutdown timeout: grace, abort, revoke and HTTP phases in turn.
package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/erpsync/erpsync/internal/config"
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

	conn     *connector
	stopping atomic.Bool
	readyMu  gosync.Mutex // orders ready-gauge updates against shutdown
	// stuck holds, by "source/stream", what /readyz reports of a stream
	// whose lock another process has held too long.
	stuck gosync.Map
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
	web := &endpoints{d: d, ln: ln}
	d.conn = &connector{d: d}
	services := []service{web, &revoker{d: d}, d.conn, &pruner{d: d}, &scheduler{d: d}}
	started := 0
	defer func() {
		d.setStopping()
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
	d.Metrics.SetReady(true)
	d.Log.Info("erpsync running", "addr", ln.Addr().String())

	// A failing HTTP server is a failure of the daemon, but it still goes
	// through the whole shutdown: runs stop, tokens are revoked.
	select {
	case <-ctx.Done():
		d.Log.Info("shutting down: no new runs; letting commits in flight finish", "grace", d.Cfg.Shutdown.Grace)
		return nil
	case err := <-web.failed:
		d.Log.Error("http server failed; shutting down", "err", err)
		return err
	}
}

// setStopping marks shutdown: no run begins and /readyz says no.
func (d *Daemon) setStopping() {
	d.readyMu.Lock()
	defer d.readyMu.Unlock()
	d.stopping.Store(true)
	d.Metrics.SetReady(false)
}
