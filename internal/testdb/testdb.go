// Package testdb gives each test its own migrated Postgres database,
// cloned from a template that is migrated once per schema version.
// TEST_DATABASE_URL names a server where tests may create databases
// (default: the local Postgres as user postgres).
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/migrations"
)

// AdminURL is the server tests create their databases on.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Admin connects to the test server as its administrator, closed by the
// caller. Without a server the test is skipped on a developer's machine,
// but fails where a database was promised (CI set, or TEST_DATABASE_URL):
// a suite whose every database test skipped must not pass there.
func Admin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err == nil {
		return conn
	}
	if promised() {
		t.Fatalf("no Postgres for tests at %s: %v", db.RedactURL(AdminURL()), err)
	}
	t.Skipf("no Postgres for tests at TEST_DATABASE_URL / 127.0.0.1:5432 (set CI or TEST_DATABASE_URL to make this a failure): %v", err)
	return nil
}

// promised: in CI, or with TEST_DATABASE_URL set, a database is part of
// the test environment and its absence is a failure.
func promised() bool { return os.Getenv("CI") != "" || os.Getenv("TEST_DATABASE_URL") != "" }

// New creates a fresh migrated database for t, dropped when t ends, and
// returns its URL.
func New(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := Admin(t)
	defer admin.Close(ctx)

	tmpl := "erpsync_tmpl_" + schemaHash()
	if err := ensureTemplate(ctx, admin, tmpl); err != nil {
		t.Fatalf("test template: %v", err)
	}
	name := "erpsync_t_" + randomHex(6)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	return withDB(AdminURL(), name)
}

// Empty creates a database with no schema at all, dropped when t ends,
// and returns its URL.
func Empty(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := Admin(t)
	defer admin.Close(ctx)
	name := "erpsync_t_empty_" + randomHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	return withDB(AdminURL(), name)
}

func dropDatabase(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c, err := pgx.Connect(ctx, AdminURL()); err == nil {
		c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
		c.Close(ctx)
	}
}

// Pool opens a pool on a fresh database, closed when t ends.
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	u := New(t)
	pool, err := db.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, u
}

// AppName is the application_name of the tests' own connections, so they
// are never taken for erpsync's (which tests may terminate or count).
const AppName = "erpsync-test"

// ObserverPool is a test's own small pool on dbURL, for the queries that
// check what erpsync did; closed when t ends.
func ObserverPool(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = AppName
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ensureTemplate migrates the template once; test binaries of several
// packages run at the same time, so creation is serialised by a lock.
func ensureTemplate(ctx context.Context, admin *pgx.Conn, tmpl string) error {
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(74291)`); err != nil {
		return err
	}
	defer admin.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(74291)`)
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, tmpl).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	building := tmpl + "_build"
	admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return err
	}
	pool, err := db.Open(ctx, withDB(AdminURL(), building))
	if err != nil {
		return err
	}
	_, err = db.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, tmpl))
	return err
}

// schemaHash names the template after the migrations, so a changed
// migration gets a new template instead of a stale one.
func schemaHash() string {
	h := sha256.New()
	fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(migrations.FS, path)
			h.Write([]byte(path))
			h.Write(b)
		}
		return nil
	})
	// The Go migrations are code: what they do is in these.
	fmt.Fprint(h, migrations.TypedColumns, len(migrations.Go))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// URLOf is the URL of the database name on the test server, which need
// not exist.
func URLOf(name string) string { return withDB(AdminURL(), name) }

func withDB(admin, name string) string {
	u, err := url.Parse(admin)
	if err != nil {
		panic(fmt.Sprintf("TEST_DATABASE_URL is not a URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Role creates a login role for t, a member of the given roles (such as
// erpsync_runtime or erpsync_analyst), dropped when t ends. Roles belong
// to the whole server, so its name is random.
func Role(t testing.TB, memberOf ...string) string {
	t.Helper()
	ctx := context.Background()
	name := "erpsync_t_role_" + randomHex(4)
	admin := Admin(t)
	defer admin.Close(ctx)
	stmt := "CREATE ROLE " + name + " LOGIN"
	for i, r := range memberOf {
		if i == 0 {
			stmt += " IN ROLE "
		} else {
			stmt += ", "
		}
		stmt += pgx.Identifier{r}.Sanitize()
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("creating role %s: %v", name, err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), AdminURL())
		if err == nil {
			c.Exec(context.Background(), "DROP ROLE IF EXISTS "+name)
			c.Close(context.Background())
		}
	})
	return name
}

// URLAs is dbURL logged in as role (made by Role).
func URLAs(t testing.TB, dbURL, role string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// PoolAs opens a pool on dbURL logged in as role (made by Role), closed
// when t ends, before the role is dropped.
func PoolAs(t testing.TB, dbURL, role string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), URLAs(t, dbURL, role))
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(pool.Close)
	return pool
}
