package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/migrations"
)

// SchemaError is a warehouse whose schema is not the one this binary
// needs. Commands report it as a configuration problem: the fix is to
// run `erpsync migrate`, not to retry.
type SchemaError struct {
	Current, Target int64
	// Denied, when set, is why the role that was to migrate the schema
	// may not: the fix is then to migrate as the schema's owner.
	Denied error
}

func (e *SchemaError) Error() string {
	if e.Denied != nil {
		state := "the schema is not there yet"
		if e.Current > 0 {
			state = fmt.Sprintf("the schema is at version %d, this binary needs %d", e.Current, e.Target)
		}
		return fmt.Sprintf("%s, and %v: migrate as the schema's owner, with `erpsync migrate` and ERPSYNC_MIGRATE_DATABASE_URL "+
			"(migrate_database_url in the file) set to the owner's connection (docs/deployment.md, \"Roles to create\")", state, e.Denied)
	}
	if e.Current == 0 {
		return "the schema is not there yet: run `erpsync migrate`"
	}
	if e.Current > e.Target {
		return fmt.Sprintf("the schema is at version %d, newer than this binary's %d: run the newer erpsync", e.Current, e.Target)
	}
	return fmt.Sprintf("the schema is at version %d, this binary needs %d: run `erpsync migrate`", e.Current, e.Target)
}

// SchemaVersions reads the schema's version (0 when never migrated) and
// the newest this binary carries. It only reads, so it works for a role
// that may not create anything, and it never waits on a migration.
func SchemaVersions(ctx context.Context, q Querier) (current, target int64, err error) {
	target = targetVersion()
	var table *string
	if err := q.QueryRow(ctx, `SELECT to_regclass('goose_db_version')::text`).Scan(&table); err != nil {
		return 0, target, fmt.Errorf("reading schema version: %w", Describe(err))
	}
	if table == nil {
		return 0, target, nil
	}
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version`).Scan(&current); err != nil {
		if denied(err) {
			return 0, target, missingGrant(ctx, q, err)
		}
		return 0, target, fmt.Errorf("reading schema version: %w", Describe(err))
	}
	return current, target, nil
}

// RuntimeRole is the group role with the daemon's rights that
// deploy/roles.sql makes and the migrations grant to: the login of
// ERPSYNC_DATABASE_URL is a member of it.
const RuntimeRole = "erpsync_runtime"

// GrantError is a login that lacks a right erpsync needs, with the grant
// that gives it. Like a SchemaError, it is fixed by setting up, not by
// retrying.
type GrantError struct {
	Role  string // the login, as SQL writes it
	What  string // what it may not do
	Why   string // why, as far as the catalog tells
	By    string // who may grant it
	Grant string // the statement that does
	Err   error  // Postgres' refusal
}

func (e *GrantError) Error() string {
	return fmt.Sprintf("role %s may not %s (%v): %s; as %s, run: %s (docs/deployment.md, \"Roles to create\")",
		e.Role, e.What, e.Err, e.Why, e.By, e.Grant)
}

func (e *GrantError) Unwrap() error { return e.Err }

// denied: Postgres refused for want of a privilege.
func denied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" // insufficient_privilege
}

// missingGrant says why the login of q may not read the version table
// (err is the refusal) and which grant fixes it: the login is the
// daemon's, so it needs the runtime role, to which the migrations grant
// the table; where that role lacks it, the table's owner grants it.
func missingGrant(ctx context.Context, q Querier, refusal error) error {
	var (
		role, owner    string
		exists, member bool
		runtimeMayRead bool
	)
	err := q.QueryRow(ctx, `
SELECT quote_ident(current_user), coalesce(c.relowner::regrole::text, 'its owner'),
       r.oid IS NOT NULL, coalesce(pg_has_role(current_user, r.oid, 'MEMBER'), false),
       coalesce(has_table_privilege(r.oid, c.oid, 'SELECT'), false)
FROM (SELECT to_regrole($1) AS oid) r
LEFT JOIN pg_class c ON c.oid = to_regclass('goose_db_version')`, RuntimeRole).Scan(&role, &owner, &exists, &member, &runtimeMayRead)
	if err != nil {
		return fmt.Errorf("reading schema version: %w (and reading why: %w)", Describe(refusal), Describe(err))
	}
	ge := &GrantError{Role: role, What: "read the schema's version table goose_db_version", Err: Describe(refusal)}
	switch {
	case !exists:
		ge.Why = "role " + RuntimeRole + ", whose rights the daemon's login takes, does not exist: deploy/roles.sql makes it"
		ge.By = "a superuser"
		ge.Grant = "psql -f deploy/roles.sql, then GRANT " + RuntimeRole + " TO " + role + ";"
	case !member:
		ge.Why = "it is not a member of " + RuntimeRole + ", the role deploy/roles.sql makes with the daemon's rights"
		ge.By = "a superuser"
		ge.Grant = "GRANT " + RuntimeRole + " TO " + role + ";"
	case !runtimeMayRead:
		ge.Why = RuntimeRole + " may not read it: the migrations grant it only where the role exists, so they ran before deploy/roles.sql made it"
		ge.By = "the table's owner, " + owner
		ge.Grant = "GRANT SELECT ON goose_db_version TO " + RuntimeRole + ";"
	default:
		return fmt.Errorf("reading schema version: %w", Describe(refusal))
	}
	return ge
}

// CheckSchema returns nil when the schema is the one this binary needs,
// a *SchemaError when it is not, or the error that kept it from reading.
func CheckSchema(ctx context.Context, q Querier) error {
	cur, target, err := SchemaVersions(ctx, q)
	if err != nil {
		return err
	}
	if cur != target {
		return &SchemaError{Current: cur, Target: target}
	}
	return nil
}

// checkWritable refuses to write to a schema this binary does not know:
// during a rolling upgrade, a replica of the release before must not go
// on writing rows whose new columns the newer schema expects filled. It
// is CheckSchema, asked before every run (StartRun).
func checkWritable(ctx context.Context, q Querier) error {
	if err := CheckSchema(ctx, q); err != nil {
		var se *SchemaError
		if errors.As(err, &se) {
			return fmt.Errorf("refusing to write: %w", err)
		}
		return err
	}
	return nil
}

// EnsureSchema is what every command does before it uses the warehouse:
// with migrate, apply what is pending (replicas take turns on goose's
// session lock), as the role of migrateURL when one is given (the schema's
// owner, while pool's role may have no right but DML); without, refuse a
// schema that is not current.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool, migrate bool, migrateURL string, log *slog.Logger) error {
	if !migrate {
		return CheckSchema(ctx, pool)
	}
	owner := pool
	if migrateURL != "" {
		var err error
		if owner, err = Open(ctx, migrateURL, WithMaxConns(2)); err != nil {
			return fmt.Errorf("migration database: %w", err)
		}
		defer owner.Close()
	}
	applied, err := Migrate(ctx, owner, log)
	if err != nil {
		return err
	}
	if len(applied) > 0 && log != nil {
		log.Info("schema migrated", "versions", applied)
	}
	return nil
}

// targetVersion is the newest migration the binary carries, in SQL or Go.
func targetVersion() int64 {
	var newest int64
	names, _ := fs.Glob(migrations.FS, "*.sql")
	for _, n := range names {
		digits, _, _ := strings.Cut(n, "_")
		if v, err := strconv.ParseInt(digits, 10, 64); err == nil {
			newest = max(newest, v)
		}
	}
	for _, m := range migrations.Go {
		newest = max(newest, m.Version)
	}
	return newest
}
