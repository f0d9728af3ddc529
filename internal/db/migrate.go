package db

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/erpsync/erpsync/migrations"
)

// Migrate applies the embedded migrations that are pending and returns
// the versions applied. A Postgres session lock makes replicas that start
// together take turns instead of migrating twice.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) ([]int64, error) {
	// Poll for the lock every second for up to 5 minutes (goose's default
	// polls every 5 s: a replica would idle that long behind a migration
	// that takes milliseconds).
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool) // goose speaks database/sql
	defer sqlDB.Close()
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithGoMigrations(migrations.Go...)}
	if log != nil {
		opts = append(opts, goose.WithSlog(log))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("applying migrations: %w", err)
	}
	out := make([]int64, 0, len(res))
	for _, r := range res {
		out = append(out, r.Source.Version)
	}
	return out, nil
}
