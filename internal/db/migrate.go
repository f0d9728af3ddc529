package db

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/erpsync/erpsync/migrations"
)

// Migrator applies the embedded migrations. A Postgres session lock makes
// replicas that start together take turns instead of migrating twice.
type Migrator struct {
	sqlDB    *sql.DB
	provider *goose.Provider
}

// NewMigrator wraps the pool for goose, which speaks database/sql.
func NewMigrator(pool *pgxpool.Pool, log *slog.Logger) (*Migrator, error) {
	// Poll for the lock every second for up to 5 minutes (goose's default
	// polls every 5 s: a replica would idle that long behind a migration
	// that takes milliseconds).
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker)}
	if log != nil {
		opts = append(opts, goose.WithSlog(log))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS, opts...)
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{sqlDB: sqlDB, provider: p}, nil
}

// Up applies what is pending and returns the versions applied.
func (m *Migrator) Up(ctx context.Context) ([]int64, error) {
	res, err := m.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("applying migrations: %w", err)
	}
	out := make([]int64, 0, len(res))
	for _, r := range res {
		out = append(out, r.Source.Version)
	}
	return out, nil
}

// Versions returns the schema's version and the newest this binary knows.
func (m *Migrator) Versions(ctx context.Context) (current, target int64, err error) {
	current, target, err = m.provider.GetVersions(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reading schema version: %w", err)
	}
	return current, target, nil
}

// Close releases the database/sql wrapper (not the pool).
func (m *Migrator) Close() error { return m.sqlDB.Close() }

// Migrate is the one-call form used by commands.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) ([]int64, error) {
	m, err := NewMigrator(pool, log)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.Up(ctx)
}
