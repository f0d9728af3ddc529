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
// together take turns instead of migrating twice. A role that may not
// migrate (the runtime role) gets a *SchemaError saying so, not goose's
// first "permission denied".
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) ([]int64, error) {
	if err := CheckMigrate(ctx, pool); err != nil {
		return nil, err
	}
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
		if denied(err) { // CheckMigrate missed a right
			cur, target, _ := SchemaVersions(ctx, pool)
			return nil, &SchemaError{Current: cur, Target: target, Denied: fmt.Errorf("the migration was refused: %w", Describe(err))}
		}
		return nil, fmt.Errorf("applying migrations: %w", err)
	}
	out := make([]int64, 0, len(res))
	for _, r := range res {
		out = append(out, r.Source.Version)
	}
	return out, nil
}

// CheckMigrate returns nil when the role q is logged in as may apply the
// migrations the schema lacks (or none are pending), and a *SchemaError
// naming what the role lacks when it may not. It only reads, so `erpsync
// check` can ask it without migrating.
func CheckMigrate(ctx context.Context, q Querier) error {
	cur, target, err := SchemaVersions(ctx, q)
	if err != nil || cur >= target {
		return err
	}
	if err := mayMigrate(ctx, q); err != nil {
		return &SchemaError{Current: cur, Target: target, Denied: err}
	}
	return nil
}

// mayMigrate: the migrations create schema erp and goose its version
// table, then alter what those hold. So the role must own both (be a
// member of their owner) where they exist, and may create them where they
// do not; a superuser may do anything.
func mayMigrate(ctx context.Context, q Querier) error {
	var (
		role, database                    string
		super, createSchema, createTable  bool
		tableSchema, erpOwner, tableOwner *string
		ownsErp, ownsTable                *bool
	)
	err := q.QueryRow(ctx, `
SELECT current_user::text, current_database()::text, r.rolsuper,
       has_database_privilege(current_database(), 'CREATE'),
       current_schema()::text, coalesce(has_schema_privilege(current_schema(), 'CREATE'), false),
       n.nspowner::regrole::text, pg_has_role(n.nspowner, 'USAGE'),
       c.relowner::regrole::text, pg_has_role(c.relowner, 'USAGE')
FROM pg_roles r
LEFT JOIN pg_namespace n ON n.nspname = 'erp'
LEFT JOIN pg_class c ON c.oid = to_regclass('goose_db_version')
WHERE r.rolname = current_user`).Scan(&role, &database, &super, &createSchema, &tableSchema, &createTable,
		&erpOwner, &ownsErp, &tableOwner, &ownsTable)
	if err != nil {
		return fmt.Errorf("reading the rights of the migrating role: %w", Describe(err))
	}
	switch {
	case super:
		return nil
	case erpOwner == nil && !createSchema:
		return fmt.Errorf("role %s may not create schema erp in database %s", role, database)
	case erpOwner != nil && !*ownsErp:
		return fmt.Errorf("role %s does not own schema erp (%s does)", role, *erpOwner)
	case tableOwner == nil && tableSchema == nil:
		return fmt.Errorf("role %s has no schema on its search_path to create the version table goose_db_version in", role)
	case tableOwner == nil && !createTable:
		return fmt.Errorf("role %s may not create the version table goose_db_version in schema %s", role, *tableSchema)
	case tableOwner != nil && !*ownsTable:
		return fmt.Errorf("role %s does not own the version table goose_db_version (%s does)", role, *tableOwner)
	}
	return nil
}

// CurrentRole is the role q is logged in as.
func CurrentRole(ctx context.Context, q Querier) (string, error) {
	var role string
	if err := q.QueryRow(ctx, `SELECT current_user::text`).Scan(&role); err != nil {
		return "", fmt.Errorf("reading the current role: %w", Describe(err))
	}
	return role, nil
}
