// Package testdb gives each test its own migrated Postgres database,
// cloned from a template that is migrated once per schema version, as an
// installation is: the roles and the database made by deploy/roles.sql,
// the migrations run by its owner, erpsync_owner, which is no superuser
// (so row-level security, FORCEd, holds it, and every object of erp is
// owned as in production). TEST_DATABASE_URL names a server where tests
// may create databases and roles (default: the local Postgres as user
// postgres); like the tests' own login roles, erpsync_owner logs in
// without a password, so the server trusts local logins.
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
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testutil"
	"github.com/erpsync/erpsync/migrations"
)

// Owner is the role that owns the test databases and migrates them, as
// deploy/roles.sql makes it.
const Owner = "erpsync_owner"

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
	return ownedDatabase(t, "erpsync_t_", true)
}

// EmptyOwned is Empty, owned by Owner with the privileges of an
// installation's database (those deploy/roles.sql gives): a warehouse to
// migrate step by step as its owner. It returns the administrator's URL.
func EmptyOwned(t testing.TB) string {
	t.Helper()
	return ownedDatabase(t, "erpsync_t_empty_", false)
}

// ownedDatabase creates a database owned by Owner with the template's
// privileges, a clone of the migrated template or empty, dropped when t
// ends, and returns its URL.
func ownedDatabase(t testing.TB, prefix string, migrated bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := Admin(t)
	defer admin.Close(ctx)
	tmpl := "erpsync_tmpl_" + schemaHash()
	if err := ensureTemplate(ctx, t, admin, tmpl); err != nil {
		t.Fatalf("test template: %v", err)
	}
	name := prefix + randomHex(6)
	create := fmt.Sprintf("CREATE DATABASE %s OWNER %s", name, Owner)
	if migrated {
		create += " TEMPLATE " + tmpl
	}
	if _, err := admin.Exec(ctx, create); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	var err error
	// A clone has the template's privileges on functions (they are in its
	// catalog) but not on the database; an empty database takes both from
	// the roles script, as an installation's does.
	if migrated {
		err = copyPrivileges(ctx, admin, tmpl, name)
	} else {
		_, err = RunRolesScript(ctx, t, name)
	}
	if err != nil {
		t.Fatalf("privileges of %s: %v", name, err)
	}
	return withDB(AdminURL(), name)
}

// OwnerURL is dbURL logged in as the schema's owner.
func OwnerURL(dbURL string) string { return asRole(dbURL, Owner) }

// copyPrivileges gives database to the privileges the template has (who
// may connect, who may create temporary objects): Postgres does not copy
// them with the template.
func copyPrivileges(ctx context.Context, admin *pgx.Conn, template, database string) error {
	rows, err := admin.Query(ctx, `SELECT a.privilege_type, coalesce(r.rolname, 'PUBLIC')
		FROM pg_database d, aclexplode(d.datacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee WHERE d.datname = $1`, template)
	if err != nil {
		return err
	}
	grants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var g [2]string
		return g, r.Scan(&g[0], &g[1])
	})
	if err != nil || len(grants) == 0 {
		return err
	}
	stmts := []string{"REVOKE ALL ON DATABASE " + database + " FROM PUBLIC"}
	for _, g := range grants {
		to := g[1]
		if to != "PUBLIC" {
			to = pgx.Identifier{to}.Sanitize()
		}
		stmts = append(stmts, fmt.Sprintf("GRANT %s ON DATABASE %s TO %s", g[0], database, to))
	}
	_, err = admin.Exec(ctx, strings.Join(stmts, "; "))
	return err
}

// RunRolesScript runs deploy/roles.sql with psql as the test server's
// administrator, for the database named (created when missing), with
// more psql variables (name=value), and returns what psql printed. It
// runs it as docs/deployment.md does (no -q), ignoring only the
// machine's ~/.psqlrc (-X).
func RunRolesScript(ctx context.Context, t testing.TB, database string, vars ...string) (string, error) {
	t.Helper()
	psql := testutil.RequireTool(t, "psql", "postgresql-client")
	script := rolesScript()
	args := []string{"-X", "-v", "ON_ERROR_STOP=1", "-v", "database=" + database, "-d", AdminURL(), "-f", script}
	for _, v := range vars {
		args = append(args, "-v", v)
	}
	cmd := exec.CommandContext(ctx, psql, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("psql -f %s: %v\n%s", script, err, out)
	}
	return string(out), nil
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

// rolesScript is the path of deploy/roles.sql.
func rolesScript() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "deploy", "roles.sql")
}

// ensureTemplate migrates the template once; test binaries of several
// packages run at the same time, so creation is serialised by a lock.
func ensureTemplate(ctx context.Context, t testing.TB, admin *pgx.Conn, tmpl string) error {
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
	if _, err := RunRolesScript(ctx, t, building); err != nil {
		return err
	}
	pool, err := db.Open(ctx, OwnerURL(withDB(AdminURL(), building)))
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
	// The roles and the database's privileges come from the roles script.
	roles, _ := os.ReadFile(rolesScript())
	h.Write(roles)
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

// URLAs is dbURL logged in as role (made by Role, or Owner).
func URLAs(t testing.TB, dbURL, role string) string {
	t.Helper()
	return asRole(dbURL, role)
}

// PoolAs opens a pool on dbURL logged in as role (made by Role, or
// Owner), closed when t ends, before the role is dropped.
func PoolAs(t testing.TB, dbURL, role string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), asRole(dbURL, role))
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// asRole is dbURL logged in as role, without a password.
func asRole(dbURL, role string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(fmt.Sprintf("database URL %q: %v", dbURL, err))
	}
	u.User = url.User(role)
	return u.String()
}
