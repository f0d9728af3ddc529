// Package db owns the warehouse: the connection pools, the embedded
// migrations and every statement erpsync runs, one file per table or
// family of tables, the SQL next to the Go that runs it. What a statement
// is of is named by a model.Key (a source's stream through one login), or
// by a model.Scope (a key with the login's company and branch) where rows
// are labelled.
package db

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier is what both a transaction and a connection offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// Tx is a transaction as the code that writes in it gets it: statements,
// COPY and batches, and no way to end it, nest it or reach its connection
// (whoever began it commits).
type Tx struct{ tx pgx.Tx }

// InTx is the handle of tx.
func InTx(tx pgx.Tx) Tx { return Tx{tx: tx} }

func (t Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.tx.Exec(ctx, sql, args...)
}

func (t Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.tx.Query(ctx, sql, args...)
}

func (t Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

func (t Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return t.tx.CopyFrom(ctx, table, columns, src)
}

func (t Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.tx.SendBatch(ctx, b)
}

// Reader is what reading needs: a read-only transaction offers it, and a
// stream that holds one cannot write (see sync.Run.Read).
type Reader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrBadURL is a connection string that cannot be parsed. pgx's own parse
// errors can quote the string, password included, so only this is said.
var ErrBadURL = errors.New("database URL: cannot be parsed (expected postgres://user:pass@host:5432/db or key=value form)")

// RedactURL is a connection URL fit to be shown: its password, if any,
// replaced by xxxxx. A string that cannot be parsed is not shown at all.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a database URL that cannot be parsed)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// Unreachable says in a few words why the database of url could not be
// opened (err, from Open), naming the database and the role but neither
// its address nor its password: for places anyone who reaches the
// daemon's port reads, such as /readyz. The log has the whole error.
func Unreachable(url string, err error) string {
	cfg, perr := pgconn.ParseConfig(url)
	if perr != nil {
		return "database URL: cannot be parsed"
	}
	var pgErr *pgconn.PgError
	switch {
	case !errors.As(err, &pgErr):
		return fmt.Sprintf("database %q unreachable", cfg.Database)
	case pgErr.Code == "3D000": // invalid_catalog_name
		return fmt.Sprintf("database %q does not exist", cfg.Database)
	case strings.HasPrefix(pgErr.Code, "28"): // invalid authorization
		return fmt.Sprintf("database %q refused the login of role %q (%s)", cfg.Database, cfg.User, pgErr.Code)
	}
	return fmt.Sprintf("database %q unreachable (%s)", cfg.Database, pgErr.Code)
}

// Option adjusts a pool that Open makes.
type Option func(*pgxpool.Config)

// WithMaxConns bounds the pool's connections.
func WithMaxConns(n int) Option {
	return func(c *pgxpool.Config) { c.MaxConns = int32(n) }
}

// WithLimits sets lock_timeout, statement_timeout and
// idle_in_transaction_session_timeout on every session of the pool, so a
// lock held elsewhere or a statement gone wrong fails its run instead of
// hanging it. A limit the connection string sets itself wins.
func WithLimits(lock, statement, idleInTx time.Duration) Option {
	return func(c *pgxpool.Config) {
		for param, d := range map[string]time.Duration{
			"lock_timeout": lock, "statement_timeout": statement, "idle_in_transaction_session_timeout": idleInTx,
		} {
			if _, set := c.ConnConfig.RuntimeParams[param]; !set && d > 0 {
				c.ConnConfig.RuntimeParams[param] = strconv.FormatInt(d.Milliseconds(), 10)
			}
		}
	}
}

// Open connects a pool and checks that Postgres answers.
func Open(ctx context.Context, url string, opts ...Option) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, ErrBadURL
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "erpsync"
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 15 * time.Second
	for _, o := range opts {
		if o != nil { // an option left unset is no option
			o(cfg)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, Describe(err))
	}
	return pool, nil
}

// Pools are the two pools of a process that runs streams. A run holds its
// stream's lock on a connection of Runs for its whole life, ERP waits
// included, so Runs has one connection per run allowed at once; Service
// has a few for everything else (readiness, retention, recording a run
// whose connection was lost), which runs therefore never starve.
type Pools struct {
	Runs, Service *pgxpool.Pool
}

// servicePoolSize: readiness, retention, and migrations (goose's session
// lock plus its connection) each need one at a time.
const servicePoolSize = 3

// OpenPools opens the pools of a process allowing runs runs at once, the
// one sizing rule of `erpsync sync` and `erpsync run`.
func OpenPools(ctx context.Context, url string, runs int, opts ...Option) (*Pools, error) {
	service, err := Open(ctx, url, append(opts, WithMaxConns(servicePoolSize))...)
	if err != nil {
		return nil, err
	}
	r, err := Open(ctx, url, append(opts, WithMaxConns(runs))...)
	if err != nil {
		service.Close()
		return nil, err
	}
	return &Pools{Runs: r, Service: service}, nil
}

// Close closes both pools.
func (p *Pools) Close() {
	p.Runs.Close()
	p.Service.Close()
}

// IsUniqueViolation reports a duplicate key error.
func IsUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// Describe maps driver errors to one plain sentence; Postgres errors keep
// their code so an operator can look them up.
func Describe(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &describedError{pg: pgErr}
	}
	return err
}

// describedError prints a Postgres error in one line and still unwraps
// to it, so callers can test the code.
type describedError struct{ pg *pgconn.PgError }

func (e *describedError) Error() string {
	switch e.pg.Code {
	case "55P03":
		return fmt.Sprintf("postgres: waited longer than lock_timeout for a lock another session holds (%s)", e.pg.Code)
	case "57014":
		return fmt.Sprintf("postgres: %s: longer than statement_timeout, or cancelled (%s)", e.pg.Message, e.pg.Code)
	}
	return fmt.Sprintf("postgres %s (%s)", e.pg.Message, e.pg.Code)
}
func (e *describedError) Unwrap() error { return e.pg }

// sendBatch runs, in one round trip, the statements queued in b, in tx,
// and returns the first error.
func sendBatch(ctx context.Context, tx Tx, b *pgx.Batch, what string) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", what, Describe(err))
	}
	return nil
}

// deref is what p points at, or the zero value for nil (a NULL column).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
