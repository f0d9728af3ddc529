package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// LockTaker makes a login of no erpsync role that may take the stream
// locks in the database of dbURL (it is granted the advisory-lock
// functions erpsync calls, as where deploy/roles.sql was not run again),
// dropped when t ends.
func LockTaker(t testing.TB, dbURL string) string {
	t.Helper()
	ctx := context.Background()
	role := Role(t)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `GRANT EXECUTE ON FUNCTION pg_try_advisory_lock(int, int), pg_advisory_unlock(int, int) TO `+role); err != nil {
		t.Fatal(err)
	}
	return role
}

// HoldStreamLock takes the lock of a kind of run of source/stream in the
// database of dbURL as role (made by Role, or the administrator when ""),
// its session calling itself app, until release or the end of t, and
// returns the session's pid.
func HoldStreamLock(t testing.TB, dbURL, role, app, source, stream string, kind model.RunKind) (pid uint32, release func()) {
	t.Helper()
	ctx := context.Background()
	u := dbURL
	if role != "" {
		u = asRole(dbURL, role)
	}
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	release, err = db.LockStream(ctx, conn, source, stream, kind)
	if err != nil || release == nil {
		t.Fatalf("taking the lock of %s/%s as %q: %v", source, stream, role, err)
	}
	return conn.PgConn().PID(), release
}
