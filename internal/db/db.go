// Package db owns the warehouse: the connection pool, the embedded
// migrations and every write erpsync makes. SQL lives next to the Go that
// runs it.
package db

import (
	"context"
	"errors"
	"fmt"
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

// ErrBadURL is a connection string that cannot be parsed. pgx's own parse
// errors can quote the string, password included, so only this is said.
var ErrBadURL = errors.New("database URL: cannot be parsed (expected postgres://user:pass@host:5432/db or key=value form)")

// Open connects a pool and checks that Postgres answers.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, ErrBadURL
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "erpsync"
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 15 * time.Second
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
	return fmt.Sprintf("postgres %s (%s)", e.pg.Message, e.pg.Code)
}
func (e *describedError) Unwrap() error { return e.pg }
