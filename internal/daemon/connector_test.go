package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestConnector documents the database connector: it opens the two pools, waiting
// for the database with backoff, and migrates or checks the schema.
func TestConnector(t *testing.T) {
	// On a reachable database it opens both pools and brings the schema to this
	// binary's version or refuses it, without waiting on its clock; a URL that cannot
	// be parsed fails at once.
	t.Run("OpensBothPoolsAtThisBinarysSchemaOrRefusesWithoutWaiting", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			url     func(t *testing.T) string
			migrate bool
			wantErr func(error) bool // nil: Start must succeed
		}{
			{name: "MigratedDatabase", url: func(t *testing.T) string { return testdb.New(t) }},
			{name: "EmptyDatabaseWithAutoMigrate", url: func(t *testing.T) string { return testdb.Empty(t) }, migrate: true},
			{name: "EmptyDatabaseWithoutAutoMigrate", url: func(t *testing.T) string { return testdb.Empty(t) },
				wantErr: func(err error) bool { var se *db.SchemaError; return errors.As(err, &se) && se.Current == 0 }},
			{name: "URLThatCannotBeParsed", url: func(*testing.T) string { return "postgres://erpsync:pw@127.0.0.1:notaport/x" },
				wantErr: func(err error) bool { return errors.Is(err, db.ErrBadURL) }},
		} {
			t.Run(tt.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				clock := newFakeClock()
				log, _ := testLog()
				const runs = 3
				conn := newConnector(connectorDeps{URL: tt.url(t), AutoMigrate: tt.migrate, Runs: runs,
					Limits: db.WithLimits(15*time.Second, time.Minute, time.Minute), Log: log, Clock: clock})
				err := conn.Start(ctx)
				defer conn.Stop()
				// Neither success nor a refusal is worth waiting for.
				if asked := clock.Asked(); len(asked) != 0 {
					t.Errorf("the connector waited on its clock %v; nothing here is worth a retry", asked)
				}
				if tt.wantErr != nil {
					if err == nil || !tt.wantErr(err) {
						t.Fatalf("Start = %v, want the refusal", err)
					}
					if conn.Pools() != nil {
						t.Errorf("Pools() is set after a failed start")
					}
					conn.Stop()
					conn.Stop()
					return
				}
				if err != nil {
					t.Fatalf("Start = %v", err)
				}
				pools := conn.Pools()
				if pools == nil {
					t.Fatal("Pools() is nil after Start succeeded")
				}
				// Both pools reach the database, at this binary's schema; the
				// runs pool has a connection per run allowed at once.
				for name, p := range map[string]*pgxpool.Pool{"runs": pools.Runs, "service": pools.Service} {
					var one int
					if err := p.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
						t.Errorf("%s pool: SELECT 1 = %d, %v", name, one, err)
					}
					if err := db.CheckSchema(ctx, p); err != nil {
						t.Errorf("%s pool: %v", name, err)
					}
				}
				if got := pools.Runs.Config().MaxConns; got != runs {
					t.Errorf("runs pool has %d connections at most, want %d (one per run)", got, runs)
				}
				returnsWithin(t, 10*time.Second, "connector Stop", conn.Stop)
				returnsWithin(t, time.Second, "a second connector Stop", conn.Stop)
				if err := pools.Service.Ping(ctx); err == nil {
					t.Errorf("the service pool still works after Stop")
				}
				if err := pools.Runs.Ping(ctx); err == nil {
					t.Errorf("the runs pool still works after Stop")
				}
			})
		}
	})

	// With the database unreachable it retries, waiting on its clock as the reconnect
	// policy says (the fake clock: no real sleeping), until its context ends, and then
	// returns the context's error.
	t.Run("RetriesAnUnreachableDatabaseUntilCancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clock := newFakeClock()
		log, logs := testLog()
		// Port 1 on loopback: refused at once, no timeout to wait for.
		conn := newConnector(connectorDeps{URL: "postgres://postgres@127.0.0.1:1/erpsync?sslmode=disable&connect_timeout=5",
			Runs: 1, Limits: db.WithLimits(15*time.Second, time.Minute, time.Minute), Log: log, Clock: clock})
		var startErr error
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			startErr = conn.Start(ctx)
		}()
		const attempts = 5
		for n := 1; n <= attempts; n++ {
			clock.waitForWaiters(t, 1, fmt.Sprintf("the connector to wait after failure %d", n))
			asked := clock.Asked()
			if len(asked) != n {
				t.Fatalf("after %d failures the connector asked the clock %d times: %v", n, len(asked), asked)
			}
			// backoff.Policy.Delay: the nominal wait, jittered into its upper half.
			nominal := min(reconnect.Base<<(n-1), reconnect.Max)
			if d := asked[n-1]; d < nominal/2 || d > nominal {
				t.Errorf("wait after failure %d: %s, want within [%s, %s]", n, d, nominal/2, nominal)
			}
			select {
			case <-returned:
				t.Fatalf("Start returned (%v) while the database was unreachable and ctx alive", startErr)
			default:
			}
			if n < attempts {
				clock.Advance(clock.NextWait())
			}
		}
		cancel()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("Start did not return after ctx was cancelled")
		}
		if !errors.Is(startErr, context.Canceled) {
			t.Errorf("Start = %v, want context.Canceled", startErr)
		}
		if conn.Pools() != nil {
			t.Errorf("Pools() set without a database")
		}
		if n := strings.Count(logs.String(), "database unreachable; retrying"); n != attempts {
			t.Errorf("%d retry lines logged, want %d (one per failed attempt)", n, attempts)
		}
		conn.Stop()
		conn.Stop()
	})

	// While the database named in the URL does not exist, it retries and says so (what
	// /readyz shows), naming the database but not its address or password; once it
	// exists, Start succeeds and there is nothing to say.
	t.Run("SaysWhatItWaitsForWithoutAddressOrPassword", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin := testdb.Admin(t)
		defer admin.Close(ctx)
		name := fmt.Sprintf("erpsync_t_missing_%d", time.Now().UnixNano())
		u, err := url.Parse(testdb.AdminURL())
		if err != nil {
			t.Fatal(err)
		}
		const password = "pw-Not-Shown-7q"
		u.User, u.Path = url.UserPassword(u.User.Username(), password), "/"+name
		clock := newFakeClock()
		log, _ := testLog()
		conn := newConnector(connectorDeps{URL: u.String(), AutoMigrate: true, Runs: 1, Log: log, Clock: clock})
		defer conn.Stop()
		started := make(chan error, 1)
		go func() { started <- conn.Start(ctx) }()
		clock.waitForWaiters(t, 1, "the connector to wait after the first failure")
		want := fmt.Sprintf("database %q does not exist", name)
		if got := conn.Waiting(); got != want || strings.Contains(got, password) || strings.Contains(got, u.Host) {
			t.Errorf("Waiting() = %q, want %q (no address, no password)", got, want)
		}
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c, err := pgx.Connect(context.Background(), testdb.AdminURL()); err == nil {
				c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
				c.Close(context.Background())
			}
		})
		clock.Advance(clock.NextWait())
		if err := <-started; err != nil {
			t.Fatalf("Start once the database exists: %v", err)
		}
		if got := conn.Waiting(); got != "" {
			t.Errorf("Waiting() = %q once the database was reached, want nothing", got)
		}
	})
}
