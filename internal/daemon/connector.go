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
// holds the pool.
type connector struct {
	d    *Daemon
	held atomic.Pointer[pgxpool.Pool]
}

// reconnect is how long the connector waits between attempts to reach the
// database: a Postgres restart or a replica started first must not make
// the daemon crash-loop.
var reconnect = backoff.Policy{Base: time.Second, Max: 30 * time.Second}

// Start returns once the schema is ready, or ctx's error if it ended first.
func (c *connector) Start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		pool, err := db.Open(ctx, c.d.Cfg.DatabaseURL.Value())
		if err == nil {
			if err := db.EnsureSchema(ctx, pool, c.d.Cfg.AutoMigrate, c.d.Log); err != nil {
				pool.Close()
				return err
			}
			c.held.Store(pool)
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
	if p := c.held.Load(); p != nil {
		p.Close()
	}
}

// pool is the database pool, nil until the connector reached it.
func (d *Daemon) pool() *pgxpool.Pool {
	if d.conn == nil {
		return nil
	}
	return d.conn.held.Load()
}
