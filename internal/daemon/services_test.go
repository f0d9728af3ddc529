package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// Each service of the daemon tested on its own, built from its deps struct
// as Run builds it, without the rest of the daemon around it.

// testLog is a logger writing into a buffer the test can read.
func testLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// returnsWithin calls f and fails the test if it has not returned after d
// (a Stop that hangs would otherwise hang the whole package).
func returnsWithin(t *testing.T, d time.Duration, what string, f func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
	return time.Since(start)
}

// ---- endpoints -------------------------------------------------------------------

// readyGauge is the endpoints' Metrics: a /metrics handler and the
// erpsync_ready gauge, recorded.
type readyGauge struct {
	mu   gosync.Mutex
	set  bool // SetReady was called at least once
	last bool
}

func (g *readyGauge) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "fake_metric 1") })
}

func (g *readyGauge) SetReady(ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.set, g.last = true, ok
}

func (g *readyGauge) value() (set, ready bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.set, g.last
}

// readiness is what the endpoints' Ready and Warnings report, as the test
// sets it.
type readiness struct {
	mu       gosync.Mutex
	err      error
	warnings []string
	checks   int // Ready calls
}

func (r *readiness) ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks++
	return r.err
}

func (r *readiness) warn() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warnings)
}

func (r *readiness) set(err error, warnings ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err, r.warnings = err, warnings
}

func (r *readiness) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checks
}

func httpGet(c *http.Client, u string) (int, string, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestEndpoints walks the endpoints through a daemon's life: starting,
// serving, the database away and back, warnings, draining. /healthz says
// 200 throughout; /readyz and the erpsync_ready gauge follow the state,
// and the deps' Ready is not even asked while starting or draining.
func TestEndpoints(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	log, _ := testLog()
	gauge := &readyGauge{}
	state := &readiness{}
	var waiting atomic.Value // what the start waits for
	waiting.Store("")
	web := newEndpoints(endpointsDeps{Listener: ln, Log: log, Metrics: gauge, Ready: state.ready, Warnings: state.warn,
		Waiting: func() string { return waiting.Load().(string) }, ShutdownTimeout: 5 * time.Second})
	if err := web.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(web.Stop)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	steps := []struct {
		name      string
		do        func()
		code      int
		body      string // exactly
		ready     bool   // the gauge after the /readyz answer
		asksReady bool   // whether /readyz consults the deps' Ready
	}{
		{"before Serving", nil,
			http.StatusServiceUnavailable, "not ready: starting\n", false, false},
		{"before Serving, the database not reached", func() { waiting.Store(`database "warehouse" does not exist`) },
			http.StatusServiceUnavailable, "not ready: starting: database \"warehouse\" does not exist; retrying\n", false, false},
		{"serving, database fine", func() { waiting.Store(""); web.Serving() },
			http.StatusOK, "ready\n", true, true},
		{"database away", func() { state.set(errors.New("database unreachable")) },
			http.StatusServiceUnavailable, "not ready: database unreachable\n", false, true},
		{"database back, with warnings", func() {
			state.set(nil, "default/invoices: lock held by other-host (pid 4242) for 1h0m0s", "second warning")
		},
			http.StatusOK, "ready\nwarning: default/invoices: lock held by other-host (pid 4242) for 1h0m0s\nwarning: second warning\n", true, true},
		{"draining", web.Drain,
			http.StatusServiceUnavailable, "not ready: shutting down\n", false, false},
		// Serving called late (a start that raced a stop) must not make a
		// draining process ready again.
		{"Serving after Drain", web.Serving,
			http.StatusServiceUnavailable, "not ready: shutting down\n", false, false},
	}
	for _, st := range steps {
		if st.do != nil {
			st.do()
		}
		before := state.calls()
		code, body, err := httpGet(c, base+"/readyz")
		if err != nil || code != st.code || body != st.body {
			t.Errorf("%s: /readyz = %d %q (%v), want %d %q", st.name, code, body, err, st.code, st.body)
		}
		if asked := state.calls() > before; asked != st.asksReady {
			t.Errorf("%s: /readyz consulted Ready: %v, want %v", st.name, asked, st.asksReady)
		}
		if set, ready := gauge.value(); (st.ready && !set) || ready != st.ready {
			t.Errorf("%s: erpsync_ready = %v (set %v), want %v", st.name, ready, set, st.ready)
		}
		if code, body, err := httpGet(c, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s: /healthz = %d %q (%v), want 200 \"ok\\n\": liveness does not depend on readiness", st.name, code, body, err)
		}
	}
	if code, body, err := httpGet(c, base+"/metrics"); code != http.StatusOK || body != "fake_metric 1\n" {
		t.Errorf("/metrics = %d %q (%v), want the Metrics handler's answer", code, body, err)
	}

	returnsWithin(t, 10*time.Second, "endpoints Stop", web.Stop)
	returnsWithin(t, time.Second, "a second endpoints Stop", web.Stop)
	// Stop closed the listener: nothing accepts on it any more.
	if conn, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("Accept on the listener after Stop: %v, want net.ErrClosed", err)
	}
	if code, _, err := httpGet(c, base+"/healthz"); err == nil {
		t.Errorf("/healthz answered %d after Stop", code)
	}
	// A shutdown asked for is not a failure of the server.
	select {
	case err := <-web.Failed():
		t.Errorf("Failed delivered %v after a normal Stop", err)
	default:
	}
}

// TestEndpointsFailed: a server that stops on its own (its listener
// closed under it) reports it on Failed, which is what makes Run stop
// the daemon; Stop after that still returns.
func TestEndpointsFailed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log, _ := testLog()
	state := &readiness{}
	web := newEndpoints(endpointsDeps{Listener: ln, Log: log, Metrics: &readyGauge{}, Ready: state.ready, Warnings: state.warn,
		ShutdownTimeout: time.Second})
	if err := web.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	select {
	case err := <-web.Failed():
		if err == nil || !strings.Contains(err.Error(), "http server") {
			t.Errorf("Failed delivered %v, want the server's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Failed delivered nothing after the listener was closed")
	}
	returnsWithin(t, 5*time.Second, "endpoints Stop after a failure", web.Stop)
	returnsWithin(t, time.Second, "a second endpoints Stop", web.Stop)
}

// TestDatabaseReady is readiness as Run wires it: not before the pools
// exist, not on a schema this binary cannot use, yes on a current one.
func TestDatabaseReady(t *testing.T) {
	ctx := context.Background()
	if err := databaseReady(ctx, nil); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Errorf("without pools: %v, want a starting error", err)
	}
	for _, tt := range []struct {
		name    string
		url     string
		wantErr string // "" when ready; else what the *db.SchemaError says
	}{
		{"migrated database", testdb.New(t), ""},
		{"database without the schema", testdb.Empty(t), "run `erpsync migrate`"},
		// A rolling upgrade migrated past this binary: it writes nothing
		// there, and says so.
		{"schema newer than the binary", newerSchema(t), "newer than this binary's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pools, err := db.OpenPools(ctx, tt.url, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer pools.Close()
			err = databaseReady(ctx, pools)
			var se *db.SchemaError
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (!errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("databaseReady = %v; want a *db.SchemaError saying %q (none when empty)", err, tt.wantErr)
			}
			pools.Close()
			if err := databaseReady(ctx, pools); err == nil || !strings.Contains(err.Error(), "unreachable") {
				t.Errorf("on closed pools: %v, want database unreachable", err)
			}
		})
	}
}

// newerSchema is a warehouse migrated one version past this binary.
func newerSchema(t *testing.T) string {
	t.Helper()
	url := testdb.New(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, target, err := db.SchemaVersions(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, target+1); err != nil {
		t.Fatal(err)
	}
	return url
}

// ---- connector -------------------------------------------------------------------

// TestConnector: the connector opens both pools on a reachable database
// and brings the schema to this binary's version or refuses it, without
// waiting on its clock; a URL that cannot be parsed fails at once.
func TestConnector(t *testing.T) {
	for _, tt := range []struct {
		name    string
		url     func(t *testing.T) string
		migrate bool
		wantErr func(error) bool // nil: Start must succeed
	}{
		{name: "migrated database", url: func(t *testing.T) string { return testdb.New(t) }},
		{name: "empty database, auto-migrate", url: func(t *testing.T) string { return testdb.Empty(t) }, migrate: true},
		{name: "empty database, no auto-migrate", url: func(t *testing.T) string { return testdb.Empty(t) },
			wantErr: func(err error) bool { var se *db.SchemaError; return errors.As(err, &se) && se.Current == 0 }},
		{name: "URL that cannot be parsed", url: func(*testing.T) string { return "postgres://erpsync:pw@127.0.0.1:notaport/x" },
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
}

// TestConnectorRetriesUntilCancelled: with the database unreachable the
// connector retries, waiting on its clock as the reconnect policy says
// (the fake clock: no real sleeping), until its context ends, and then
// returns the context's error.
func TestConnectorRetriesUntilCancelled(t *testing.T) {
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
}

// TestConnectorSaysWhatItWaitsFor: while the database named in the URL
// does not exist, the connector retries and says so (what /readyz shows),
// naming the database but not its address or password; once it exists,
// Start succeeds and there is nothing to say.
func TestConnectorSaysWhatItWaitsFor(t *testing.T) {
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
}

// ---- pruner ------------------------------------------------------------------------

// pruneCounts records the pruner's Metrics.
type pruneCounts struct {
	mu    gosync.Mutex
	calls []string // "table=n", in order
}

func (p *pruneCounts) Pruned(table string, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("%s=%d", table, n))
}

func (p *pruneCounts) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// TestPruner: on a database holding old bookkeeping, nothing is pruned
// before First has passed on the pruner's clock; then runs older than
// the retention go except each stream's last Keep (running ones never),
// rejected records not seen within the retention go, the counts reach
// the metrics, and the next pruning comes Every later. Stop returns; a
// second Stop does nothing.
func TestPruner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testdb.New(t)
	obs := testdb.ObserverPool(t, dbURL)
	const (
		keep      = 5
		retention = 90 * 24 * time.Hour
		first     = time.Minute
		every     = time.Hour
	)
	// Runs, inserted oldest first so that ids follow start times. Ages in
	// days; 200 is past the retention, 1 within it.
	type runs struct {
		stream, status string
		n, ageDays     int
	}
	fixture := []runs{
		{"invoices", "running", 1, 300}, // never finished: never pruned
		{"invoices", "succeeded", 30, 200},
		{"currencies", "failed", 3, 200},
		{"currencies", "succeeded", 4, 1}, // recent runs count towards keep
		{"cashboxes", "succeeded", 2, 200},
	}
	seq := 0
	for _, r := range fixture {
		for range r.n {
			seq++
			started := fmt.Sprintf("now() - interval '%d days' + interval '%d minutes'", r.ageDays, seq)
			finished := "NULL"
			if r.status != "running" {
				finished = started + " + interval '30 seconds'"
			}
			if _, err := obs.Exec(ctx, fmt.Sprintf(`INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at)
				VALUES ('default', $1, $2, %s, %s)`, started, finished), r.stream, r.status); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, ageDays := range []int{100, 100, 120, 95, 1, 0, 0} {
		if _, err := obs.Exec(ctx, `INSERT INTO erp.rejected_records (source, stream, reason, record, record_hash, rejected_at, last_seen)
			VALUES ('default', 'invoices', 'test', $1, sha256($1), now() - make_interval(days => $2 + 10), now() - make_interval(days => $2))`,
			[]byte(fmt.Sprintf(`{"id":%d}`, i)), ageDays); err != nil {
			t.Fatal(err)
		}
	}
	// What must stay: every stream's newest keep runs, the running one,
	// and the rejected records seen within the retention.
	survivors := func() []int64 {
		rows, err := obs.Query(ctx, `SELECT id FROM (
			SELECT id, status, row_number() OVER (PARTITION BY stream ORDER BY started_at DESC) AS rank FROM erp.sync_runs) r
			WHERE rank <= $1 OR status = 'running' ORDER BY id`, keep)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	wantRuns := survivors()
	allRuns := count(t, obs, `SELECT count(*) FROM erp.sync_runs`)
	wantPrunedRuns := allRuns - int64(len(wantRuns))
	if wantPrunedRuns != 25+2 {
		t.Fatalf("fixture: %d runs to prune, want 27 (25 invoices, 2 currencies)", wantPrunedRuns)
	}

	pools, err := db.OpenPools(ctx, dbURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pools.Close()
	clock := newFakeClock()
	log, _ := testLog()
	metrics := &pruneCounts{}
	p := newPruner(prunerDeps{Pool: func() *db.Pools { return pools }, Retention: retention, Keep: keep, Every: every, First: first,
		Log: log, Clock: clock, Metrics: metrics})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)

	clock.waitForWaiters(t, 1, "the pruner to wait for its first pruning")
	if asked := clock.Asked(); asked[0] != first {
		t.Errorf("the first pruning waits %s, want First (%s)", asked[0], first)
	}
	// Just short of First: the pruner is still blocked on the clock, so
	// nothing can have been pruned.
	clock.Advance(first - time.Second)
	if clock.Waiting() != 1 || len(metrics.get()) != 0 {
		t.Fatalf("the pruner acted before First had passed: metrics %v", metrics.get())
	}
	if n := count(t, obs, `SELECT count(*) FROM erp.sync_runs`); n != allRuns {
		t.Fatalf("%d runs before the first pruning, want %d", n, allRuns)
	}

	clock.Advance(time.Second)
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, "the first pruning to report", func() (bool, error) {
		return len(metrics.get()) == 2 && clock.Waiting() == 1, nil
	})
	want := []string{fmt.Sprintf("sync_runs=%d", wantPrunedRuns), "rejected_records=4"}
	if got := metrics.get(); !slices.Equal(got, want) {
		t.Errorf("Pruned calls %v, want %v", got, want)
	}
	if got := survivors(); !slices.Equal(got, wantRuns) {
		t.Errorf("runs left %v, want %v (each stream's last %d, and the running one)", got, wantRuns, keep)
	}
	if n := count(t, obs, `SELECT count(*) FROM erp.sync_runs`); n != int64(len(wantRuns)) {
		t.Errorf("%d runs left, want %d", n, len(wantRuns))
	}
	if n := count(t, obs, `SELECT count(*) FROM erp.rejected_records`); n != 3 {
		t.Errorf("%d rejected records left, want the 3 seen within the retention", n)
	}
	if asked := clock.Asked(); len(asked) != 2 || asked[1] != every {
		t.Errorf("waits asked %v, want [First, Every]", asked)
	}

	// Every later: prunes again, finding nothing.
	clock.Advance(every)
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, "the second pruning to report", func() (bool, error) {
		return len(metrics.get()) == 4 && clock.Waiting() == 1, nil
	})
	if got := metrics.get()[2:]; !slices.Equal(got, []string{"sync_runs=0", "rejected_records=0"}) {
		t.Errorf("second pruning: %v, want nothing pruned", got)
	}

	returnsWithin(t, 10*time.Second, "pruner Stop", p.Stop)
	returnsWithin(t, time.Second, "a second pruner Stop", p.Stop)
	clock.Advance(every)
	if got := metrics.get(); len(got) != 4 {
		t.Errorf("the pruner pruned after Stop: %v", got)
	}
}

// TestPrunerBeforeTheDatabase: a pruning due while the connector has no
// pools yet is skipped, not a crash, and the pruner waits for the next.
func TestPrunerBeforeTheDatabase(t *testing.T) {
	clock := newFakeClock()
	log, _ := testLog()
	metrics := &pruneCounts{}
	p := newPruner(prunerDeps{Pool: func() *db.Pools { return nil }, Retention: time.Hour, Keep: 1, Every: time.Hour, First: time.Minute,
		Log: log, Clock: clock, Metrics: metrics})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.waitForWaiters(t, 1, "the first wait")
	clock.Advance(time.Minute)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, "the pruner to wait for the next pruning", func() (bool, error) {
		return len(clock.Asked()) == 2 && clock.Waiting() == 1, nil
	})
	if got := metrics.get(); len(got) != 0 {
		t.Errorf("Pruned called without a database: %v", got)
	}
	returnsWithin(t, 10*time.Second, "pruner Stop", p.Stop)
	p.Stop()
}

// ---- revoker -----------------------------------------------------------------------

// branchUsers are two users of one installation, one per branch.
var branchUsers = []erpsim.User{
	{Username: "sync-riyadh", Password: "riyadh-pw", CompanyID: 1, BranchID: 1},
	{Username: "sync-jeddah", Password: "jeddah-pw", CompanyID: 1, BranchID: 2},
}

// loggedIn is a login whose client holds a token of sim (it read the
// currencies once).
func loggedIn(t *testing.T, baseURL, username, password string) sync.Login {
	t.Helper()
	c, err := erp.New(erp.Options{BaseURL: baseURL, Username: username, Password: password, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); err != nil {
		t.Fatalf("%s: %v", username, err)
	}
	return sync.Login{Name: username, Client: c}
}

const revokePath = "/api/auth/revoke/"

func revokeRequests(sim *erpsim.Sim) []erpsim.Request {
	var out []erpsim.Request
	for _, r := range sim.Requests() {
		if r.Path == revokePath {
			out = append(out, r)
		}
	}
	return out
}

// TestRevoker: Stop revokes the token of every login of every source,
// each with its own token; an ERP that does not answer the revoke holds
// the stop no longer than the timeout, and keeps nobody else's token
// alive; a second Stop revokes nothing more.
func TestRevoker(t *testing.T) {
	branches, branchesURL := newSim(t, erpsim.Options{Users: branchUsers})
	hung, hungURL := newSim(t, erpsim.Options{})
	var a []sync.Login
	for _, u := range branchUsers {
		a = append(a, loggedIn(t, branchesURL, u.Username, u.Password))
	}
	b := []sync.Login{loggedIn(t, hungURL, goodUser, goodPassword)}
	if branches.ActiveTokens() != 2 || hung.ActiveTokens() != 1 {
		t.Fatalf("tokens before the stop: %d and %d, want 2 and 1", branches.ActiveTokens(), hung.ActiveTokens())
	}
	// The second ERP takes the revoke and does not answer it until the
	// client gives up (or the test ends: the server's Close waits for its
	// handlers). The body is read first: only then does the server notice
	// a client that went away.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hung.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != revokePath {
			return false
		}
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})

	const timeout = time.Second
	log, logs := testLog()
	rv := newRevoker(revokerDeps{Targets: []sync.Target{{Source: "branches", Logins: a}, {Source: "hung", Logins: b}},
		Timeout: timeout, Log: log})
	if err := rv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(revokeRequests(branches)) + len(revokeRequests(hung)); n != 0 {
		t.Fatalf("%d revokes before Stop", n)
	}
	// The bound is the timeout; the slack is for a loaded CI machine.
	took := returnsWithin(t, timeout+10*time.Second, "revoker Stop", rv.Stop)
	if took > timeout+2*time.Second {
		t.Errorf("Stop took %s with an ERP hanging; the revoke timeout is %s", took, timeout)
	}
	if got := branches.Revocations(); got != 2 {
		t.Errorf("the two-login ERP saw %d revocations, want 2", got)
	}
	if got := branches.ActiveTokens(); got != 0 {
		t.Errorf("%d tokens of the two-login ERP still active", got)
	}
	var users []string
	for _, r := range revokeRequests(branches) {
		users = append(users, r.Username)
	}
	slices.Sort(users)
	if want := []string{"sync-jeddah", "sync-riyadh"}; !slices.Equal(users, want) {
		t.Errorf("revokes came with the tokens of %v, want one of each login %v", users, want)
	}
	if got := len(revokeRequests(hung)); got != 1 {
		t.Errorf("the hanging ERP was asked %d times, want 1", got)
	}
	if !strings.Contains(logs.String(), "could not revoke the ERP token") || !strings.Contains(logs.String(), "source=hung") {
		t.Errorf("no warning about the token of the hanging source:\n%s", logs.String())
	}

	// A client forgets a token it revoked, so a second revoke pass would
	// send nothing anyway; give one login a fresh token to see that the
	// second Stop makes no pass at all.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a[0].Client.Get(ctx, "/accounts/api/currencies/", nil); err != nil || branches.ActiveTokens() != 1 {
		t.Fatalf("logging in again: %v (%d tokens)", err, branches.ActiveTokens())
	}
	returnsWithin(t, time.Second, "a second revoker Stop", rv.Stop)
	if n, m := len(revokeRequests(branches)), len(revokeRequests(hung)); n != 2 || m != 1 || branches.ActiveTokens() != 1 {
		t.Errorf("after a second Stop the ERPs saw %d and %d revokes (%d tokens left), want still 2 and 1 (1 left): Stop revokes once",
			n, m, branches.ActiveTokens())
	}
	if err := a[0].Client.Close(ctx); err != nil {
		t.Errorf("revoking the fresh token: %v", err)
	}
}

// ---- helpers --------------------------------------------------------------------------

func count(t *testing.T, q *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
