package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/backoff"
	"github.com/erpsync/erpsync/internal/db"
)

// connector waits for the database, brings the schema to this binary's
// version (or refuses one that is behind, with auto-migrate off) and
// holds two pools, sized on purpose: one for the runs, one connection per
// run allowed at once (a run holds its stream's lock on its connection
// for its whole life, ERP waits included); and a small one for
// everything else (/readyz, retention), which runs therefore never
// starve.
type connector struct {
	d        *Daemon
	service  atomic.Pointer[pgxpool.Pool]
	runsPool atomic.Pointer[pgxpool.Pool]
}

// servicePoolSize: /readyz, retention and migrations (goose's session lock
// plus its connection) each need one at a time.
const servicePoolSize = 3

// reconnect is how long the connector waits between attempts to reach the
// database: a Postgres restart or a replica started first must not make
// the daemon crash-loop.
var reconnect = backoff.Policy{Base: time.Second, Max: 30 * time.Second}

// Start returns once the schema is ready, or ctx's error if it ended first.
func (c *connector) Start(ctx context.Context) error {
	cfg := c.d.Cfg
	limits := db.WithLimits(cfg.Database.LockTimeout, cfg.Database.StatementTimeout, cfg.Database.IdleInTxTimeout)
	for attempt := 1; ; attempt++ {
		pool, err := db.Open(ctx, cfg.DatabaseURL.Value(), db.WithMaxConns(servicePoolSize), limits)
		if err == nil {
			if err := db.EnsureSchema(ctx, pool, cfg.AutoMigrate, cfg.MigrateDatabaseURL.Value(), c.d.Log); err != nil {
				pool.Close()
				return err
			}
			runs, err := db.Open(ctx, cfg.DatabaseURL.Value(), db.WithMaxConns(cfg.MaxConcurrentRuns), limits)
			if err != nil {
				pool.Close()
				return err
			}
			c.service.Store(pool)
			c.runsPool.Store(runs)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, db.ErrBadURL) {
			return err
		}
		wait := reconnect.Delay(attempt)
		c.d.Log.Error("database unreachable; retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (c *connector) Stop() {
	for _, p := range []*pgxpool.Pool{c.runsPool.Load(), c.service.Load()} {
		if p != nil {
			p.Close()
		}
	}
}

// pool is the service pool, nil until the connector reached the database.
func (d *Daemon) pool() *pgxpool.Pool {
	if d.conn == nil {
		return nil
	}
	return d.conn.service.Load()
}
