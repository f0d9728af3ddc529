package daemon

import (
	"context"
	"errors"
	"log/slog"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/erpsync/erpsync/internal/backoff"
	"github.com/erpsync/erpsync/internal/db"
)

// connectorDeps are what the connector needs.
type connectorDeps struct {
	URL, MigrateURL string
	AutoMigrate     bool
	Runs            int // runs allowed at once: the runs pool's size
	Limits          db.Option
	Log             *slog.Logger
	Clock           Clock
}

// connector waits for the database, brings the schema to this binary's
// version (or refuses one that is behind, with auto-migrate off) and owns
// the process's pools (db.OpenPools: one connection per run allowed at
// once, and a few for everything else).
type connector struct {
	deps     connectorDeps
	pools    atomic.Pointer[db.Pools]
	waiting  atomic.Pointer[string] // why the last attempt failed, while Start retries
	stopOnce gosync.Once
}

func newConnector(deps connectorDeps) *connector { return &connector{deps: deps} }

// reconnect is how long the connector waits between attempts to reach the
// database: a Postgres restart or a replica started first must not make
// the daemon crash-loop.
var reconnect = backoff.Policy{Base: time.Second, Max: 30 * time.Second}

// Start returns once the schema is ready, or ctx's error if it ended first.
func (c *connector) Start(ctx context.Context) error {
	d := c.deps
	for attempt := 1; ; attempt++ {
		pools, err := db.OpenPools(ctx, d.URL, d.Runs, d.Limits)
		if err == nil {
			if err := db.EnsureSchema(ctx, pools.Service, d.AutoMigrate, d.MigrateURL, d.Log); err != nil {
				pools.Close()
				return err
			}
			c.pools.Store(pools)
			c.waiting.Store(nil)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, db.ErrBadURL) {
			return err
		}
		why := db.Unreachable(d.URL, err)
		c.waiting.Store(&why)
		wait := reconnect.Delay(attempt)
		d.Log.Error("database unreachable; retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.Clock.After(wait):
		}
	}
}

// Stop closes the pools.
func (c *connector) Stop() {
	c.stopOnce.Do(func() {
		if p := c.pools.Load(); p != nil {
			p.Close()
		}
	})
}

// Waiting says why the database has not been reached yet ("" once it
// was, or before the first attempt failed).
func (c *connector) Waiting() string {
	if w := c.waiting.Load(); w != nil {
		return *w
	}
	return ""
}

// Pools are the process's pools, nil until the database was reached.
func (c *connector) Pools() *db.Pools { return c.pools.Load() }
